//! Supervision of the replica's essential tasks (pipeline, ticker, snapshotter): a
//! task that panics, or ends while the server still runs, stops the server with a
//! fatal error instead of leaving it to answer health checks with nothing behind.
//!
//! ```text
//!   spawn_essential(name, task) ──▶ tokio::spawn(task) ──JoinHandle──▶ watcher task
//!        panicked, or ended before stop ──▶ shared.set_fatal(..) ──▶ run() exits 1
//! ```
//!
//! What it must not do: restart a task (its state is gone with it; the server stops,
//! and a supervisor outside the process restarts it from disk).

use std::any::Any;
use std::future::Future;
use std::sync::Arc;

use super::Shared;

/// Spawns `task` and watches it: a panic, or an end before the server stops, is fatal.
pub(super) fn spawn_essential<F>(shared: &Arc<Shared>, name: &'static str, task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    #[cfg(test)]
    let task = crash::wrap(name, task);
    let handle = tokio::spawn(task);
    let weak = Arc::downgrade(shared);
    tokio::spawn(async move {
        let outcome = handle.await;
        // Shared gone: the replica was dropped, and nobody is left to tell.
        let Some(shared) = weak.upgrade() else {
            return;
        };
        match outcome {
            Err(e) if e.is_panic() => {
                let why = panic_message(e.into_panic());
                shared.set_fatal(format!("the {name} task panicked: {why}"));
            }
            // Cancelled: the runtime is shutting down.
            Err(_) => {}
            Ok(()) if shared.stop.borrow().is_none() => {
                shared.set_fatal(format!("the {name} task ended while the server runs"));
            }
            Ok(()) => {}
        }
    });
}

/// The text a panic was raised with, when it has one.
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => (*s).to_owned(),
            Err(_) => "(no message)".to_owned(),
        },
    }
}

/// A test-only way to make a named essential task panic on demand: the replica is
/// started inside `CRASH.scope((name, notify), ..)`, and `notify.notify_one()` makes
/// the task of that name panic. Task-local, so tests running at once do not meet.
#[cfg(test)]
pub(crate) mod crash {
    use std::future::Future;
    use std::sync::Arc;

    use tokio::sync::Notify;

    tokio::task_local! {
        /// The task to crash, and the trigger.
        pub(crate) static CRASH: (&'static str, Arc<Notify>);
    }

    /// `task`, or `task` raced against the trigger when `name` is the one to crash.
    pub(super) fn wrap<F>(name: &'static str, task: F) -> impl Future<Output = ()> + Send
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let trigger = CRASH
            .try_with(|(target, notify)| (*target == name).then(|| notify.clone()))
            .ok()
            .flatten();
        async move {
            match trigger {
                Some(notify) => tokio::select! {
                    () = task => {}
                    () = notify.notified() => panic!("injected panic in the {name} task"),
                },
                None => task.await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::crash::CRASH;
    use crate::config::Config;
    use crate::replica::tests::create;
    use crate::replica::{Replica, ReplicaError};

    /// Each essential task, made to panic after the replica serves, stops it with a
    /// reason naming the task; writes are refused from then on.
    #[tokio::test]
    async fn a_panicking_essential_task_stops_the_replica() {
        for name in ["pipeline", "ticker", "snapshotter"] {
            let dir = tempfile::tempdir().unwrap();
            let config = Config {
                data_dir: dir.path().to_path_buf(),
                ..Config::default()
            };
            let notify = Arc::new(Notify::new());
            let replica = CRASH
                .scope((name, notify.clone()), Replica::start(&config))
                .await
                .unwrap();
            let c = replica.submit(0, 0, create("/before")).await.unwrap();
            assert!(c.result.is_ok(), "{name}: {:?}", c.result);
            notify.notify_one();
            let reason = tokio::time::timeout(Duration::from_secs(10), replica.stopped())
                .await
                .unwrap_or_else(|_| panic!("a panic in the {name} task went unnoticed"));
            assert!(
                reason.contains(name) && reason.contains("panicked"),
                "{name}: {reason}"
            );
            let after = replica.submit(0, 0, create("/after")).await;
            assert!(
                matches!(after, Err(ReplicaError::Unavailable(_))),
                "{name}: {after:?}"
            );
            replica.shutdown();
        }
    }

    /// The panic's own text reaches the reason.
    #[test]
    fn panic_messages_are_kept() {
        assert_eq!(super::panic_message(Box::new("static")), "static");
        assert_eq!(
            super::panic_message(Box::new(String::from("owned"))),
            "owned"
        );
        assert_eq!(super::panic_message(Box::new(7_u8)), "(no message)");
    }
}
