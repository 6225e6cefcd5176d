//! The queue logic shared by locks, semaphores and elections: join, wait until a
//! holder (watching only the window of predecessors), leave, update.
//!
//! What it must not do: decide holders itself (the tree does, at apply time), or
//! leave a node behind when a wait ends without handing the node to the caller.

use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use futures::FutureExt;

use super::{RecipeError, Recipes};
use crate::security::{Caller, Perms};
use crate::tree::{DataTree, EventKind, TxnResult};
use crate::txn::{Fence, QueueOp, TxnOp, Zxid};
use crate::watch::{WatchReceiver, WatchSpec};

/// What a join asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinSpec {
    /// The queue folder (`tree::queue::queue_path`).
    pub queue: String,
    pub session_id: u64,
    /// Identifies the caller for retries (adoption) and listings; may be empty.
    pub owner_id: String,
    pub value: Bytes,
    pub permits: u32,
    /// What the caller must still be allowed when the join is proposed (None: an
    /// admin, who may do anything).
    pub needs: Option<Needs>,
}

/// A permission a queue write needs when it is proposed: `perms` at the tree path
/// `path` for `caller`, checked by `Replica::submit_checked` (so a revocation
/// applied on the leader stops every later join, whichever server it came through).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needs {
    pub caller: Caller,
    pub path: String,
    pub perms: Perms,
}

impl Needs {
    fn check(&self, tree: &DataTree) -> Result<(), RecipeError> {
        tree.grants()
            .check(&self.caller, &self.path, self.perms)
            .map_err(RecipeError::Denied)
    }
}

impl Recipes {
    /// Submits a queue write, checked against `needs` if given.
    async fn submit_queue_op(
        &self,
        session_id: u64,
        fence: Option<Fence>,
        op: TxnOp,
        needs: Option<&Needs>,
    ) -> Result<crate::replica::Committed, RecipeError> {
        match needs {
            None => Ok(self.replica.submit_fenced(session_id, 0, fence, op).await?),
            Some(n) => {
                self.replica
                    .submit_checked(session_id, 0, fence, op, |t| n.check(t))
                    .await
            }
        }
    }
}

/// A member that holds its queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The member's node: the holder key.
    pub key: String,
    /// Its czxid: the fencing token.
    pub token: Zxid,
    /// The applied zxid when holding was observed.
    pub zxid: Zxid,
}

/// Removes a member's node if the call waiting on it goes away without handing it
/// over (timeout, error, or the gRPC call dropped).
struct Guard {
    recipes: Recipes,
    key: String,
    token: Zxid,
    /// Cleared when the node is handed to the caller or already removed.
    armed: bool,
}

impl Guard {
    fn new(recipes: &Recipes, key: &str, token: Zxid) -> Guard {
        recipes.shared.attach(key);
        Guard {
            recipes: recipes.clone(),
            key: key.to_string(),
            token,
            armed: true,
        }
    }

    /// The node goes to the caller: never remove it on this call's behalf.
    fn hand_over(mut self) {
        self.armed = false;
        self.recipes.shared.detach(&self.key, true);
    }

    /// Leaves the queue now (if this was the last call waiting on the node).
    async fn leave_now(mut self) {
        self.armed = false;
        if self.recipes.shared.detach(&self.key, false) {
            let _ = self.recipes.leave(&self.key, self.token).await;
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.armed || !self.recipes.shared.detach(&self.key, false) {
            return;
        }
        let recipes = self.recipes.clone();
        let (key, token) = (std::mem::take(&mut self.key), self.token);
        // Dropped inside the runtime (a cancelled call); outside it there is nothing
        // left to clean up for.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                match recipes.leave(&key, token).await {
                    Ok(_) => tracing::debug!(%key, "cancelled waiter left the queue"),
                    Err(e) => tracing::debug!(%key, error = %e, "cancelled waiter's node"),
                }
            });
        }
    }
}

impl Recipes {
    /// Joins the queue (or adopts the session's node with the same owner id) and
    /// waits until it holds, for at most `timeout` (None: until dropped).
    pub async fn acquire(
        &self,
        spec: &JoinSpec,
        timeout: Option<Duration>,
    ) -> Result<Holding, RecipeError> {
        let guard = self.join_guarded(spec, false).await?;
        let (key, token) = (guard.key.clone(), guard.token);
        let waited = match timeout {
            Some(t) => tokio::time::timeout(t, self.wait_holder(&key, token, spec.session_id))
                .await
                .unwrap_or_else(|_| {
                    Err(RecipeError::Timeout {
                        timeout_ms: u64::try_from(t.as_millis()).unwrap_or(u64::MAX),
                    })
                }),
            None => self.wait_holder(&key, token, spec.session_id).await,
        };
        match waited {
            Ok(holding) => {
                guard.hand_over();
                Ok(holding)
            }
            Err(e) => {
                guard.leave_now().await;
                Err(e)
            }
        }
    }

    /// Joins only if a permit is free now (else `LockHeld`), and returns the holding.
    pub async fn try_acquire(&self, spec: &JoinSpec) -> Result<Holding, RecipeError> {
        let guard = self.join_guarded(spec, true).await?;
        let (key, token) = (guard.key.clone(), guard.token);
        let (zxid, place) = self.replica.read(|t| (t.last_zxid(), t.queue_place(&key)));
        match place {
            Some(p) if p.token == token && p.is_holder() => {
                guard.hand_over();
                Ok(Holding { key, token, zxid })
            }
            // An adopted place that is still waiting (a retried Acquire's, whose call
            // keeps it: dropping this guard leaves it alone).
            _ => Err(crate::tree::TreeError::LockHeld {
                queue: spec.queue.clone(),
            }
            .into()),
        }
    }

    /// Joins in a task of its own and returns the guard of the member's node, so that
    /// a call dropped while its join is being committed still leaves no node behind:
    /// the detached task finishes the join, and the guard it returns is dropped with
    /// its output, which leaves the queue.
    async fn join_guarded(
        &self,
        spec: &JoinSpec,
        only_if_free: bool,
    ) -> Result<Guard, RecipeError> {
        let recipes = self.clone();
        let spec = spec.clone();
        let task = tokio::spawn(async move {
            let (key, token) = recipes.join(&spec, only_if_free).await?;
            Ok(Guard::new(&recipes, &key, token))
        });
        task.await.unwrap_or_else(|e| {
            Err(RecipeError::Unexpected(format!(
                "the join task failed: {e}"
            )))
        })
    }

    /// Submits the join; returns the member's key and token.
    async fn join(
        &self,
        spec: &JoinSpec,
        only_if_free: bool,
    ) -> Result<(String, Zxid), RecipeError> {
        let op = TxnOp::Queue(QueueOp::Join {
            queue: spec.queue.clone(),
            owner_id: spec.owner_id.clone(),
            value: spec.value.clone(),
            permits: spec.permits,
            only_if_free,
        });
        let committed = self
            .submit_queue_op(spec.session_id, None, op, spec.needs.as_ref())
            .await?;
        match committed.result? {
            TxnResult::Created { path, stat } => Ok((path, stat.czxid)),
            other => Err(RecipeError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Removes the member `key` created by `token` (0: any); returns the txn's zxid.
    pub async fn leave(&self, key: &str, token: Zxid) -> Result<Zxid, RecipeError> {
        let op = TxnOp::Queue(QueueOp::Leave {
            path: key.to_string(),
            token,
        });
        let committed = self.replica.submit(0, 0, op).await?;
        committed.result?;
        Ok(committed.zxid)
    }

    /// Replaces the value of member `key`, fenced: only while `token` holds; checked
    /// against `needs` if given.
    pub async fn update(
        &self,
        key: &str,
        token: Zxid,
        value: Bytes,
        needs: Option<&Needs>,
    ) -> Result<Zxid, RecipeError> {
        let op = TxnOp::Queue(QueueOp::Update {
            path: key.to_string(),
            token,
            value,
        });
        let fence = Fence {
            key: key.to_string(),
            token,
        };
        let committed = self.submit_queue_op(0, Some(fence), op, needs).await?;
        committed.result?;
        Ok(committed.zxid)
    }

    /// Waits until member `key` (created by `token`) holds its queue.
    async fn wait_holder(
        &self,
        key: &str,
        token: Zxid,
        session_id: u64,
    ) -> Result<Holding, RecipeError> {
        loop {
            let (zxid, place) = self.replica.read(|t| (t.last_zxid(), t.queue_place(key)));
            let place = match place {
                Some(p) if p.token == token => p,
                _ => return Err(self.lost(key, session_id)),
            };
            if place.is_holder() {
                return Ok(Holding {
                    key: key.to_string(),
                    token,
                    zxid,
                });
            }
            // Own node first: index 0 in the select below.
            let mut receivers = vec![self.watch_deleted(key, zxid)?];
            for path in &place.window {
                receivers.push(self.watch_deleted(path, zxid)?);
            }
            let nexts = receivers.iter_mut().map(|r| r.next().boxed());
            let (event, index, _) = select_all(nexts).await;
            match event {
                Some(Ok(_)) if index > 0 => {
                    self.shared
                        .wakeups
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Some(Ok(_)) => return Err(self.lost(key, session_id)),
                Some(Err(e)) => return Err(e.into()),
                None => {
                    return Err(crate::replica::ReplicaError::Unavailable(
                        "the server is stopping".into(),
                    )
                    .into())
                }
            }
        }
    }

    /// A once-watch for the deletion of `path` after `zxid`.
    fn watch_deleted(&self, path: &str, zxid: Zxid) -> Result<WatchReceiver, RecipeError> {
        let spec = WatchSpec {
            path: path.to_string(),
            recursive: false,
            kinds: vec![EventKind::Deleted],
            once: true,
            with_data: false,
        };
        Ok(self.replica.hub().register(spec, zxid)?)
    }

    /// The error for a member whose node went away.
    fn lost(&self, key: &str, session_id: u64) -> RecipeError {
        let alive = self.replica.read(|t| t.session(session_id).is_some());
        RecipeError::Lost {
            key: key.to_string(),
            session_id,
            expired: !alive,
        }
    }
}
