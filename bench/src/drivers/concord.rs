//! The Concord driver: raw gRPC through `concord-proto`, one HTTP/2 connection per
//! client called directly (`direct.rs`), so the numbers show the server and not an
//! SDK's extra work.
//!
//! A session (opened on first need) is kept alive by a background task that pings every
//! TTL/3 and is stopped when the driver is dropped. It must not retry failed calls.

use std::time::Duration;

use concord_proto::v1 as pb;
use futures::StreamExt;
use tokio::task::JoinHandle;

use super::direct;
use super::{next_endpoint, BenchError, Driver, EventStream, Result};
use concord_direct::Direct;

/// Requested session TTL for ephemerals and locks.
const SESSION_TTL_MS: i64 = 10_000;

/// The server gives up a Campaign after this long (the workload gives up sooner).
const CAMPAIGN_TIMEOUT_MS: i64 = 30_000;

/// One Concord client.
pub struct Concord {
    /// The client's own HTTP/2 connection.
    channel: Direct,
    /// Tree service stub on `channel`.
    tree: pb::tree_client::TreeClient<Direct>,
    /// This client's session, once opened, and its keep-alive task.
    session: Option<(u64, JoinHandle<()>)>,
}

impl Drop for Concord {
    fn drop(&mut self) {
        if let Some((_, keepalive)) = &self.session {
            keepalive.abort();
        }
    }
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Backend {
        system: "concord",
        message: e.to_string(),
    }
}

impl Concord {
    async fn session_id(&mut self) -> Result<u64> {
        if let Some((id, _)) = &self.session {
            return Ok(*id);
        }
        let mut sessions = pb::session_client::SessionClient::new(self.channel.clone());
        let opened = sessions
            .open(pb::OpenSessionRequest {
                ttl_ms: SESSION_TTL_MS,
            })
            .await
            .map_err(err)?
            .into_inner();
        let id = opened.session_id;
        let min_zxid = opened.header.map_or(0, |h| h.zxid);
        let period = Duration::from_millis(u64::try_from(opened.ttl_ms / 3).unwrap_or(1000));
        let pings = futures::stream::unfold(true, move |first| async move {
            if !first {
                tokio::time::sleep(period).await;
            }
            let ping = pb::KeepAliveRequest {
                session_id: id,
                min_zxid,
            };
            Some((ping, false))
        });
        let keepalive = tokio::spawn(async move {
            if let Ok(replies) = sessions.keep_alive(pings).await {
                let mut replies = replies.into_inner();
                while let Some(Ok(_)) = replies.next().await {}
            }
        });
        self.session = Some((id, keepalive));
        Ok(id)
    }
}

impl Driver for Concord {
    const NAME: &'static str = "concord";

    async fn connect(endpoints: &str) -> Result<Self> {
        let channel = direct::connect(next_endpoint(endpoints))
            .await
            .map_err(err)?;
        Ok(Self {
            tree: pb::tree_client::TreeClient::new(channel.clone()),
            channel,
            session: None,
        })
    }

    async fn ensure_parent(&mut self, path: &str) -> Result<()> {
        let request = pb::CreateRequest {
            path: path.to_owned(),
            ..Default::default()
        };
        match self.tree.create(request).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == tonic::Code::AlreadyExists => Ok(()),
            Err(s) => Err(err(s)),
        }
    }

    async fn create(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let request = pb::CreateRequest {
            path: key.to_owned(),
            data: value.to_vec().into(),
            ..Default::default()
        };
        self.tree.create(request).await.map_err(err)?;
        Ok(())
    }

    async fn write(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let request = pb::SetRequest {
            path: key.to_owned(),
            data: value.to_vec().into(),
            version: -1,
            ..Default::default()
        };
        self.tree.set(request).await.map_err(err)?;
        Ok(())
    }

    async fn read(&mut self, key: &str, linearizable: bool) -> Result<()> {
        let request = pb::GetRequest {
            path: key.to_owned(),
            linearizable,
            ..Default::default()
        };
        self.tree.get(request).await.map_err(err)?;
        Ok(())
    }

    async fn create_ephemeral_sequential(&mut self, parent: &str, value: &[u8]) -> Result<()> {
        let session_id = self.session_id().await?;
        let request = pb::CreateRequest {
            path: format!("{parent}/e-"),
            data: value.to_vec().into(),
            mode: pb::CreateMode::EphemeralSequential.into(),
            session_id,
            ..Default::default()
        };
        self.tree.create(request).await.map_err(err)?;
        Ok(())
    }

    async fn watch(&mut self, key: &str) -> Result<EventStream> {
        let mut watches = pb::watch_client::WatchClient::new(self.channel.clone());
        let request = pb::WatchRequest {
            path: key.to_owned(),
            kinds: vec![pb::EventKind::DataChanged.into()],
            ..Default::default()
        };
        let mut stream = watches.watch(request).await.map_err(err)?.into_inner();
        // Registered once the server says `started`.
        loop {
            let reply = stream.message().await.map_err(err)?;
            match reply.and_then(|r| r.msg) {
                Some(pb::watch_response::Msg::Started(_)) => break,
                Some(_) => continue,
                None => return Err(err("watch stream ended before it started")),
            }
        }
        let events = stream.filter_map(|reply| async move {
            match reply {
                Ok(r) => match r.msg {
                    Some(pb::watch_response::Msg::Event(_)) => Some(Ok(())),
                    _ => None,
                },
                Err(s) => Some(Err(err(s))),
            }
        });
        Ok(events.boxed())
    }

    async fn with_lock<F>(&mut self, name: &str, critical: F) -> Result<()>
    where
        F: std::future::Future<Output = ()> + Send,
    {
        let session_id = self.session_id().await?;
        let mut locks = pb::lock_client::LockClient::new(self.channel.clone());
        let acquired = locks
            .acquire(pb::AcquireRequest {
                name: name.trim_start_matches('/').replace('/', "-"),
                session_id,
                owner_id: format!("bench-{session_id}"),
                ..Default::default()
            })
            .await;
        let (key, token) = match acquired {
            Ok(r) => {
                let r = r.into_inner();
                (r.key, r.token)
            }
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                return Err(BenchError::NotYet(
                    "Concord's Lock RPC is not built yet (locks issue)".into(),
                ))
            }
            Err(s) => return Err(err(s)),
        };
        critical.await;
        locks
            .release(pb::ReleaseRequest { key, token })
            .await
            .map_err(err)?;
        Ok(())
    }

    /// The leader key and its term.
    type Leadership = (String, u64);

    async fn campaign(&mut self, election: &str) -> Result<Self::Leadership> {
        let session_id = self.session_id().await?;
        let mut elections = pb::election_client::ElectionClient::new(self.channel.clone());
        let request = pb::CampaignRequest {
            election: election.to_owned(),
            session_id,
            participant_id: format!("bench-{session_id}"),
            value: Vec::new().into(),
            timeout_ms: CAMPAIGN_TIMEOUT_MS,
        };
        let leader = match elections.campaign(request).await {
            Ok(r) => r.into_inner().leader,
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                return Err(BenchError::NotYet(
                    "Concord's Election RPC is not built".into(),
                ))
            }
            Err(s) => return Err(err(s)),
        };
        let leader = leader.ok_or_else(|| err("Campaign answered without a leader"))?;
        Ok((leader.key, leader.term))
    }

    async fn candidates(&mut self, election: &str) -> Result<usize> {
        let mut elections = pb::election_client::ElectionClient::new(self.channel.clone());
        let request = pb::ParticipantsRequest {
            election: election.to_owned(),
        };
        let reply = elections.participants(request).await.map_err(err)?;
        Ok(reply.into_inner().participants.len())
    }

    async fn resign(&mut self, (key, term): Self::Leadership) -> Result<()> {
        let mut elections = pb::election_client::ElectionClient::new(self.channel.clone());
        let request = pb::ResignRequest { key, term };
        elections.resign(request).await.map_err(err)?;
        Ok(())
    }

    async fn end_session(mut self) -> Result<()> {
        let Some((session_id, keepalive)) = self.session.take() else {
            return Ok(());
        };
        keepalive.abort();
        let mut sessions = pb::session_client::SessionClient::new(self.channel.clone());
        sessions
            .close(pb::CloseSessionRequest { session_id })
            .await
            .map_err(err)?;
        Ok(())
    }
}
