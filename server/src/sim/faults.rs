//! Fault injection (crashes, restarts, partitions and bridges, loss, and an
//! operator discarding a restarting server's history, one at a time) during the
//! chaos phase, and
//! the liveness phase: heal everything, restart everyone, then require a leader to
//! commit a new write that every server applies, with equal trees.

use super::workload::Asked;
use super::world::{World, MARKER_REQUEST, TICK};
use crate::replica::Write;
use crate::txn::TxnOp;
use crate::zab::{Role, ServerId};

impl World {
    pub(super) fn up_ids(&self, up: bool) -> Vec<ServerId> {
        self.servers
            .iter()
            .filter(|(_, s)| s.up() == up)
            .map(|(id, _)| *id)
            .collect()
    }

    fn pick(&mut self, ids: &[ServerId]) -> Option<ServerId> {
        if ids.is_empty() {
            return None;
        }
        Some(ids[self.rng.faults.below(ids.len() as u64) as usize])
    }

    pub(super) fn fault(&mut self) -> Result<(), String> {
        let all: Vec<ServerId> = self.servers.keys().copied().collect();
        match self.rng.faults.below(115) {
            0..=14 => {
                let up = self.up_ids(true);
                if let Some(id) = self.pick(&up) {
                    self.crash(id)?;
                }
            }
            15..=36 => {
                let down = self.up_ids(false);
                if let Some(id) = self.pick(&down) {
                    self.restart(id)?;
                }
            }
            37..=42 => {
                // A bridge: one server hears everyone, two sides hear only it and
                // their own side (ZooKeeper's election stalls on some of these).
                if let Some(bridge) = self.pick(&all) {
                    let side: Vec<ServerId> = all
                        .iter()
                        .copied()
                        .filter(|&s| s != bridge && self.rng.faults.below(2) == 0)
                        .collect();
                    self.log(format_args!("bridge {bridge} between {side:?} | rest"));
                    for &a in all.iter().filter(|&&a| a != bridge) {
                        for &b in all.iter().filter(|&&b| b != bridge) {
                            if side.contains(&a) != side.contains(&b) {
                                self.net.blocked.insert((a, b));
                            }
                        }
                    }
                }
            }
            43..=50 => {
                let side: Vec<ServerId> = all
                    .iter()
                    .copied()
                    .filter(|_| self.rng.faults.below(2) == 0)
                    .collect();
                self.log(format_args!("partition {side:?} | rest"));
                for &a in &all {
                    for &b in &all {
                        if side.contains(&a) != side.contains(&b) {
                            self.net.blocked.insert((a, b));
                        }
                    }
                }
            }
            51..=60 => {
                let (a, b) = (self.pick(&all), self.pick(&all));
                if let (Some(a), Some(b)) = (a, b) {
                    self.log(format_args!("one-way block {a} -> {b}"));
                    self.net.blocked.insert((a, b));
                }
            }
            61..=75 => {
                let leaders = self.serving_leaders();
                if let Some(l) = self.pick(&leaders) {
                    self.log(format_args!("isolate leader {l}"));
                    for &b in &all {
                        self.net.blocked.insert((l, b));
                        self.net.blocked.insert((b, l));
                    }
                }
            }
            76..=94 => {
                self.log(format_args!("heal partitions"));
                self.net.blocked.clear();
            }
            95..=99 => {
                let (loss, dup) = (self.rng.faults.below(80), self.rng.faults.below(40));
                self.log(format_args!("loss {loss}‰ dup {dup}‰"));
                self.net.loss_per_mille = loss;
                self.net.dup_per_mille = dup;
            }
            100..=107 => {
                // A pause (SIGSTOP, a long GC): memory kept, no ticks, nothing read;
                // on resume its clock has jumped.
                let up = self.up_ids(true);
                if let Some(id) = self.pick(&up) {
                    let ticks = 5 + self.rng.faults.below(55);
                    self.log(format_args!("pause {id} for {ticks} ticks"));
                    self.stats.pauses += 1;
                    self.paused.insert(id, self.now + ticks * TICK);
                }
            }
            _ => {
                let up = self.up_ids(true);
                if let Some(id) = self.pick(&up) {
                    self.log(format_args!("the next disk write of {id} fails"));
                    if let Some(s) = self.servers.get_mut(&id) {
                        s.fail_next_write = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// A running follower or observer, not paused, stops reading its peers for 5
    /// to 60 ticks (a leader always reads them: the pipeline's back-pressure rule).
    pub(super) fn deafen(&mut self) {
        let now = self.now;
        let candidates: Vec<ServerId> = self
            .servers
            .iter()
            .filter(|(id, s)| {
                s.engine
                    .as_ref()
                    .is_some_and(|e| e.node().status().role != Role::Leading)
                    && self.paused(**id).is_none()
                    && self.deaf(**id).is_none()
            })
            .map(|(id, _)| *id)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let id = candidates[self.rng.deaf.below(candidates.len() as u64) as usize];
        let ticks = 5 + self.rng.deaf.below(55);
        self.log(format_args!(
            "{id} stops reading its peers for {ticks} ticks"
        ));
        self.stats.deafened += 1;
        self.deaf.insert(id, now + ticks * TICK);
    }

    pub(super) fn crash(&mut self, id: ServerId) -> Result<(), String> {
        let torn = self.rng.faults.below(3) as usize;
        self.crash_with(id, torn)
    }

    /// Crashes server `id`: what it had not made durable is lost, except `torn` ops
    /// of its first pending write; a snapshot it was writing is lost.
    pub(super) fn crash_with(&mut self, id: ServerId, torn: usize) -> Result<(), String> {
        self.log(format_args!("crash {id} (torn {torn})"));
        self.stats.crashes += 1;
        self.mark(&[self.now, 7, id]);
        self.forget_requests(id);
        self.paused.remove(&id);
        self.deaf.remove(&id);
        let Some(s) = self.servers.get_mut(&id) else {
            return Ok(());
        };
        if s.snapshotting.is_some() {
            self.stats.snapshots_lost += 1;
        }
        s.crash(torn)
    }

    pub(super) fn restart(&mut self, id: ServerId) -> Result<(), String> {
        self.log(format_args!("restart {id}"));
        self.mark(&[self.now, 8, id]);
        let seed = self.rng.faults.next_u64();
        // As `concord --discard-local-state` would, now and then, while no other
        // server is still resyncing (a majority discarded at once loses data
        // whatever the protocol does).
        let discard = !self.healed
            && self.rng.faults.below(8) == 0
            && self.servers.values().all(|s| !s.must_resync());
        if discard && self.servers.contains_key(&id) {
            self.log(format_args!("discard the history of {id}"));
            self.stats.discards += 1;
        }
        let Some(s) = self.servers.get_mut(&id) else {
            return Ok(());
        };
        if discard {
            s.discard()?;
        }
        s.restart(seed, self.now)?;
        let (zxid, digest) = (s.tree().last_zxid(), s.tree().digest());
        self.check.on_digest(id, zxid, digest)?;
        self.drain(id)
    }

    /// Ends the chaos: no partitions, no loss, everyone up.
    pub(super) fn heal(&mut self) -> Result<(), String> {
        self.log(format_args!("heal everything; liveness phase"));
        self.healed = true;
        self.paused.clear();
        self.deaf.clear();
        for s in self.servers.values_mut() {
            s.fail_next_write = false;
        }
        self.net.blocked.clear();
        self.net.loss_per_mille = 0;
        self.net.dup_per_mille = 0;
        for id in self.up_ids(false) {
            self.restart(id)?;
        }
        Ok(())
    }

    /// Liveness phase: propose one marker write at the serving leader.
    pub(super) fn liveness_client(&mut self, leaders: &[ServerId]) -> Result<(), String> {
        if let Some((leader, _)) = self.marker {
            let still = leaders.contains(&leader);
            if still {
                return Ok(());
            }
        }
        let Some(&leader) = leaders.first() else {
            return Ok(());
        };
        let write = Write {
            session_id: 0,
            request_id: MARKER_REQUEST,
            fence: None,
            op: TxnOp::Reap {
                path: "/marker".into(),
            },
            checked_at: 0,
            trace: None,
        };
        self.marker = Some((leader, None));
        self.propose(leader, write, Asked::Other, None);
        self.drain(leader)
    }

    /// The marker is acked and every server applied it, with equal trees.
    pub(super) fn converged(&self) -> bool {
        let Some((_, Some(marker))) = self.marker else {
            return false;
        };
        if !self.check.acked.contains(&marker) {
            return false;
        }
        let mut digest = None;
        for s in self.servers.values() {
            let tree = s.tree();
            if !s.up() || tree.last_zxid() < marker {
                return false;
            }
            let d = (tree.last_zxid(), tree.digest());
            if digest.is_some_and(|x| x != d) {
                return false;
            }
            digest = Some(d);
        }
        true
    }
}
