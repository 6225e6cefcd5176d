//! Reclaiming the place of an Acquire or Campaign whose call was dropped in flight.
//!
//! The server leaves no waiter behind a cancelled call, but it cannot know that an
//! answer it sent was never read: an Acquire (or Campaign) dropped just as the server
//! granted it leaves its place holding the lock (or leading) for nobody, until the
//! session ends. So a recipe sends each such call inside [`Reclaim::guard`]: if the
//! call is dropped before it returns, the same call is sent once more from a task on
//! the current tokio runtime, with the same session and owner (participant) id and a
//! 1 ms timeout. The server adopts the existing place (or makes one):
//!
//! ```text
//!   call dropped in flight ─▶ spawn: Acquire / Campaign (same id, timeout 1 ms)
//!        ├─ held / leading ─▶ Release / Resign it
//!        ├─ TIMEOUT        ─▶ nothing to do: the server removed the place (or left it
//!        │                    to a call of the same id that still waits on it)
//!        └─ NO_NODE, SESSION_EXPIRED, other errors ─▶ nothing left (or best effort:
//!                             the place goes with the session)
//! ```
//!
//! Outside a tokio runtime nothing is sent (`Drop` cannot wait): the place then goes
//! with the session. What it must not do: retry without end, or reclaim a call that
//! returned (its caller owns the answer).

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use crate::client::Client;
use crate::recipes::LockOptions;

/// The timeout of the reclaiming call: the server answers at once if the place holds
/// (or leads), else removes it when the millisecond is over.
const RECLAIM_TIMEOUT_MS: i64 = 1;

/// Which kind of place a dropped call may have left.
#[derive(Debug, Clone)]
enum Place {
    /// A place in lock `name`'s queue, acquired for `permits`.
    Lock { permits: u32 },
    /// A candidacy in election `name`.
    Candidacy,
}

/// The call to send again if the guarded one is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Reclaim {
    client: Client,
    session_id: u64,
    name: String,
    /// The owner id (locks) or participant id (elections) of the dropped call.
    id: String,
    place: Place,
}

/// Reclaims spawned by dropped calls that a recipe's `close` waits for, so that it
/// returns with nothing left on the server.
#[derive(Debug, Default)]
pub(crate) struct Reclaims {
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Reclaims {
    /// Waits for every reclaim spawned so far.
    pub(crate) async fn wait(&self) {
        let tasks = std::mem::take(&mut *crate::latch::lock(&self.tasks));
        for task in tasks {
            let _ = task.await;
        }
    }

    fn keep(&self, task: JoinHandle<()>) {
        let mut tasks = crate::latch::lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }
}

impl Reclaim {
    /// For an Acquire of lock `name` with `options` (its owner id and permits).
    pub(crate) fn lock(
        client: &Client,
        session_id: u64,
        name: &str,
        options: &LockOptions,
    ) -> Reclaim {
        Reclaim {
            client: client.clone(),
            session_id,
            name: name.to_owned(),
            id: options.owner_id.clone(),
            place: Place::Lock {
                permits: options.permits,
            },
        }
    }

    /// For a Campaign in election `name` as `participant_id`.
    pub(crate) fn candidacy(
        client: &Client,
        session_id: u64,
        name: &str,
        participant_id: &str,
    ) -> Reclaim {
        Reclaim {
            client: client.clone(),
            session_id,
            name: name.to_owned(),
            id: participant_id.to_owned(),
            place: Place::Candidacy,
        }
    }

    /// Awaits `call`; if it is dropped before it returns, reclaims its place from a
    /// task on the current runtime (kept in `waited`, if given, for `close`).
    pub(crate) async fn guard<F: Future>(
        self,
        waited: Option<Arc<Reclaims>>,
        call: F,
    ) -> F::Output {
        let mut armed = Armed {
            reclaim: Some(self),
            waited,
        };
        let answer = call.await;
        armed.reclaim = None;
        answer
    }

    /// Sends the call once more with a 1 ms timeout and gives up what it holds. Best
    /// effort: a failure leaves the place to the session's end.
    async fn run(self) {
        if self.id.is_empty() {
            // Without an id the server cannot adopt the place.
            return;
        }
        match self.place {
            Place::Lock { permits } => {
                let options = LockOptions {
                    timeout_ms: RECLAIM_TIMEOUT_MS,
                    owner_id: self.id.clone(),
                    permits,
                };
                if let Ok(hold) = self
                    .client
                    .acquire(&self.name, self.session_id, &options)
                    .await
                {
                    let _ = self.client.release(&hold.key, hold.token).await;
                }
            }
            Place::Candidacy => {
                if let Ok(p) = self
                    .client
                    .campaign(
                        &self.name,
                        self.session_id,
                        &self.id,
                        Vec::new(),
                        RECLAIM_TIMEOUT_MS,
                    )
                    .await
                {
                    let _ = self.client.resign(&p.key, p.term).await;
                }
            }
        }
    }
}

/// Spawns its reclaim when dropped still armed (the call did not return).
struct Armed {
    reclaim: Option<Reclaim>,
    waited: Option<Arc<Reclaims>>,
}

impl Drop for Armed {
    fn drop(&mut self) {
        let Some(reclaim) = self.reclaim.take() else {
            return;
        };
        // Outside a runtime nothing can be sent: the place goes with the session.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let task = runtime.spawn(reclaim.run());
            if let Some(waited) = &self.waited {
                waited.keep(task);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A client of a port nobody listens on: a reclaim sent there fails at once.
    fn nowhere() -> Client {
        Client::connect_lazy("http://127.0.0.1:1").unwrap()
    }

    fn reclaim(client: &Client) -> Reclaim {
        Reclaim::candidacy(client, 7, "e", "p-1")
    }

    fn kept(reclaims: &Reclaims) -> usize {
        crate::latch::lock(&reclaims.tasks).len()
    }

    #[tokio::test]
    async fn a_call_that_returns_is_not_reclaimed() {
        let reclaims = Arc::new(Reclaims::default());
        let answer = reclaim(&nowhere())
            .guard(Some(Arc::clone(&reclaims)), async { 42 })
            .await;
        assert_eq!(answer, 42);
        assert_eq!(kept(&reclaims), 0);
    }

    #[tokio::test]
    async fn a_call_dropped_in_flight_is_reclaimed_and_close_can_wait_for_it() {
        let reclaims = Arc::new(Reclaims::default());
        let call =
            reclaim(&nowhere()).guard(Some(Arc::clone(&reclaims)), std::future::pending::<()>());
        // Polled once (in flight), then dropped.
        assert!(tokio::time::timeout(Duration::from_millis(1), call)
            .await
            .is_err());
        assert_eq!(kept(&reclaims), 1);
        tokio::time::timeout(Duration::from_secs(10), reclaims.wait())
            .await
            .expect("the reclaim ends (its call fails)");
        assert_eq!(kept(&reclaims), 0);
    }

    #[test]
    fn outside_a_runtime_nothing_is_sent() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = runtime.block_on(async { nowhere() });
        let reclaims = Arc::new(Reclaims::default());
        let armed = Armed {
            reclaim: Some(reclaim(&client)),
            waited: Some(Arc::clone(&reclaims)),
        };
        drop(runtime);
        drop(armed);
        assert_eq!(kept(&reclaims), 0);
    }
}
