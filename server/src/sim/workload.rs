//! The simulated clients, and the leader's session expiry.
//!
//! Each client opens a session at a serving leader and keeps it alive there (unless
//! it goes silent for a while, as a client that died would: then its session must
//! expire); with it, it creates ephemeral nodes, writes plain nodes and Multis, takes
//! the mutex `LOCK_QUEUE` and writes under its fence until it releases it (or goes on
//! writing after losing it, which the fence must refuse), campaigns in the election
//! `ELECTION_QUEUE`, proclaims and writes under its term, resigns, and now and then
//! closes its session. On every tick a serving leader proposes the expiry of the sessions whose
//! deadline passed, as `replica::housekeeping` does.
//!
//! ```text
//!   Client event ─▶ keep-alives at the leader ─▶ one op: open, create, ephemeral,
//!                   Multi, join the lock, fenced write, leave, close, go silent
//!   answers ─▶ the client's session id, its lock node and token
//!   Tick at a serving leader ─▶ take_expired ─▶ CloseSession(Expired) proposals
//! ```

use bytes::Bytes;

use super::world::World;
use crate::replica::Committed;
use crate::replica::Write;
use crate::tree::{TreeError, TxnResult};
use crate::txn::{
    CheckOp, CloseReason, CreateMode, CreateOp, DeleteOp, Fence, MultiOp, QueueOp, SetOp, TxnOp,
    Zxid,
};
use crate::zab::ServerId;

/// Clients at once.
pub(super) const CLIENTS: usize = 3;
/// The TTL the clients ask for, in world time units (20 ticks).
const SESSION_TTL: i64 = 200;
/// The mutex the clients take.
pub(super) const LOCK_QUEUE: &str = "/concord/locks/sim";
/// The election the clients campaign in.
pub(super) const ELECTION_QUEUE: &str = "/concord/elections/sim";
/// The node written under the mutex's fence.
const FENCED_PATH: &str = "/fenced";

/// One simulated client.
#[derive(Debug, Default)]
pub(super) struct Client {
    /// Its session, once opened (None again once it ends).
    pub(super) session: Option<u64>,
    /// An open or a join is in flight: its answer is awaited first.
    waiting: bool,
    /// It sends no keep-alive before this time (a client that died); it then starts
    /// again with a new session.
    silent_until: u64,
    /// Its node in the lock queue and that node's token, once joined.
    lock: Option<(String, Zxid)>,
    /// Its node in the election and that node's token (its term if it leads).
    campaign: Option<(String, Zxid)>,
    /// The newest zxid it has been answered with (its reads' `min_zxid`).
    seen: Zxid,
}

impl Client {
    /// The client was answered at `zxid`.
    pub(super) fn seen(&mut self, zxid: Zxid) {
        self.seen = self.seen.max(zxid);
    }
}

/// What a request asked, to act on its answer.
#[derive(Debug)]
pub(super) enum Asked {
    /// A client's OpenSession.
    Open(usize),
    /// A client's Join of the lock queue.
    Join(usize),
    /// A client's Join of the election.
    Campaign(usize),
    /// The leader's expiry of a session.
    Expire(u64),
    /// A write under the lock's fence.
    Fenced,
    /// Nothing to do with the answer.
    Other,
}

impl World {
    /// A client event during the chaos: keep-alives at one serving leader, then one
    /// client's next op there.
    pub(super) fn client_op(&mut self, leader: ServerId) -> Result<(), String> {
        self.keep_alives(leader);
        let c = self.rng.workload.below(CLIENTS as u64) as usize;
        self.notice_end(leader, c);
        let client = &self.clients[c];
        if client.waiting || self.now < client.silent_until {
            let write = self.random_write(0);
            self.propose(leader, write, Asked::Other, None);
            return Ok(());
        }
        let Some(session) = client.session else {
            let op = TxnOp::OpenSession {
                ttl_ms: SESSION_TTL,
            };
            self.clients[c].waiting = true;
            let write = self.request(0, op, None);
            self.propose(leader, write, Asked::Open(c), Some(c));
            return Ok(());
        };
        let (write, asked) = match self.rng.workload.below(20) {
            0..=5 => (self.random_write(session), Asked::Other),
            6..=8 => (self.ephemeral(c, session), Asked::Other),
            9..=10 => (self.multi(session), Asked::Other),
            11..=13 => match self.clients[c].lock.clone() {
                None => {
                    self.clients[c].waiting = true;
                    (self.join(LOCK_QUEUE, c, session), Asked::Join(c))
                }
                Some((key, token)) => (self.fenced(session, key, token), Asked::Fenced),
            },
            14 => match self.clients[c].lock.take() {
                Some((path, token)) => {
                    let op = TxnOp::Queue(QueueOp::Leave { path, token });
                    (self.request(session, op, None), Asked::Other)
                }
                None => (self.random_write(session), Asked::Other),
            },
            15 => {
                self.clients[c] = Client::default();
                let op = TxnOp::CloseSession {
                    session_id: session,
                    reason: CloseReason::Closed,
                };
                (self.request(session, op, None), Asked::Other)
            }
            17 => match self.clients[c].campaign.take() {
                None => {
                    self.clients[c].waiting = true;
                    let join = self.join(ELECTION_QUEUE, c, session);
                    (join, Asked::Campaign(c))
                }
                // Resigns.
                Some((path, token)) => {
                    let op = TxnOp::Queue(QueueOp::Leave { path, token });
                    (self.request(session, op, None), Asked::Other)
                }
            },
            18 => match self.clients[c].campaign.clone() {
                // Proclaims a new value (refused unless the token is still its node's),
                // or writes under its term's fence.
                Some((path, token)) if self.rng.workload.below(2) == 0 => {
                    let value = Bytes::from(self.next_request.to_le_bytes().to_vec());
                    let op = TxnOp::Queue(QueueOp::Update { path, token, value });
                    (self.request(session, op, None), Asked::Other)
                }
                Some((key, token)) => (self.fenced(session, key, token), Asked::Fenced),
                None => (self.random_write(session), Asked::Other),
            },
            19 => return self.session_read(c),
            16 => {
                // Goes silent: its session must expire; it comes back with a new one.
                self.clients[c] = Client {
                    silent_until: self.now + 3 * SESSION_TTL as u64,
                    ..Client::default()
                };
                return Ok(());
            }
            _ => (self.random_write(session), Asked::Other),
        };
        self.propose(leader, write, asked, Some(c));
        Ok(())
    }

    /// Client `c` reads at a server it picks (any that is up and running), as a
    /// session moving between servers does: with `min_zxid` = the newest zxid it has
    /// been answered with, so the server serves it only once it has applied that far
    /// and while it is in touch with a leader (the API's `ready_for_read` rule;
    /// until then the read waits or is refused, here: is not made). A served read
    /// sees the server's applied tree, which must be the committed state at its zxid
    /// (Agreement, Integrity), not older than what the session has seen
    /// (SessionReads), and holding every write acknowledged a while before
    /// (Timeliness).
    fn session_read(&mut self, c: usize) -> Result<(), String> {
        let up: Vec<ServerId> = self
            .up_ids(true)
            .into_iter()
            .filter(|&id| self.paused(id).is_none())
            .collect();
        if up.is_empty() {
            return Ok(());
        }
        let id = up[self.rng.workload.below(up.len() as u64) as usize];
        if let Some(zxid) = self.read_at(id, self.clients[c].seen)? {
            self.clients[c].seen(zxid);
        }
        Ok(())
    }

    /// A read at server `id` by a session that has seen `min_zxid`, checked as
    /// `session_read` says; the zxid it was served at, None if it was not.
    pub(super) fn read_at(&mut self, id: ServerId, min_zxid: Zxid) -> Result<Option<Zxid>, String> {
        let Some(s) = self.servers.get(&id) else {
            return Ok(None);
        };
        let (zxid, digest) = {
            let tree = s.tree();
            (tree.last_zxid(), tree.digest())
        };
        if zxid < min_zxid || !s.in_touch(self.now) {
            self.stats.reads_waited += 1;
            return Ok(None);
        }
        self.stats.session_reads += 1;
        self.check.on_digest(id, zxid, digest)?;
        let ticks = if self.opts.deaf_followers {
            super::check::TIMELINESS_TICKS_DEAF
        } else {
            super::check::TIMELINESS_TICKS
        };
        self.check.on_timely_read(id, self.now, zxid, ticks)?;
        Ok(Some(zxid))
    }

    /// Every client that is not silent keeps its session alive at `leader`.
    fn keep_alives(&mut self, leader: ServerId) {
        let now = self.now;
        let sessions: Vec<u64> = self
            .clients
            .iter()
            .filter(|c| now >= c.silent_until)
            .filter_map(|c| c.session)
            .collect();
        if let Some(engine) = self.engine(leader) {
            let mut tracker = engine.sessions();
            for session in sessions {
                tracker.touch(session, now);
            }
        }
    }

    /// A client whose session the leader's tree no longer holds (expired, or closed
    /// while it waited) starts over.
    fn notice_end(&mut self, leader: ServerId, c: usize) {
        let Some(session) = self.clients[c].session else {
            return;
        };
        let gone = self
            .servers
            .get(&leader)
            .is_some_and(|s| s.tree().session(session).is_none());
        if gone {
            self.clients[c] = Client::default();
        }
    }

    /// A serving leader's tick: proposes the expiry of every session past its
    /// deadline (the answer puts a failed one back, to be retried).
    pub(super) fn expire_sessions(&mut self, leader: ServerId) {
        let now = self.now;
        let Some(engine) = self.engine(leader) else {
            return;
        };
        if !engine.serving() {
            return;
        }
        let expired = engine.sessions().take_expired(now);
        for session_id in expired {
            let op = TxnOp::CloseSession {
                session_id,
                reason: CloseReason::Expired,
            };
            let write = self.request(0, op, None);
            self.propose(leader, write, Asked::Expire(session_id), None);
        }
    }

    /// Acts on the answer to a request: Ok(committed) or refused/failed (None).
    pub(super) fn answered(&mut self, leader: ServerId, asked: Asked, c: Option<Committed>) {
        let result = c.map(|c| c.result);
        match (asked, result) {
            (Asked::Open(c), Some(Ok(TxnResult::SessionOpened { session_id, .. }))) => {
                self.stats.sessions += 1;
                self.clients[c].session = Some(session_id);
                self.clients[c].waiting = false;
            }
            (Asked::Join(c), Some(Ok(TxnResult::Created { path, stat }))) => {
                self.clients[c].lock = Some((path, stat.czxid));
                self.clients[c].waiting = false;
            }
            (Asked::Campaign(c), Some(Ok(TxnResult::Created { path, stat }))) => {
                self.clients[c].campaign = Some((path, stat.czxid));
                self.clients[c].waiting = false;
            }
            (Asked::Open(c) | Asked::Join(c) | Asked::Campaign(c), _) => {
                self.clients[c].waiting = false;
            }
            (Asked::Expire(_), Some(Ok(_))) => self.stats.expiries += 1,
            (Asked::Expire(session), _) => {
                if let Some(engine) = self.engine(leader) {
                    engine.sessions().retry_expiry(session);
                }
            }
            (Asked::Fenced, Some(Ok(_))) => self.stats.fenced_applied += 1,
            (Asked::Fenced, Some(Err(TreeError::Fenced { .. }))) => self.stats.fenced_refused += 1,
            (Asked::Fenced | Asked::Other, _) => {}
        }
    }

    /// A write of client `session` (0: none), with a request id of its own.
    pub(super) fn request(&mut self, session_id: u64, op: TxnOp, fence: Option<Fence>) -> Write {
        self.next_request += 1;
        Write {
            session_id,
            request_id: self.next_request,
            fence,
            op,
            checked_at: 0,
            trace: None,
        }
    }

    /// A create, set or delete of one of six plain keys.
    pub(super) fn random_write(&mut self, session_id: u64) -> Write {
        let path = format!("/k{}", self.rng.workload.below(6));
        let data = Bytes::from(self.next_request.to_le_bytes().to_vec());
        let op = match self.rng.workload.below(10) {
            0..=3 => TxnOp::Create(create(path, data, CreateMode::Persistent)),
            4..=7 => TxnOp::Set(SetOp {
                path,
                data,
                version: -1,
                null_data: false,
            }),
            _ => TxnOp::Delete(DeleteOp { path, version: -1 }),
        };
        self.request(session_id, op, None)
    }

    /// One of four ephemeral nodes of client `c` (NODE_EXISTS if it has it already).
    fn ephemeral(&mut self, c: usize, session_id: u64) -> Write {
        let path = format!("/e{c}-{}", self.rng.workload.below(4));
        let op = TxnOp::Create(create(path, Bytes::new(), CreateMode::Ephemeral));
        self.request(session_id, op, None)
    }

    /// A check of one key, a set of another and a create of a third: all or nothing
    /// (the keys are the plain writes' six, so the tree stays small).
    fn multi(&mut self, session_id: u64) -> Write {
        let key = |w: &mut World| format!("/k{}", w.rng.workload.below(6));
        let (checked, set, created) = (key(self), key(self), key(self));
        let data = Bytes::from(self.next_request.to_le_bytes().to_vec());
        let ops = vec![
            MultiOp::Check(CheckOp {
                path: checked,
                version: -1,
            }),
            MultiOp::Set(SetOp {
                path: set,
                data: data.clone(),
                version: -1,
                null_data: false,
            }),
            MultiOp::Create(create(created, data, CreateMode::Persistent)),
        ];
        self.request(session_id, TxnOp::Multi(ops), None)
    }

    /// Joins `queue` (one permit: a mutex, or an election).
    fn join(&mut self, queue: &str, c: usize, session_id: u64) -> Write {
        let op = TxnOp::Queue(QueueOp::Join {
            queue: queue.into(),
            owner_id: format!("client-{c}"),
            value: Bytes::new(),
            permits: 1,
            only_if_free: false,
        });
        self.request(session_id, op, None)
    }

    /// A write under a fence: the lock's, or the election's term (refused unless the
    /// token is still its queue's first member).
    fn fenced(&mut self, session_id: u64, key: String, token: Zxid) -> Write {
        let op = TxnOp::Set(SetOp {
            path: FENCED_PATH.into(),
            data: Bytes::from(token.to_le_bytes().to_vec()),
            version: -1,
            null_data: false,
        });
        let op = match self.rng.workload.below(2) {
            0 => op,
            _ => TxnOp::Create(create(
                FENCED_PATH.into(),
                Bytes::new(),
                CreateMode::Persistent,
            )),
        };
        self.request(session_id, op, Some(Fence { key, token }))
    }
}

fn create(path: String, data: Bytes, mode: CreateMode) -> CreateOp {
    CreateOp {
        path,
        data,
        mode,
        ttl_ms: 0,
        null_data: false,
    }
}
