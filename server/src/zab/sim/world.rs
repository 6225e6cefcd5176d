//! The simulated world: servers, a network with delay, loss, duplication,
//! reordering and partitions, disks with latency, crashes and restarts, and clients;
//! one thread, one seeded RNG, one event queue ordered by (time, sequence).
//!
//! ```text
//!   queue.pop ─▶ Tick / Deliver / DiskDone / Fault / Client ─▶ node ─▶ drain Ready
//!      ▲             messages ─▶ network (drop, delay, dup) ─▶ queue       │
//!      └──────────── persist ─▶ disk queue ─▶ DiskDone ─▶ persisted(n) ◀───┘
//!                    committed ─▶ tree.apply ─▶ Checker
//! ```
//! Time is in units; a tick is `TICK` units.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::check::{fnv, Checker, FNV_START};
use super::server::{PendingWrite, SimServer};
use super::SimOptions;
use crate::txn::{CreateMode, CreateOp, DeleteOp, SetOp, Txn, TxnOp, Zxid};
use crate::zab::rng::Rng;
use crate::zab::{Config, LeaderMsg, Message, Ready, Role, ServerId, SyncKind};

/// Time units per tick.
pub(crate) const TICK: u64 = 10;

#[derive(Debug)]
pub(super) enum Event {
    Tick(ServerId),
    Deliver {
        from: ServerId,
        to: ServerId,
        msg: Message,
    },
    DiskDone {
        id: ServerId,
        incarnation: u64,
    },
    Fault,
    Client,
}

/// The network's current misbehaviour.
#[derive(Debug, Default)]
pub(super) struct Net {
    pub(super) loss_per_mille: u64,
    pub(super) dup_per_mille: u64,
    pub(super) delay_max: u64,
    /// Directed links that drop everything.
    pub(super) blocked: BTreeSet<(ServerId, ServerId)>,
}

/// Counts for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub events: u64,
    pub crashes: u64,
    pub messages: u64,
    pub committed: usize,
    pub acked: usize,
    pub liveness_ticks: u64,
    /// Syncs sent, by kind.
    pub diffs: u64,
    pub truncs: u64,
    pub snaps: u64,
    /// Read indexes answered Ok.
    pub reads: u64,
    /// Leaders established.
    pub leaders: u64,
    /// Histories discarded (must resync).
    pub discards: u64,
}

pub(crate) struct World {
    pub(super) opts: SimOptions,
    pub(super) rng: Rng,
    /// Draws whether a restart discards the server's history: a stream of its own, so
    /// a seed runs as it did before discards existed until its first discard.
    pub(super) discard_rng: Rng,
    pub(super) now: u64,
    pub(super) seq: u64,
    pub(super) queue: BTreeMap<(u64, u64), Event>,
    pub(super) servers: BTreeMap<ServerId, SimServer>,
    pub(super) net: Net,
    pub(super) check: Checker,
    /// A hash of everything that happened, for determinism checks.
    pub(super) trace: u64,
    pub(super) next_request: u64,
    /// Read-index requests: (server, id) → newest acked write when asked.
    pub(super) reads: BTreeMap<(ServerId, u64), Zxid>,
    pub(super) snap_every: u64,
    pub(super) disk_delay_max: u64,
    pub(super) healed: bool,
    /// The liveness write: (leader, zxid).
    pub(super) marker: Option<(ServerId, Zxid)>,
    pub(super) stats: Stats,
}

impl World {
    pub(crate) fn new(opts: SimOptions) -> Result<World, String> {
        let mut rng = Rng::new(opts.seed);
        let voters: Vec<ServerId> = (1..=opts.voters as u64).collect();
        let observers: Vec<ServerId> =
            (opts.voters as u64 + 1..=(opts.voters + opts.observers) as u64).collect();
        let mut servers = BTreeMap::new();
        for &id in voters.iter().chain(&observers) {
            let mut cfg = Config::new(id, voters.clone(), observers.clone());
            cfg.planted_bug = opts.bug;
            servers.insert(id, SimServer::new(cfg, rng.next_u64())?);
        }
        let net = Net {
            loss_per_mille: rng.below(40),
            dup_per_mille: rng.below(30),
            delay_max: 1 + rng.below(15),
            blocked: BTreeSet::new(),
        };
        let mut w = World {
            snap_every: 3 + rng.below(30),
            disk_delay_max: 1 + rng.below(25),
            discard_rng: Rng::new(opts.seed ^ 0xd15c_a4d0_5eed_0001),
            opts,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            servers,
            net,
            check: Checker::default(),
            trace: FNV_START,
            next_request: 0,
            reads: BTreeMap::new(),
            healed: false,
            marker: None,
            stats: Stats::default(),
        };
        let ids: Vec<ServerId> = w.servers.keys().copied().collect();
        for id in ids {
            let phase = w.rng.below(TICK);
            w.at(phase, Event::Tick(id));
            w.drain(id)?;
        }
        w.at(20, Event::Fault);
        w.at(5, Event::Client);
        Ok(w)
    }

    fn at(&mut self, delay: u64, ev: Event) {
        self.seq += 1;
        self.queue.insert((self.now + delay, self.seq), ev);
    }

    pub(super) fn mark(&mut self, parts: &[u64]) {
        for p in parts {
            self.trace = fnv(self.trace, &p.to_le_bytes());
        }
    }

    pub(super) fn log(&self, what: std::fmt::Arguments<'_>) {
        if self.opts.verbose {
            eprintln!("[{:>6}] {what}", self.now);
        }
    }

    /// Runs the chaos phase, then heals and requires progress.
    pub(crate) fn run(&mut self) -> Result<(), String> {
        let chaos_end = self.opts.chaos_ticks * TICK;
        self.run_until(chaos_end, |_| false)?;
        self.heal()?;
        let deadline = chaos_end + self.opts.liveness_ticks * TICK;
        self.run_until(deadline, World::converged)?;
        if !self.converged() {
            return Err(format!(
                "liveness: no converged commit within {} ticks after healing (marker {:?})",
                self.opts.liveness_ticks, self.marker
            ));
        }
        self.stats.liveness_ticks = (self.now - chaos_end) / TICK;
        self.check.check_acked()?;
        self.stats.committed = self.check.committed_count();
        self.stats.acked = self.check.acked.len();
        Ok(())
    }

    fn run_until(&mut self, end: u64, done: fn(&World) -> bool) -> Result<(), String> {
        while let Some((&(t, _), _)) = self.queue.first_key_value() {
            if t > end || done(self) {
                return Ok(());
            }
            let Some((_, ev)) = self.queue.pop_first() else {
                return Ok(());
            };
            self.now = t;
            self.stats.events += 1;
            self.handle(ev)?;
        }
        Ok(())
    }

    fn handle(&mut self, ev: Event) -> Result<(), String> {
        match ev {
            Event::Tick(id) => {
                self.at(TICK, Event::Tick(id));
                self.mark(&[self.now, 1, id]);
                if let Some(node) = self.node(id) {
                    node.tick();
                    self.drain(id)?;
                }
            }
            Event::Deliver { from, to, msg } => {
                self.mark(&[self.now, 2, from, to, msg_code(&msg)]);
                if self.opts.verbose && std::env::var("ZAB_SIM_MSGS").is_ok() {
                    self.log(format_args!("{from} -> {to}: {msg:?}"));
                }
                if let Some(node) = self.node(to) {
                    node.step(from, msg);
                    self.drain(to)?;
                }
            }
            Event::DiskDone { id, incarnation } => self.disk_done(id, incarnation)?,
            Event::Fault => {
                if !self.healed {
                    self.fault()?;
                    let next = 20 + self.rng.below(60);
                    self.at(next, Event::Fault);
                }
            }
            Event::Client => {
                self.client();
                let next = 2 + self.rng.below(8);
                self.at(next, Event::Client);
            }
        }
        Ok(())
    }

    pub(super) fn node(&mut self, id: ServerId) -> Option<&mut crate::zab::Node> {
        self.servers.get_mut(&id).and_then(|s| s.node.as_mut())
    }

    /// Handles every Ready of server `id` until it has nothing left.
    pub(super) fn drain(&mut self, id: ServerId) -> Result<(), String> {
        loop {
            let Some(node) = self.node(id) else {
                return Ok(());
            };
            let ready = node.ready();
            if ready.is_empty() {
                return Ok(());
            }
            self.handle_ready(id, ready)?;
        }
    }

    fn handle_ready(&mut self, id: ServerId, r: Ready) -> Result<(), String> {
        if let Some(why) = r.fatal {
            return Err(format!("server {id} stopped on a broken invariant: {why}"));
        }
        if let Some(st) = r.status {
            self.log(format_args!("{id}: {st:?}"));
            self.mark(&[self.now, 3, id, st.role as u64, u64::from(st.epoch)]);
            if st.role == Role::Leading && st.serving {
                self.stats.leaders += 1;
                self.check.on_established(st.epoch, id)?;
            }
        }
        for env in r.messages {
            self.send(id, env.to, env.msg);
        }
        if !r.persist.is_empty() {
            self.write(id, r.number, r.persist);
        }
        for txn in r.committed {
            self.apply(id, &txn)?;
        }
        for read in r.reads {
            let asked = self.reads.remove(&(id, read.id)).unwrap_or(0);
            if let Ok(index) = read.result {
                self.stats.reads += 1;
                self.check.on_read(id, index, asked)?;
            }
        }
        Ok(())
    }

    fn send(&mut self, from: ServerId, to: ServerId, mut msg: Message) {
        self.stats.messages += 1;
        let disk = self
            .servers
            .get(&from)
            .and_then(|s| s.disk.snapshot.as_ref());
        if !msg.fill_snap_from(disk) {
            return;
        }
        if let Message::ToLearner {
            body: LeaderMsg::Sync(kind),
            ..
        } = &msg
        {
            match kind {
                SyncKind::Diff { .. } => self.stats.diffs += 1,
                SyncKind::Trunc { .. } => self.stats.truncs += 1,
                SyncKind::Snap { .. } => self.stats.snaps += 1,
            }
        }
        if self.net.blocked.contains(&(from, to)) || self.rng.chance(self.net.loss_per_mille) {
            return;
        }
        let copies = if self.rng.chance(self.net.dup_per_mille) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = 1 + self.rng.below(self.net.delay_max);
            let msg = msg.clone();
            self.at(delay, Event::Deliver { from, to, msg });
        }
    }

    fn write(&mut self, id: ServerId, number: u64, ops: Vec<crate::zab::PersistOp>) {
        let delay = 1 + self.rng.below(self.disk_delay_max);
        let now = self.now;
        let Some(s) = self.servers.get_mut(&id) else {
            return;
        };
        s.pending.push_back(PendingWrite { number, ops });
        s.disk_free_at = s.disk_free_at.max(now) + delay;
        let (done_at, incarnation) = (s.disk_free_at, s.incarnation);
        self.at(done_at - now, Event::DiskDone { id, incarnation });
    }

    fn disk_done(&mut self, id: ServerId, incarnation: u64) -> Result<(), String> {
        let Some(s) = self.servers.get_mut(&id) else {
            return Ok(());
        };
        if s.incarnation != incarnation || !s.up() {
            return Ok(());
        }
        let Some(w) = s.pending.pop_front() else {
            return Ok(());
        };
        let before = s.tree.last_zxid();
        for op in &w.ops {
            s.disk.apply(op, &mut s.tree)?;
        }
        let (after, digest) = (s.tree.last_zxid(), s.tree.digest());
        if after != before {
            self.check.on_digest(id, after, digest)?;
        }
        self.mark(&[self.now, 4, id, w.number]);
        if let Some(node) = self.node(id) {
            node.persisted(w.number);
        }
        self.drain(id)
    }

    fn apply(&mut self, id: ServerId, txn: &Txn) -> Result<(), String> {
        let snap_every = self.snap_every;
        let Some(s) = self.servers.get_mut(&id) else {
            return Ok(());
        };
        let prev = s.tree.last_zxid();
        self.check.on_apply(id, prev, txn)?;
        s.tree.apply(txn);
        self.check.on_digest(id, txn.zxid, s.tree.digest())?;
        if s.proposed.remove(&txn.zxid) {
            self.check.on_ack(txn.zxid);
        }
        s.applied_since_snapshot += 1;
        if s.applied_since_snapshot >= snap_every {
            s.snapshot();
        }
        self.mark(&[self.now, 5, id, txn.zxid]);
        Ok(())
    }

    /// Servers that lead an established epoch right now.
    pub(super) fn serving_leaders(&self) -> Vec<ServerId> {
        self.servers
            .iter()
            .filter(|(_, s)| {
                s.node.as_ref().is_some_and(|n| {
                    let st = n.status();
                    st.role == Role::Leading && st.serving
                })
            })
            .map(|(id, _)| *id)
            .collect()
    }

    fn client(&mut self) {
        let leaders = self.serving_leaders();
        if self.healed {
            self.liveness_client(&leaders);
            return;
        }
        if leaders.is_empty() {
            return;
        }
        let id = leaders[self.rng.below(leaders.len() as u64) as usize];
        if self.rng.chance(100) {
            self.next_request += 1;
            let rid = self.next_request;
            let acked = self.check.acked_max();
            self.reads.insert((id, rid), acked);
            if let Some(node) = self.node(id) {
                let _ = node.read_index(rid);
            }
        } else {
            let txn = self.random_txn();
            self.propose(id, txn);
        }
        let _ = self.drain(id);
    }

    pub(super) fn propose(&mut self, id: ServerId, txn: Txn) -> Option<Zxid> {
        let zxid = self.node(id)?.propose(txn).ok()?;
        if let Some(s) = self.servers.get_mut(&id) {
            s.proposed.insert(zxid);
        }
        self.mark(&[self.now, 6, id, zxid]);
        Some(zxid)
    }

    fn random_txn(&mut self) -> Txn {
        self.next_request += 1;
        let path = format!("/k{}", self.rng.below(6));
        let data = Bytes::from(self.next_request.to_le_bytes().to_vec());
        let op = match self.rng.below(10) {
            0..=3 => TxnOp::Create(CreateOp {
                path,
                data,
                mode: CreateMode::Persistent,
                ttl_ms: 0,
            }),
            4..=7 => TxnOp::Set(SetOp {
                path,
                data,
                version: -1,
            }),
            _ => TxnOp::Delete(DeleteOp { path, version: -1 }),
        };
        Txn {
            zxid: 0,
            time_ms: self.now as i64,
            session_id: 0,
            request_id: self.next_request,
            fence: None,
            op,
        }
    }
}

/// A small code per message kind, for the trace.
fn msg_code(msg: &Message) -> u64 {
    match msg {
        Message::Notification(n) => 10 + n.round,
        Message::FollowerInfo { session, .. } => 20 ^ session,
        Message::ToLearner { seq, .. } => 30 + seq,
        Message::ToLeader { seq, .. } => 40 + seq,
        Message::Reset { .. } => 50,
    }
}
