//! The simulated world: servers, a network with delay, loss, duplication,
//! reordering and partitions, disks with latency, crashes and restarts, and clients;
//! one thread, one seeded RNG, one event queue ordered by (time, sequence).
//!
//! ```text
//!   queue.pop ─▶ Tick / Deliver / DiskDone / Fault / Client ─▶ engine ─▶ drain ─▶ outbox
//!      ▲             messages ─▶ network (drop, delay, dup) ─▶ queue             │
//!      └──────────── persist ─▶ disk queue ─▶ DiskDone ─▶ persisted(n) ◀─────────┘
//!                    applies, installs, answers, statuses ─▶ Checker
//!                    snapshot ─▶ disk after a delay ─▶ compacted(zxid)
//! ```
//! Time is in units; a tick is `TICK` units.

use std::collections::{BTreeMap, BTreeSet};

use super::check::{fnv, Checker, FNV_START};
use super::server::{Outbox, PendingWrite, SimCaller, SimHost, SimServer, TreeChange};
use super::workload::{Asked, Client, CLIENTS};
use super::SimOptions;
use crate::replica::engine::{Engine, Request};
use crate::replica::Write;
use crate::txn::Zxid;
use crate::zab::rng::Rng;
use crate::zab::{Config, LeaderMsg, LearnerMsg, Message, Role, ServerId, SyncKind};

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
    /// The snapshot server `id` is writing is on its disk.
    SnapshotDone {
        id: ServerId,
        incarnation: u64,
    },
    Fault,
    /// A follower or observer stops reading its peers (`SimOptions::deaf_followers`).
    Deafen,
    Client,
}

/// The network's current misbehaviour.
#[derive(Debug, Default)]
pub(super) struct Net {
    pub(super) loss_per_mille: u64,
    pub(super) dup_per_mille: u64,
    pub(super) delay_max: u64,
    /// Messages held back 50 to 300 ticks, to arrive stale (often in a later epoch).
    pub(super) stale_per_mille: u64,
    /// Directed links that drop everything.
    pub(super) blocked: BTreeSet<(ServerId, ServerId)>,
}

/// Counts for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub events: u64,
    pub crashes: u64,
    pub messages: u64,
    /// Messages sent in protocol 1's form (`SimOptions::protocol_1`) that differ
    /// from protocol 2's: ACKEPOCHs and leader stream messages.
    pub downgraded: u64,
    pub committed: usize,
    pub acked: usize,
    pub liveness_ticks: u64,
    /// Syncs sent, by kind.
    pub diffs: u64,
    pub truncs: u64,
    pub snaps: u64,
    /// Read indexes answered Ok.
    pub reads: u64,
    /// Sessions opened by the clients, and expired by a leader.
    pub sessions: u64,
    pub expiries: u64,
    /// Writes under the lock's fence applied, and refused (FENCED).
    pub fenced_applied: u64,
    pub fenced_refused: u64,
    /// Processes paused; disk writes that failed (the server stopped); snapshots a
    /// crash cut short.
    pub pauses: u64,
    /// Times a follower or observer stopped reading its peers.
    pub deafened: u64,
    pub disk_errors: u64,
    pub snapshots_lost: u64,
    /// Session reads served, and those that waited (the server had not applied
    /// what the session had seen).
    pub session_reads: u64,
    pub reads_waited: u64,
    /// Leaders established.
    pub leaders: u64,
    /// Histories discarded (must resync).
    pub discards: u64,
}

/// One random stream per subsystem, each drawn from the seed, so that a change to
/// what one of them draws leaves the others' draws as they were.
pub(crate) struct Rngs {
    /// Loss, duplication and delay of messages.
    pub(crate) net: Rng,
    /// Disk latency and how often snapshots are asked for.
    pub(crate) disk: Rng,
    /// What the clients do, when, and where.
    pub(crate) workload: Rng,
    /// Crashes, restarts, partitions, discards; the servers' own seeds and clocks.
    pub(crate) faults: Rng,
    /// Which follower stops reading its peers, when, and for how long.
    pub(crate) deaf: Rng,
}

impl Rngs {
    fn new(seed: u64) -> Rngs {
        let stream = |n: u64| Rng::new(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        Rngs {
            net: stream(1),
            disk: stream(2),
            workload: stream(3),
            faults: stream(4),
            deaf: stream(5),
        }
    }
}

pub(crate) struct World {
    pub(super) opts: SimOptions,
    /// One random stream per subsystem.
    pub(super) rng: Rngs,
    pub(super) now: u64,
    pub(super) seq: u64,
    pub(super) queue: BTreeMap<(u64, u64), Event>,
    pub(super) servers: BTreeMap<ServerId, SimServer>,
    pub(super) net: Net,
    pub(super) check: Checker,
    /// A hash of everything that happened, for determinism checks.
    pub(super) trace: u64,
    pub(super) next_request: u64,
    pub(super) clients: Vec<Client>,
    /// Requests awaiting an answer: request id → (the server asked, what for, the
    /// client that asked if one did).
    pub(super) asked: BTreeMap<u64, (ServerId, Asked, Option<usize>)>,
    /// Paused servers and when each resumes.
    pub(super) paused: BTreeMap<ServerId, u64>,
    /// Servers that do not read their peers, and when each reads again.
    pub(super) deaf: BTreeMap<ServerId, u64>,
    /// Read-index requests: (server, id) → newest acked write when asked.
    pub(super) reads: BTreeMap<(ServerId, u64), Zxid>,
    pub(super) disk_delay_max: u64,
    pub(super) healed: bool,
    /// The liveness write: the leader it was proposed at, and its zxid once acked.
    pub(super) marker: Option<(ServerId, Option<Zxid>)>,
    pub(super) stats: Stats,
}

impl World {
    pub(crate) fn new(opts: SimOptions) -> Result<World, String> {
        let mut rng = Rngs::new(opts.seed);
        let voters: Vec<ServerId> = (1..=opts.voters as u64).collect();
        let observers: Vec<ServerId> =
            (opts.voters as u64 + 1..=(opts.voters + opts.observers) as u64).collect();
        let snap_every = 3 + rng.disk.below(30);
        let mut servers = BTreeMap::new();
        for &id in voters.iter().chain(&observers) {
            let mut cfg = Config::new(id, voters.clone(), observers.clone());
            cfg.planted_bug = opts.bug;
            servers.insert(id, SimServer::new(cfg, rng.faults.next_u64(), snap_every)?);
        }
        let net = Net {
            loss_per_mille: rng.net.below(40),
            dup_per_mille: rng.net.below(30),
            delay_max: 1 + rng.net.below(15),
            stale_per_mille: rng.net.below(8),
            blocked: BTreeSet::new(),
        };
        let mut w = World {
            disk_delay_max: 1 + rng.disk.below(25),
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
            clients: (0..CLIENTS).map(|_| Client::default()).collect(),
            asked: BTreeMap::new(),
            paused: BTreeMap::new(),
            deaf: BTreeMap::new(),
            reads: BTreeMap::new(),
            healed: false,
            marker: None,
            stats: Stats::default(),
        };
        let ids: Vec<ServerId> = w.servers.keys().copied().collect();
        for id in ids {
            let phase = w.rng.faults.below(TICK);
            w.at(phase, Event::Tick(id));
            w.drain(id)?;
        }
        w.at(20, Event::Fault);
        w.at(5, Event::Client);
        if w.opts.deaf_followers {
            w.at(25, Event::Deafen);
        }
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
                // A paused process misses its ticks: its clock jumps when it resumes.
                if self.paused(id).is_some() {
                    return Ok(());
                }
                let now = self.now;
                // One that does not read its peers lets its core's clock stand.
                let deaf = self.deaf(id).is_some();
                if let Some(s) = self.servers.get_mut(&id) {
                    s.ticked(now, !deaf);
                }
                if deaf {
                    // It still serves: a fresh client (a new session, which has seen
                    // nothing) reads there now and then, which only Timeliness
                    // keeps from a stale tree.
                    if self.rng.deaf.below(2) == 0 {
                        self.read_at(id, 0)?;
                    }
                    return Ok(());
                }
                if let Some(engine) = self.engine(id) {
                    engine.tick(0);
                    self.drain(id)?;
                    self.expire_sessions(id);
                    self.drain(id)?;
                }
            }
            // What reaches a paused process waits for it (in its sockets, on its disk).
            Event::Deliver { to, .. }
            | Event::DiskDone { id: to, .. }
            | Event::SnapshotDone { id: to, .. }
                if self.paused(to).is_some() =>
            {
                let until = self.paused(to).unwrap_or(self.now);
                self.at(until - self.now, ev);
            }
            // What its peers send waits until it reads again (in its sockets).
            Event::Deliver { to, .. } if self.deaf(to).is_some() => {
                let until = self.deaf(to).unwrap_or(self.now);
                self.at(until - self.now, ev);
            }
            Event::Deliver { from, to, msg } => {
                self.mark(&[self.now, 2, from, to, msg_code(&msg)]);
                if self.opts.verbose && std::env::var("ZAB_SIM_MSGS").is_ok() {
                    self.log(format_args!("{from} -> {to}: {msg:?}"));
                }
                if let Some(engine) = self.engine(to) {
                    engine.step(from, msg);
                    self.drain(to)?;
                }
            }
            Event::DiskDone { id, incarnation } => self.disk_done(id, incarnation)?,
            Event::SnapshotDone { id, incarnation } => self.snapshot_done(id, incarnation)?,
            Event::Fault => {
                if !self.healed {
                    self.fault()?;
                    let next = 20 + self.rng.faults.below(60);
                    self.at(next, Event::Fault);
                }
            }
            Event::Deafen => {
                if !self.healed {
                    self.deafen();
                    let next = 20 + self.rng.deaf.below(60);
                    self.at(next, Event::Deafen);
                }
            }
            Event::Client => {
                self.client()?;
                let next = 2 + self.rng.workload.below(8);
                self.at(next, Event::Client);
            }
        }
        Ok(())
    }

    /// Server `id`'s engine, if it is up, its clock set to now.
    pub(super) fn engine(&mut self, id: ServerId) -> Option<&mut Engine<SimHost>> {
        let now = self.now;
        let engine = self.servers.get_mut(&id)?.engine.as_mut()?;
        engine.host.now = now;
        Some(engine)
    }

    /// When server `id` reads its peers again, if it does not now.
    pub(super) fn deaf(&self, id: ServerId) -> Option<u64> {
        self.deaf
            .get(&id)
            .copied()
            .filter(|&until| until > self.now)
    }

    /// When paused server `id` resumes, if it is paused now.
    pub(super) fn paused(&self, id: ServerId) -> Option<u64> {
        self.paused
            .get(&id)
            .copied()
            .filter(|&until| until > self.now)
    }

    /// Runs server `id`'s engine until it has nothing left, and handles its effects.
    pub(super) fn drain(&mut self, id: ServerId) -> Result<(), String> {
        let Some(engine) = self.engine(id) else {
            return Ok(());
        };
        engine.drain();
        let out = std::mem::take(&mut engine.host.out);
        self.handle_out(id, out)
    }

    /// Handles one batch of server `id`'s effects.
    fn handle_out(&mut self, id: ServerId, out: Outbox) -> Result<(), String> {
        if let Some(why) = out.fatal {
            return Err(format!("server {id} stopped on a broken invariant: {why}"));
        }
        if let Some(broken) = out.violations.into_iter().next() {
            return Err(format!("server {id}: {broken}"));
        }
        for (st, serving) in out.statuses {
            self.log(format_args!("{id}: {st:?}"));
            let now = self.now;
            if let Some(s) = self.servers.get_mut(&id) {
                s.note_contact(&st, now);
            }
            self.mark(&[self.now, 3, id, st.role as u64, u64::from(st.epoch)]);
            if serving {
                self.stats.leaders += 1;
                self.check.on_established(st.epoch, id)?;
            }
        }
        for change in out.changes {
            match change {
                TreeChange::Applied { prev, txn, digest } => {
                    self.check.on_apply(id, prev, &txn)?;
                    if let Some(digest) = digest {
                        self.check.on_digest(id, txn.zxid, digest)?;
                    }
                    self.mark(&[self.now, 5, id, txn.zxid]);
                }
                TreeChange::Installed { zxid, digest } => self.check.on_digest(id, zxid, digest)?,
            }
        }
        for env in out.messages {
            self.send(id, env.to, env.msg);
        }
        for w in out.writes {
            self.write(id, w);
        }
        for (request, committed) in out.acked {
            self.check.on_ack(committed.zxid, self.now);
            if request == MARKER_REQUEST {
                self.marker = Some((id, Some(committed.zxid)));
            }
            if let Some((_, asked, client)) = self.asked.remove(&request) {
                if let Some(c) = client {
                    self.clients[c].seen(committed.zxid);
                }
                self.answered(id, asked, Some(committed));
            }
        }
        for request in out.failed {
            if request == MARKER_REQUEST {
                // Not acknowledged (its leader stepped down): the liveness phase asks again.
                self.marker = None;
            }
            if let Some((_, asked, _)) = self.asked.remove(&request) {
                self.answered(id, asked, None);
            }
        }
        for (request, index) in out.reads {
            let asked = self.reads.remove(&(id, request)).unwrap_or(0);
            if let Some(index) = index {
                self.stats.reads += 1;
                self.check.on_read(id, index, asked)?;
            }
        }
        // The engine asks for one snapshot at a time; it is written after a while
        // (and lost if the server crashes meanwhile).
        if let Some(tree) = out.snapshot {
            let delay = 1 + self.rng.disk.below(3 * self.disk_delay_max);
            if let Some(s) = self.servers.get_mut(&id) {
                s.snapshotting = Some(tree);
                let incarnation = s.incarnation;
                self.at(delay, Event::SnapshotDone { id, incarnation });
            }
        }
        Ok(())
    }

    fn snapshot_done(&mut self, id: ServerId, incarnation: u64) -> Result<(), String> {
        let Some(s) = self.servers.get_mut(&id) else {
            return Ok(());
        };
        if s.incarnation != incarnation || !s.up() {
            return Ok(());
        }
        if !self.healed && self.rng.faults.chance(50) {
            // A crash after the snapshot is saved and before the purge it calls for.
            s.save_snapshot_only()?;
            self.log(format_args!("crash {id} between a snapshot and its purge"));
            return self.crash_with(id, 0);
        }
        s.finish_snapshot()?;
        self.drain(id)
    }

    fn send(&mut self, from: ServerId, to: ServerId, mut msg: Message) {
        self.stats.messages += 1;
        // A SNAP is filled from the sender's disk, as the peer transport does.
        let stored = msg.snap_to_fill().and_then(|(zxid, _)| {
            let sender = self.servers.get(&from)?;
            sender.stored_snapshot(zxid)
        });
        if !msg.fill_snap_from(stored.as_ref()) {
            return;
        }
        if self.opts.protocol_1.contains(&from) || self.opts.protocol_1.contains(&to) {
            // Alive is not sent to a server of protocol 1, nor by one (it has none).
            let Some(down) = crate::peer::downgrade(msg, 1) else {
                return;
            };
            msg = down;
            if matches!(
                msg,
                Message::ToLearnerV1 { .. }
                    | Message::ToLeader {
                        body: LearnerMsg::AckEpochV1 { .. },
                        ..
                    }
            ) {
                self.stats.downgraded += 1;
            }
        }
        if let Message::ToLearner {
            body: LeaderMsg::Sync(kind),
            ..
        }
        | Message::ToLearnerV1 {
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
        if self.net.blocked.contains(&(from, to)) || self.rng.net.chance(self.net.loss_per_mille) {
            return;
        }
        let copies = if self.rng.net.chance(self.net.dup_per_mille) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = 1 + self.rng.net.below(self.net.delay_max);
            if self.rng.net.chance(self.net.stale_per_mille) {
                delay += TICK * (50 + self.rng.net.below(250));
            }
            let msg = msg.clone();
            self.at(delay, Event::Deliver { from, to, msg });
        }
    }

    fn write(&mut self, id: ServerId, write: PendingWrite) {
        let delay = 1 + self.rng.disk.below(self.disk_delay_max);
        let now = self.now;
        let Some(s) = self.servers.get_mut(&id) else {
            return;
        };
        s.pending.push_back(write);
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
        if s.fail_next_write {
            // A write or fsync error: the server stops (as the persister's failure
            // makes it), losing what was not yet durable.
            self.log(format_args!("disk error on {id}: it stops"));
            self.stats.disk_errors += 1;
            return self.crash_with(id, 0);
        }
        let Some(number) = s.write_pending()? else {
            return Ok(());
        };
        self.mark(&[self.now, 4, id, number]);
        if let Some(engine) = self.engine(id) {
            engine.persisted(number);
        }
        self.drain(id)
    }

    /// Servers that lead an established epoch right now.
    pub(super) fn serving_leaders(&self) -> Vec<ServerId> {
        self.servers
            .iter()
            .filter(|(id, _)| self.paused(**id).is_none())
            .filter(|(_, s)| {
                s.engine.as_ref().is_some_and(|e| {
                    let st = e.node().status();
                    st.role == Role::Leading && st.serving
                })
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// One client event. Err: an invariant broke (in what it did, or in what the
    /// server did with it).
    fn client(&mut self) -> Result<(), String> {
        let leaders = self.serving_leaders();
        if self.healed {
            return self.liveness_client(&leaders);
        }
        if leaders.is_empty() {
            return Ok(());
        }
        let id = leaders[self.rng.workload.below(leaders.len() as u64) as usize];
        if self.rng.workload.chance(100) {
            self.next_request += 1;
            let rid = self.next_request;
            let acked = self.check.acked_max();
            self.reads.insert((id, rid), acked);
            if let Some(engine) = self.engine(id) {
                engine.read_index(rid);
            }
        } else {
            self.client_op(id)?;
        }
        self.drain(id)
    }

    /// Hands a client's write to server `id` (answered once applied there, or
    /// failed); `asked` says what to do with the answer, and `client` which client
    /// asked, if one did.
    pub(super) fn propose(
        &mut self,
        id: ServerId,
        write: Write,
        asked: Asked,
        client: Option<usize>,
    ) {
        let request = write.request_id;
        self.mark(&[self.now, 6, id, request]);
        self.check.on_proposed(request, &write.op);
        self.asked.insert(request, (id, asked, client));
        if let Some(engine) = self.engine(id) {
            let caller = SimCaller(request);
            engine.propose(&mut vec![Request { write, caller }]);
        }
    }

    /// Server `id` crashed: the requests it was asked are never answered.
    pub(super) fn forget_requests(&mut self, id: ServerId) {
        let lost: Vec<u64> = self
            .asked
            .iter()
            .filter(|(_, (server, _, _))| *server == id)
            .map(|(request, _)| *request)
            .collect();
        for request in lost {
            if let Some((_, asked, _)) = self.asked.remove(&request) {
                self.answered(id, asked, None);
            }
        }
    }
}

/// The request id of the liveness phase's marker write.
pub(super) const MARKER_REQUEST: u64 = u64::MAX;

/// A small code per message kind, for the trace.
fn msg_code(msg: &Message) -> u64 {
    match msg {
        Message::Notification(n) => 10 + n.round,
        Message::FollowerInfo { session, .. } => 20 ^ session,
        Message::ToLearner { seq, .. } | Message::ToLearnerV1 { seq, .. } => 30 + seq,
        Message::ToLeader { seq, .. } => 40 + seq,
        Message::Reset { .. } => 50,
        Message::Alive { session } => 60 ^ session,
    }
}
