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
    ErrorCode, Fence, HolderRequest, LeaderInfo, LeaderRequest, LeaderResponse, LockEntry,
    ObserveRequest, ParticipantsRequest, ProclaimRequest, ReleaseRequest, ResignRequest,
    ValidateRequest, WaitersRequest,
};
use tonic::transport::Channel;

use crate::client::{read_err, write_err, zxid, Client};
use crate::error::Error;

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

impl LockHold {
    /// This hold as a fence for writes.
    pub fn fence(&self) -> Fence {
        Fence {
            key: self.key.clone(),
            token: self.token,
        }
    }
}

/// A leader (or candidate) of an election.
pub type Leader = LeaderInfo;

impl Client {
    /// The hold an Acquire or TryAcquire answered with (its zxid is seen).
    fn held(&self, resp: concord_proto::v1::AcquireResponse) -> LockHold {
        self.saw(&resp.header);
        LockHold::from(resp)
    }

    fn locks(&self) -> LockClient<Channel> {
        LockClient::new(self.channel().clone())
    }

    fn elections(&self) -> ElectionClient<Channel> {
        ElectionClient::new(self.channel().clone())
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
            .locks()
            .acquire(acquire_request(name, session_id, options))
            .await
            .map_err(write_err)?
            .into_inner();
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
            .locks()
            .try_acquire(acquire_request(name, session_id, options))
            .await
            .map_err(write_err)?
            .into_inner();
        Ok(self.held(resp))
    }

    /// Releases a hold (or leaves the queue); returns the zxid. Errors: NO_NODE.
    pub async fn release(&self, key: &str, token: u64) -> Result<u64, Error> {
        let resp = self
            .locks()
            .release(ReleaseRequest {
                key: key.into(),
                token,
            })
            .await
            .map_err(write_err)?
            .into_inner();
        Ok(self.saw(&resp.header))
    }

    /// The holders of lock `name`.
    pub async fn lock_holders(&self, name: &str) -> Result<Vec<LockEntry>, Error> {
        let req = HolderRequest { name: name.into() };
        let resp = self.locks().holder(req).await.map_err(read_err)?;
        Ok(resp.into_inner().holders)
    }

    /// The queue of lock `name`, holders first.
    pub async fn lock_waiters(&self, name: &str) -> Result<Vec<LockEntry>, Error> {
        let req = WaitersRequest { name: name.into() };
        let resp = self.locks().waiters(req).await.map_err(read_err)?;
        Ok(resp.into_inner().entries)
    }

    /// Whether (key, token) still holds its lock or leadership.
    pub async fn validate(&self, key: &str, token: u64) -> Result<bool, Error> {
        let req = ValidateRequest {
            key: key.into(),
            token,
        };
        let resp = self.locks().validate(req).await.map_err(read_err)?;
        Ok(resp.into_inner().valid)
    }

    /// Waits until `participant_id` leads election `name`; returns its key and term.
    pub async fn campaign(
        &self,
        name: &str,
        session_id: u64,
        participant_id: &str,
        value: impl Into<Vec<u8>>,
        timeout_ms: i64,
    ) -> Result<Leader, Error> {
        let req = CampaignRequest {
            election: name.into(),
            session_id,
            participant_id: participant_id.into(),
            value: value.into().into(),
            timeout_ms,
        };
        let resp = self.elections().campaign(req).await.map_err(write_err)?;
        resp.into_inner()
            .leader
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
        let resp = self.elections().proclaim(req).await.map_err(write_err)?;
        Ok(self.saw(&resp.into_inner().header))
    }

    /// Gives up leadership or candidacy. Errors: NO_NODE.
    pub async fn resign(&self, key: &str, term: u64) -> Result<u64, Error> {
        let req = ResignRequest {
            key: key.into(),
            term,
        };
        let resp = self.elections().resign(req).await.map_err(write_err)?;
        Ok(self.saw(&resp.into_inner().header))
    }

    /// The current leader of election `name`, if any.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>, Error> {
        let req = LeaderRequest {
            election: name.into(),
        };
        let resp = self.elections().leader(req).await.map_err(read_err)?;
        Ok(resp.into_inner().leader)
    }

    /// Candidates of election `name`, leader first.
    pub async fn participants(&self, name: &str) -> Result<Vec<Leader>, Error> {
        let req = ParticipantsRequest {
            election: name.into(),
        };
        let resp = self.elections().participants(req).await.map_err(read_err)?;
        Ok(resp.into_inner().participants)
    }

    /// A stream of leader changes of election `name`, the current leader first.
    pub async fn observe(&self, name: &str) -> Result<tonic::Streaming<LeaderResponse>, Error> {
        let req = ObserveRequest {
            election: name.into(),
        };
        let resp = self.elections().observe(req).await.map_err(read_err)?;
        Ok(resp.into_inner())
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
