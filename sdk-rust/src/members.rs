//! `Cluster/Members`: the ensemble's members as the answering server knows them.
//!
//! What it must not do: retry on another server on its own (the caller picks whom
//! to ask: only the leader knows every member's progress).

use concord_proto::v1::{cluster_client::ClusterClient, MembersRequest};

use crate::call::Call;
use crate::client::Client;
use crate::error::Error;
use crate::types::Role;

/// One member, as the answering server knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// Its server id.
    pub id: u64,
    /// Its client address, from the configuration.
    pub client_addr: String,
    /// Its peer address, from the configuration.
    pub peer_addr: String,
    /// Where ZooKeeper clients reach it, from the configuration (empty: none named).
    pub zookeeper_addr: String,
    /// Configured as a voter (false: an observer, which never votes).
    pub voter: bool,
    /// Leader, follower or observer when known now; `Unknown` when unknown or
    /// unreachable (see the proto's `MemberStatus.role`).
    pub role: Role,
    /// Its applied zxid as far as the answering server knows (0: unknown).
    pub zxid: u64,
    /// Txns it is behind the newest the answering server knows of.
    pub lag_txns: u64,
    /// Whether `zxid` and `lag_txns` are known.
    pub known: bool,
    /// Milliseconds since the answering server (a leader) last heard from it.
    pub heard_ms_ago: u64,
}

/// The answer of `Client::members`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// The server that answered.
    pub server_id: u64,
    /// The leader it follows or is; 0 while it knows none.
    pub leader_id: u64,
    /// Every configured member, by id.
    pub members: Vec<MemberStatus>,
}

impl Client {
    /// The members of the ensemble as the server this client talks to knows them
    /// (exact for every member only on the leader). Needs an admin.
    pub async fn members(&self) -> Result<Members, Error> {
        let r = self
            .unary(Call::READ, MembersRequest {}, |ch, r| async move {
                ClusterClient::new(ch).members(r).await
            })
            .await?;
        self.saw(&r.header);
        Ok(Members {
            server_id: r.server_id,
            leader_id: r.leader_id,
            members: r
                .members
                .into_iter()
                .map(|m| MemberStatus {
                    id: m.id,
                    role: Role::from(m.role),
                    client_addr: m.client_addr,
                    peer_addr: m.peer_addr,
                    zookeeper_addr: m.zookeeper_addr,
                    voter: m.voter,
                    zxid: m.zxid,
                    lag_txns: m.lag_txns,
                    known: m.known,
                    heard_ms_ago: m.heard_ms_ago,
                })
                .collect(),
        })
    }
}
