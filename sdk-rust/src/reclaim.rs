//! Reclaiming the place of an Acquire or Campaign whose call was dropped in flight,
//! or failed with its outcome unknown.
//!
//! The server leaves no waiter behind a cancelled call, but it cannot know that an
//! answer it sent was never read: an Acquire (or Campaign) dropped just as the server
//! granted it leaves its place holding the lock (or leading) for nobody, until the
//! session ends. The same holds for a call that failed after it was sent (a lost
//! connection, the client's own deadline). So a recipe sends each such call inside
//! [`Reclaim::guard`]: if the call is dropped before it returns, or fails with its
//! outcome unknown, the same call is sent once more from a task on
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
use crate::error::{Error, Origin};
use crate::proto::ErrorCode;
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
        let tasks = std::mem::take(&mut *crate::lock(&self.tasks));
        for task in tasks {
            let _ = task.await;
        }
    }

    fn keep(&self, task: JoinHandle<()>) {
        let mut tasks = crate::lock(&self.tasks);
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

    /// Awaits `call`; if it is dropped before it returns, or returns a failure whose
    /// outcome is unknown (see [`outcome_unknown`]), reclaims its place from a task
    /// on the current runtime (kept in `waited`, if given, for `close`).
    pub(crate) async fn guard<T, F: Future<Output = Result<T, Error>>>(
        self,
        waited: Option<Arc<Reclaims>>,
        call: F,
    ) -> F::Output {
        let mut armed = Armed {
            reclaim: Some(self),
            waited,
        };
        let answer = call.await;
        if !matches!(&answer, Err(e) if outcome_unknown(e)) {
            armed.reclaim = None;
        }
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

/// True for a failed Acquire or Campaign that may have been granted all the same: a
/// failure after the call was sent (a lost connection, the client's own deadline)
/// whose answer, had it come, could have been "held". The server's own TIMEOUT (it
/// removed the waiter) and refusals are not.
fn outcome_unknown(e: &Error) -> bool {
    e.is_indeterminate() && !(e.origin() == Origin::Server && e.code() == ErrorCode::Timeout)
}

/// Spawns its reclaim when dropped still armed (the call did not return, or its
/// outcome is unknown).
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
        crate::lock(&reclaims.tasks).len()
    }

    #[tokio::test]
    async fn a_call_that_returns_is_not_reclaimed() {
        let reclaims = Arc::new(Reclaims::default());
        let answer: Result<u32, Error> = reclaim(&nowhere())
            .guard(Some(Arc::clone(&reclaims)), async { Ok(42) })
            .await;
        assert_eq!(answer.ok(), Some(42));
        assert_eq!(kept(&reclaims), 0);
    }

    #[tokio::test]
    async fn a_failure_of_unknown_outcome_is_reclaimed_and_the_servers_timeout_is_not() {
        let reclaims = Arc::new(Reclaims::default());
        let deadline = Error::deadline(crate::CallKind::Write, Duration::from_secs(1));
        let answer: Result<(), Error> = reclaim(&nowhere())
            .guard(Some(Arc::clone(&reclaims)), async { Err(deadline) })
            .await;
        assert_eq!(answer.expect_err("failed").code(), ErrorCode::Timeout);
        assert_eq!(kept(&reclaims), 1, "the client's deadline: granted or not?");
        reclaims.wait().await;
        let status = tonic::Status::deadline_exceeded("TIMEOUT: no permit within 5 ms");
        let server = Error::from_status(&status, crate::CallKind::Write);
        assert_eq!(server.origin(), Origin::Server);
        let answer: Result<(), Error> = reclaim(&nowhere())
            .guard(Some(Arc::clone(&reclaims)), async { Err(server) })
            .await;
        assert!(answer.is_err());
        assert_eq!(kept(&reclaims), 0, "the server removed its waiter itself");
    }

    #[tokio::test]
    async fn a_call_dropped_in_flight_is_reclaimed_and_close_can_wait_for_it() {
        let reclaims = Arc::new(Reclaims::default());
        let call = reclaim(&nowhere()).guard(
            Some(Arc::clone(&reclaims)),
            std::future::pending::<Result<(), Error>>(),
        );
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
