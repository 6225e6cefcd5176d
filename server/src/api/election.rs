//! The `concord.v1.Election` service: check input, call the recipes, answer.

use std::pin::Pin;

use concord_proto::v1 as pb;
use concord_proto::v1::election_server::Election;
use futures::Stream;
use tonic::{Request, Response, Status};

use super::convert::{header, owned_data, Limits};
use super::error::bad_arguments;
use super::lock::timeout_of;
use super::owner::{caller_of, check_member, check_session};
use crate::recipes::{election_queue, JoinSpec, Recipes};
use crate::security::Security;
use crate::tree::queue::QueueEntry;
use crate::txn::Zxid;

/// Most leader changes queued for one Observe stream before it waits for the client.
const OBSERVE_BUFFER: usize = 64;

pub struct ElectionService {
    recipes: Recipes,
    /// Whose sessions may campaign, proclaim and resign (`owner.rs`).
    security: Security,
    limits: Limits,
}

impl ElectionService {
    pub fn new(recipes: Recipes, security: Security, limits: Limits) -> Self {
        ElectionService {
            recipes,
            security,
            limits,
        }
    }

    fn header(&self, zxid: Zxid) -> Option<pb::ResponseHeader> {
        header(self.recipes.replica().server_id(), zxid)
    }

    fn leader_response(
        &self,
        zxid: Zxid,
        leader: Option<QueueEntry>,
        name: &str,
    ) -> pb::LeaderResponse {
        pb::LeaderResponse {
            header: self.header(zxid),
            leader: leader.map(|e| info(name, e)),
        }
    }
}

fn info(election: &str, e: QueueEntry) -> pb::LeaderInfo {
    pb::LeaderInfo {
        election: election.to_string(),
        key: e.key,
        term: e.token,
        participant_id: e.owner_id,
        value: e.value,
        session_id: e.session_id,
    }
}

type ObserveStream = Pin<Box<dyn Stream<Item = Result<pb::LeaderResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Election for ElectionService {
    async fn campaign(
        &self,
        request: Request<pb::CampaignRequest>,
    ) -> Result<Response<pb::CampaignResponse>, Status> {
        let caller = caller_of(&request, self.security.policy());
        let r = request.into_inner();
        if r.session_id == 0 {
            return Err(bad_arguments(
                "a candidacy is owned by a session: set session_id",
            ));
        }
        let replica = self.recipes.replica();
        check_session(replica, &caller, r.session_id, "campaign with it").await?;
        let value = owned_data(&r.value, self.limits)?;
        let timeout = timeout_of(r.timeout_ms)?;
        let spec = JoinSpec {
            queue: election_queue(&r.election)?,
            session_id: r.session_id,
            owner_id: r.participant_id.clone(),
            value: value.clone(),
            permits: 1,
        };
        let holding = self.recipes.acquire(&spec, timeout).await?;
        let leader = QueueEntry {
            key: holding.key,
            token: holding.token,
            session_id: r.session_id,
            owner_id: r.participant_id,
            value,
        };
        Ok(Response::new(pb::CampaignResponse {
            header: self.header(holding.zxid),
            leader: Some(info(&r.election, leader)),
        }))
    }

    async fn proclaim(
        &self,
        request: Request<pb::ProclaimRequest>,
    ) -> Result<Response<pb::ProclaimResponse>, Status> {
        let caller = caller_of(&request, self.security.policy());
        let r = request.into_inner();
        let value = owned_data(&r.value, self.limits)?;
        if r.term == 0 {
            return Err(bad_arguments("term must be the one Campaign returned"));
        }
        let replica = self.recipes.replica();
        check_member(replica, &caller, &r.key, r.term, "proclaim as its leader").await?;
        let zxid = self.recipes.update(&r.key, r.term, value).await?;
        Ok(Response::new(pb::ProclaimResponse {
            header: self.header(zxid),
        }))
    }

    async fn resign(
        &self,
        request: Request<pb::ResignRequest>,
    ) -> Result<Response<pb::ResignResponse>, Status> {
        let caller = caller_of(&request, self.security.policy());
        let r = request.into_inner();
        if r.term == 0 {
            return Err(bad_arguments("term must be the one Campaign returned"));
        }
        let replica = self.recipes.replica();
        check_member(replica, &caller, &r.key, r.term, "resign its candidacy").await?;
        let zxid = self.recipes.leave(&r.key, r.term).await?;
        Ok(Response::new(pb::ResignResponse {
            header: self.header(zxid),
        }))
    }

    async fn leader(
        &self,
        request: Request<pb::LeaderRequest>,
    ) -> Result<Response<pb::LeaderResponse>, Status> {
        let name = request.into_inner().election;
        let (zxid, leader) = self.recipes.leader(&name)?;
        Ok(Response::new(self.leader_response(zxid, leader, &name)))
    }

    type ObserveStream = ObserveStream;

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        let name = request.into_inner().election;
        let mut observer = self.recipes.observe(&name)?;
        let server_id = self.recipes.replica().server_id();
        let (tx, rx) = tokio::sync::mpsc::channel(OBSERVE_BUFFER);
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    next = observer.next() => next,
                    () = tx.closed() => return,
                };
                let Some(next) = next else { return };
                let item = next
                    .map_err(Status::from)
                    .map(|(zxid, leader)| pb::LeaderResponse {
                        header: header(server_id, zxid),
                        leader: leader.map(|e| info(&name, e)),
                    });
                let last = item.is_err();
                // The client went away: stop following.
                if tx.send(item).await.is_err() || last {
                    return;
                }
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn participants(
        &self,
        request: Request<pb::ParticipantsRequest>,
    ) -> Result<Response<pb::ParticipantsResponse>, Status> {
        let name = request.into_inner().election;
        let (zxid, members) = self.recipes.participants(&name)?;
        Ok(Response::new(pb::ParticipantsResponse {
            header: self.header(zxid),
            participants: members.into_iter().map(|e| info(&name, e)).collect(),
        }))
    }
}
