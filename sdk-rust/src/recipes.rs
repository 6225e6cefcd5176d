//! Locks, semaphores and elections: thin calls on the server's Lock and Election
//! services. The server queues, waits and fences; the SDK only asks.
//!
//! ```text
//!   Client::acquire(name, session, options) ─▶ Lock.Acquire ─▶ LockHold { key, token }
//!   write with WriteOptions { fence: Some(hold.fence()) } ─▶ FENCED once the hold is lost
//!   Client::campaign(..) ─▶ Election.Campaign ─▶ Leader { key, term, .. }
//! ```

use concord_proto::v1::{
    election_client::ElectionClient, lock_client::LockClient, AcquireRequest, CampaignRequest,
    ErrorCode, HolderRequest, LeaderRequest, LeaderResponse, ObserveRequest, ParticipantsRequest,
    ProclaimRequest, ReleaseRequest, ResignRequest, ValidateRequest, WaitersRequest,
};
use futures::{Stream, StreamExt};

use crate::call::{Call, Wait};
use crate::client::{zxid, Client};
use crate::error::Error;
use crate::types::{Fence, LockEntry, Participant};

/// How to acquire a lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockOptions {
    /// Give up after this many ms (the server removes the waiter); 0: wait forever.
    pub timeout_ms: i64,
    /// Identifies the caller: a retry with the same session and owner id adopts its
    /// place in the queue instead of queueing twice.
    pub owner_id: String,
    /// Semaphore permits (0 or 1: a mutex).
    pub permits: u32,
}

/// A held lock (or semaphore permit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHold {
    /// The holder key: pass it to `release` and in fences.
    pub key: String,
    /// The fencing token: the zxid that created the holder's node.
    pub token: u64,
    /// The zxid at which the server saw the lock held.
    pub zxid: u64,
}

impl From<concord_proto::v1::AcquireResponse> for LockHold {
    fn from(resp: concord_proto::v1::AcquireResponse) -> LockHold {
        LockHold {
            zxid: zxid(&resp.header),
            key: resp.key,
            token: resp.token,
        }
    }
}

/// A change of an election's leader, as `observe` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChange {
    /// The zxid the answering server had applied when it saw the change.
    pub zxid: u64,
    /// The new leader; `None` while there is none.
    pub leader: Option<Participant>,
}

impl LockHold {
    /// This hold as a fence for writes.
    pub fn fence(&self) -> Fence {
        Fence {
            key: self.key.clone(),
            token: self.token,
        }
    }
}

impl Client {
    /// The hold an Acquire or TryAcquire answered with (its zxid is seen).
    fn held(&self, resp: concord_proto::v1::AcquireResponse) -> LockHold {
        self.saw(&resp.header);
        LockHold::from(resp)
    }

    /// Waits until lock `name` is held by `session_id`. Errors: TIMEOUT, SESSION_EXPIRED,
    /// BAD_ARGUMENTS.
    pub async fn acquire(
        &self,
        name: &str,
        session_id: u64,
        options: &LockOptions,
    ) -> Result<LockHold, Error> {
        let resp = self
            .unary(
                Call::write(!options.owner_id.is_empty())
                    .waiting(Wait::of_timeout_ms(options.timeout_ms)),
                acquire_request(name, session_id, options),
                |ch, r| async move { LockClient::new(ch).acquire(r).await },
            )
            .await?;
        Ok(self.held(resp))
    }

    /// Takes lock `name` only if a permit is free now. Errors: LOCK_HELD.
    pub async fn try_acquire(
        &self,
        name: &str,
        session_id: u64,
        options: &LockOptions,
    ) -> Result<LockHold, Error> {
        let resp = self
            .unary(
                Call::write(!options.owner_id.is_empty()),
                acquire_request(name, session_id, options),
                |ch, r| async move { LockClient::new(ch).try_acquire(r).await },
            )
            .await?;
        Ok(self.held(resp))
    }

    /// Releases a hold (or leaves the queue); returns the zxid. Errors: NO_NODE.
    pub async fn release(&self, key: &str, token: u64) -> Result<u64, Error> {
        let resp = self
            .unary(
                Call::write(false),
                ReleaseRequest {
                    key: key.into(),
                    token,
                },
                |ch, r| async move { LockClient::new(ch).release(r).await },
            )
            .await?;
        Ok(self.saw(&resp.header))
    }

    /// The holders of lock `name`.
    pub async fn lock_holders(&self, name: &str) -> Result<Vec<LockEntry>, Error> {
        let req = HolderRequest { name: name.into() };
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                LockClient::new(ch).holder(r).await
            })
            .await?;
        self.saw(&resp.header);
        Ok(resp.holders.into_iter().map(LockEntry::from).collect())
    }

    /// The queue of lock `name`, holders first.
    pub async fn lock_waiters(&self, name: &str) -> Result<Vec<LockEntry>, Error> {
        let req = WaitersRequest { name: name.into() };
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                LockClient::new(ch).waiters(r).await
            })
            .await?;
        self.saw(&resp.header);
        Ok(resp.entries.into_iter().map(LockEntry::from).collect())
    }

    /// Whether (key, token) still holds its lock or leadership.
    pub async fn validate(&self, key: &str, token: u64) -> Result<bool, Error> {
        let req = ValidateRequest {
            key: key.into(),
            token,
        };
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                LockClient::new(ch).validate(r).await
            })
            .await?;
        self.saw(&resp.header);
        Ok(resp.valid)
    }

    /// Waits until `participant_id` leads election `name`; returns its key and term.
    pub async fn campaign(
        &self,
        name: &str,
        session_id: u64,
        participant_id: &str,
        value: impl Into<Vec<u8>>,
        timeout_ms: i64,
    ) -> Result<Participant, Error> {
        let req = CampaignRequest {
            election: name.into(),
            session_id,
            participant_id: participant_id.into(),
            value: value.into().into(),
            timeout_ms,
        };
        let resp = self
            .unary(
                Call::write(!participant_id.is_empty()).waiting(Wait::of_timeout_ms(timeout_ms)),
                req,
                |ch, r| async move { ElectionClient::new(ch).campaign(r).await },
            )
            .await?;
        self.saw(&resp.header);
        resp.leader
            .map(Participant::from)
            .ok_or_else(|| Error::client(ErrorCode::Internal, "Campaign answered without a leader"))
    }

    /// Replaces the leader's value. Errors: FENCED when no longer leader.
    pub async fn proclaim(
        &self,
        key: &str,
        term: u64,
        value: impl Into<Vec<u8>>,
    ) -> Result<u64, Error> {
        let req = ProclaimRequest {
            key: key.into(),
            term,
            value: value.into().into(),
        };
        let resp = self
            .unary(Call::write(false), req, |ch, r| async move {
                ElectionClient::new(ch).proclaim(r).await
            })
            .await?;
        Ok(self.saw(&resp.header))
    }

    /// Gives up leadership or candidacy. Errors: NO_NODE.
    pub async fn resign(&self, key: &str, term: u64) -> Result<u64, Error> {
        let req = ResignRequest {
            key: key.into(),
            term,
        };
        let resp = self
            .unary(Call::write(false), req, |ch, r| async move {
                ElectionClient::new(ch).resign(r).await
            })
            .await?;
        Ok(self.saw(&resp.header))
    }

    /// Resigns every candidacy of `participant_id` on `session_id` in election `name`
    /// that the server lists (a recipe's close); one already gone is not an error.
    pub(crate) async fn resign_candidacies(
        &self,
        name: &str,
        session_id: u64,
        participant_id: &str,
    ) -> Result<(), Error> {
        let all = self.participants(name).await?;
        for p in all
            .into_iter()
            .filter(|p| p.session_id == session_id && p.participant_id == participant_id)
        {
            match self.resign(&p.key, p.term).await {
                Ok(_) => {}
                Err(e) if e.code() == ErrorCode::NoNode => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The current leader of election `name`, if any.
    pub async fn leader(&self, name: &str) -> Result<Option<Participant>, Error> {
        let req = LeaderRequest {
            election: name.into(),
        };
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                ElectionClient::new(ch).leader(r).await
            })
            .await?;
        Ok(self.leader_of(resp))
    }

    /// Candidates of election `name`, leader first.
    pub async fn participants(&self, name: &str) -> Result<Vec<Participant>, Error> {
        let req = ParticipantsRequest {
            election: name.into(),
        };
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                ElectionClient::new(ch).participants(r).await
            })
            .await?;
        self.saw(&resp.header);
        Ok(resp
            .participants
            .into_iter()
            .map(Participant::from)
            .collect())
    }

    /// A stream of leader changes of election `name`, the current leader first. The
    /// stream ends with an error when the connection breaks, or when its server has
    /// had no leader for a while (observe again to go on: on another server then).
    pub async fn observe(
        &self,
        name: &str,
    ) -> Result<impl Stream<Item = Result<LeaderChange, Error>> + Send + 'static, Error> {
        // No progress messages: every item is a change.
        let req = ObserveRequest {
            election: name.into(),
            progress_interval_ms: 0,
        };
        let generation = self.link().generation();
        let mut elections = ElectionClient::new(self.link().clone());
        let resp = elections
            .observe(req)
            .await
            .map_err(|status| self.stream_err(generation, status))?;
        let client = self.clone();
        Ok(resp.into_inner().map(move |change| {
            let resp = change.map_err(|status| client.stream_err(generation, status))?;
            Ok(LeaderChange {
                zxid: zxid(&resp.header),
                leader: client.leader_of(resp),
            })
        }))
    }

    /// Returns once election `name` is seen led by another candidacy than `p`, or by
    /// none, at zxid `since` or later (`p` led at `since`: older states, from a
    /// server behind, do not count): `p` was resigned by someone else, or its node is
    /// gone. Follows the election on Observe, opened again after a break; never
    /// returns if the server refuses to let it observe (the recipe leads on, as
    /// without following).
    pub(crate) async fn deposed(&self, name: &str, p: &Participant, since: u64) {
        let mut failures = 0u32;
        loop {
            tokio::time::sleep(crate::latch::retry_delay(failures)).await;
            failures = failures.saturating_add(1);
            let mut changes = match self.observe(name).await {
                Ok(changes) => Box::pin(changes),
                Err(e) if e.is_retry_safe() => continue,
                Err(_) => return std::future::pending().await,
            };
            while let Some(Ok(change)) = changes.next().await {
                failures = 0;
                if change.zxid < since {
                    continue;
                }
                match change.leader {
                    Some(l) if l.key == p.key && l.term == p.term => {}
                    _ => return,
                }
            }
        }
    }

    /// The leader a Leader or Observe answer names (its zxid is seen).
    fn leader_of(&self, resp: LeaderResponse) -> Option<Participant> {
        self.saw(&resp.header);
        resp.leader.map(Participant::from)
    }
}

fn acquire_request(name: &str, session_id: u64, options: &LockOptions) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        session_id,
        timeout_ms: options.timeout_ms,
        owner_id: options.owner_id.clone(),
        permits: options.permits,
    }
}
