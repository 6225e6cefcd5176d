//! The `concord.v1.Election` service: check input, call the recipes, answer.

use std::pin::Pin;
use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::election_server::Election;
use futures::Stream;
use tonic::{Request, Response, Status};

use super::authz::View;
use super::convert::{header, owned_data, Limits};
use super::error::bad_arguments;
use super::lock::{queue_name_in, queue_view, timeout_of};
use super::owner::{check_member, check_session};
use super::watch::PROGRESS_MIN;
use crate::recipes::{election_queue, JoinSpec, Recipes};
use crate::security::Perms;
use crate::tree::queue::QueueEntry;
use crate::txn::Zxid;

/// Most leader changes queued for one Observe stream before it waits for the client.
const OBSERVE_BUFFER: usize = 64;

pub struct ElectionService {
    recipes: Recipes,
    limits: Limits,
}

impl ElectionService {
    pub fn new(recipes: Recipes, limits: Limits) -> Self {
        ElectionService { recipes, limits }
    }

    fn header(&self, zxid: Zxid) -> Option<pb::ResponseHeader> {
        header(self.recipes.replica().server_id(), zxid)
    }

    fn leader_response(
        &self,
        view: &View,
        zxid: Zxid,
        leader: Option<QueueEntry>,
        name: &str,
    ) -> pb::LeaderResponse {
        pb::LeaderResponse {
            header: self.header(zxid),
            leader: leader.map(|e| info(view, name, e)),
            progress: false,
        }
    }
}

/// A leader or candidate as the caller sees it: `election` is the caller's name.
fn info(view: &View, election: &str, e: QueueEntry) -> pb::LeaderInfo {
    pb::LeaderInfo {
        election: election.to_string(),
        key: view.path_out(&e.key),
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
        let view = queue_view(&self.recipes, &request, Perms::WRITE)?;
        let r = request.into_inner();
        if r.session_id == 0 {
            return Err(bad_arguments(
                "a candidacy is owned by a session: set session_id",
            ));
        }
        let replica = self.recipes.replica();
        check_session(replica, &view.caller, r.session_id).await?;
        let value = owned_data(&r.value, self.limits)?;
        let timeout = timeout_of(r.timeout_ms)?;
        let spec = JoinSpec {
            queue: election_queue(&queue_name_in(&view, &r.election)?)?,
            session_id: r.session_id,
            owner_id: r.participant_id.clone(),
            value: value.clone(),
            permits: 1,
            needs: view.needs_on_root(Perms::WRITE),
        };
        let holding = self
            .recipes
            .acquire(&spec, timeout)
            .await
            .map_err(|e| view.recipe_status(e))?;
        let leader = QueueEntry {
            key: holding.key,
            token: holding.token,
            session_id: r.session_id,
            owner_id: r.participant_id,
            value,
        };
        Ok(Response::new(pb::CampaignResponse {
            header: self.header(holding.zxid),
            leader: Some(info(&view, &r.election, leader)),
        }))
    }

    async fn proclaim(
        &self,
        request: Request<pb::ProclaimRequest>,
    ) -> Result<Response<pb::ProclaimResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::WRITE)?;
        let r = request.into_inner();
        let value = owned_data(&r.value, self.limits)?;
        if r.term == 0 {
            return Err(bad_arguments("term must be the one Campaign returned"));
        }
        let key = view.queue_key_in(&r.key)?;
        let replica = self.recipes.replica();
        check_member(
            replica,
            &view.caller,
            &key,
            r.term,
            "proclaim as its leader",
        )
        .await?;
        let zxid = self
            .recipes
            .update(
                &key,
                r.term,
                value,
                view.needs_on_root(Perms::WRITE).as_ref(),
            )
            .await
            .map_err(|e| view.recipe_status(e))?;
        Ok(Response::new(pb::ProclaimResponse {
            header: self.header(zxid),
        }))
    }

    async fn resign(
        &self,
        request: Request<pb::ResignRequest>,
    ) -> Result<Response<pb::ResignResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::WRITE)?;
        let r = request.into_inner();
        if r.term == 0 {
            return Err(bad_arguments("term must be the one Campaign returned"));
        }
        let key = view.queue_key_in(&r.key)?;
        let replica = self.recipes.replica();
        check_member(replica, &view.caller, &key, r.term, "resign its candidacy").await?;
        let zxid = self
            .recipes
            .leave(&key, r.term)
            .await
            .map_err(|e| view.recipe_status(e))?;
        Ok(Response::new(pb::ResignResponse {
            header: self.header(zxid),
        }))
    }

    async fn leader(
        &self,
        request: Request<pb::LeaderRequest>,
    ) -> Result<Response<pb::LeaderResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::READ)?;
        let name = request.into_inner().election;
        let queue = queue_name_in(&view, &name)?;
        self.recipes.replica().in_touch().await?;
        let (zxid, leader) = self
            .recipes
            .leader(&queue)
            .map_err(|e| view.recipe_status(e))?;
        Ok(Response::new(
            self.leader_response(&view, zxid, leader, &name),
        ))
    }

    type ObserveStream = ObserveStream;

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::READ)?;
        let r = request.into_inner();
        let name = r.election;
        let interval = (r.progress_interval_ms > 0)
            .then(|| Duration::from_millis(u64::from(r.progress_interval_ms)).max(PROGRESS_MIN));
        let queue = queue_name_in(&view, &name)?;
        self.recipes.replica().in_touch().await?;
        let mut observer = self
            .recipes
            .observe(&queue)
            .map_err(|e| view.recipe_status(e))?;
        let server_id = self.recipes.replica().server_id();
        let replica = self.recipes.replica().clone();
        let (tx, rx) = tokio::sync::mpsc::channel(OBSERVE_BUFFER);
        tokio::spawn(async move {
            // The last leader sent, repeated by progress messages.
            let mut last: Option<pb::LeaderInfo> = None;
            // Without a leader for long, this server's view may be stale: the client
            // observes from another.
            let cut_off = replica.cut_off();
            tokio::pin!(cut_off);
            loop {
                let quiet = async {
                    match interval {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                };
                // None: `interval` passed without a change.
                let next = tokio::select! {
                    next = observer.next() => Some(next),
                    () = quiet => None,
                    () = tx.closed() => return,
                    lost = &mut cut_off => {
                        let _ = tx.send(Err(lost.into())).await;
                        return;
                    }
                };
                // A revoked `r` ends the stream at once, with PERMISSION_DENIED.
                let allowed = replica.read(|t| view.check(t.grants(), view.ns.root(), Perms::READ));
                let item = match next {
                    Some(None) => return,
                    Some(Some(next)) => allowed
                        .and_then(|()| next.map_err(|e| view.recipe_status(e)))
                        .map(|(zxid, leader)| {
                            last = leader.map(|e| info(&view, &name, e));
                            pb::LeaderResponse {
                                header: header(server_id, zxid),
                                leader: last.clone(),
                                progress: false,
                            }
                        }),
                    None => {
                        let Some(zxid) = observer.idle_progress() else {
                            continue;
                        };
                        allowed.map(|()| pb::LeaderResponse {
                            header: header(server_id, zxid),
                            leader: last.clone(),
                            progress: true,
                        })
                    }
                };
                let end = item.is_err();
                // The client went away: stop following.
                if tx.send(item).await.is_err() || end {
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
        let view = queue_view(&self.recipes, &request, Perms::READ)?;
        let name = request.into_inner().election;
        let queue = queue_name_in(&view, &name)?;
        self.recipes.replica().in_touch().await?;
        let (zxid, members) = self
            .recipes
            .participants(&queue)
            .map_err(|e| view.recipe_status(e))?;
        Ok(Response::new(pb::ParticipantsResponse {
            header: self.header(zxid),
            participants: members.into_iter().map(|e| info(&view, &name, e)).collect(),
        }))
    }
}
