//! Elections: the queue `/concord/elections/NAME` with one permit. The leader is the
//! first member; its term is its czxid; its value is in its node's data.
//!
//! `Observer` follows one election from a consistent start: it reads the members at
//! zxid z, registers a recursive watch from z, and applies each txn's events to its
//! own copy of the queue, so it reports every leader change in zxid order, with
//! nothing lost and nothing twice.
//!
//! What it must not do: recompute the leader from a later tree (that would skip
//! changes), or block the applier (the watch queue is bounded; a slow observer is cut).

use std::collections::BTreeMap;

use super::lock::checked_queue;
use super::{RecipeError, Recipes};
use crate::tree::path;
use crate::tree::queue::{decode_entry, QueueEntry, ELECTIONS_ROOT};
use crate::tree::EventKind;
use crate::txn::Zxid;
use crate::watch::{WatchReceiver, WatchSpec};

/// The queue of election `name`, or BadArguments if `name` is not one path segment.
pub fn election_queue(name: &str) -> Result<String, RecipeError> {
    checked_queue(ELECTIONS_ROOT, name, "election")
}

impl Recipes {
    /// Every candidate of election `name` in order, leader first, and the applied zxid.
    pub fn participants(&self, name: &str) -> Result<(Zxid, Vec<QueueEntry>), RecipeError> {
        let queue = election_queue(name)?;
        Ok(self
            .replica
            .read(|t| (t.last_zxid(), t.queue_entries(&queue, 0))))
    }

    /// The leader of election `name` (None: no candidate), and the applied zxid.
    pub fn leader(&self, name: &str) -> Result<(Zxid, Option<QueueEntry>), RecipeError> {
        let (zxid, mut members) = self.participants(name)?;
        members.truncate(1);
        Ok((zxid, members.pop()))
    }

    /// Starts following the leader of election `name`.
    pub fn observe(&self, name: &str) -> Result<Observer, RecipeError> {
        let queue = election_queue(name)?;
        let (zxid, members) = self
            .replica
            .read(|t| (t.last_zxid(), t.queue_entries(&queue, 0)));
        let spec = WatchSpec {
            path: queue.clone(),
            recursive: true,
            kinds: Vec::new(),
            once: false,
            with_data: true,
        };
        let receiver = self.replica.hub().register(spec, zxid)?;
        let members = members
            .into_iter()
            .map(|e| (path::name(&e.key).to_string(), e))
            .collect();
        Ok(Observer {
            queue,
            members,
            receiver,
            zxid,
            reported: None,
        })
    }
}

/// Follows one election's leader; see the module doc.
pub struct Observer {
    queue: String,
    /// The members as of `zxid`, by node name (= sequence order).
    members: BTreeMap<String, QueueEntry>,
    receiver: WatchReceiver,
    /// The zxid the copy reflects.
    zxid: Zxid,
    /// The last leader reported (None before the first report).
    reported: Option<Option<QueueEntry>>,
}

impl Observer {
    /// If the observer has reported everything it has seen, the zxid its election
    /// is complete through (for progress messages); None while changes wait.
    pub fn idle_progress(&self) -> Option<Zxid> {
        let leader = self.members.values().next();
        if self.reported.as_ref().map(Option::as_ref) != Some(leader) {
            return None;
        }
        self.receiver.idle_progress().map(|z| z.max(self.zxid))
    }

    /// The next leader change (the current leader first), with the zxid it happened
    /// at. `None` inside means no leader. Ends with None when the server stops.
    pub async fn next(&mut self) -> Option<Result<(Zxid, Option<QueueEntry>), RecipeError>> {
        loop {
            let leader = self.members.values().next().cloned();
            if self.reported.as_ref() != Some(&leader) {
                self.reported = Some(leader.clone());
                return Some(Ok((self.zxid, leader)));
            }
            let batch = match self.receiver.next().await? {
                Ok(batch) => batch,
                Err(e) => return Some(Err(e.into())),
            };
            self.zxid = batch.zxid;
            for event in &batch.events {
                self.apply(event);
            }
        }
    }

    /// Applies one event of the election's subtree to the copy.
    fn apply(&mut self, event: &crate::tree::Event) {
        if path::parent(&event.path) != self.queue {
            return;
        }
        let name = path::name(&event.path).to_string();
        match event.kind {
            EventKind::Created | EventKind::DataChanged => {
                let (owner_id, value) = decode_entry(&event.data);
                let entry = QueueEntry {
                    key: event.path.to_string(),
                    token: event.stat.czxid,
                    session_id: event.stat.ephemeral_owner,
                    owner_id,
                    value,
                };
                self.members.insert(name, entry);
            }
            EventKind::Deleted => {
                self.members.remove(&name);
            }
            EventKind::ChildrenChanged => {}
        }
    }
}
