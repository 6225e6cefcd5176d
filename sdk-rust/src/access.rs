//! Who am I, and grants: `Cluster/WhoAmI` and the `concord.v1.Access` service
//! (docs/security.md, "ACLs"). Paths are as the caller sees them (a team's `/` is
//! its namespace root).
//!
//! What it must not do: retry (a grant is a write; the caller decides).

use concord_proto::v1::{
    access_client::AccessClient, cluster_client::ClusterClient, grant, GrantRequest,
    ListGrantsRequest, RevokeRequest, WhoAmIRequest,
};

use crate::call::Call;
use crate::client::Client;
use crate::error::Error;

/// Who a grant is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Grantee {
    /// An identity name, or a pattern where `*` stands for any run of characters.
    Identity(String),
    /// Every member of a team (by its name in the server's config).
    Team(String),
}

/// One grant: permissions (letters of "rwcda") on the subtree at `path`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    /// The subtree the grant covers (as the caller sees paths).
    pub path: String,
    /// Who holds it.
    pub to: Grantee,
    /// A subset of "rwcda", in that order.
    pub perms: String,
}

/// One quota of the caller's team and how much of it is in use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuotaUsage {
    /// "nodes", "data_bytes", "sessions", "watches" or "requests_per_second".
    pub resource: String,
    /// In use now (for requests_per_second: taken from the team's bucket on the
    /// answering server and not yet refilled).
    pub used: u64,
    /// The limit; 0: unlimited.
    pub limit: u64,
}

/// What the server takes the caller for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhoAmI {
    /// From the client certificate, or the server's local identity.
    pub identity: String,
    /// Whether the caller is an admin (sees and may change everything).
    pub admin: bool,
    /// Empty for an admin or an identity no team names.
    pub team: String,
    /// The tree path the caller sees as `/` ("/" for an admin; empty if unmapped).
    pub namespace_root: String,
    /// The grants that apply to the caller, paths as it sees them.
    pub grants: Vec<Grant>,
    /// The quotas of the caller's team and their use; empty for an admin or an
    /// identity in no team.
    pub usage: Vec<QuotaUsage>,
}

fn grant_in(g: concord_proto::v1::Grant) -> Option<Grant> {
    let to = match g.to? {
        grant::To::Identity(i) => Grantee::Identity(i),
        grant::To::Team(t) => Grantee::Team(t),
    };
    Some(Grant {
        path: g.path,
        to,
        perms: g.perms,
    })
}

fn grant_out(path: &str, to: &Grantee, perms: &str) -> concord_proto::v1::Grant {
    concord_proto::v1::Grant {
        path: path.to_owned(),
        to: Some(match to {
            Grantee::Identity(i) => grant::To::Identity(i.clone()),
            Grantee::Team(t) => grant::To::Team(t.clone()),
        }),
        perms: perms.to_owned(),
    }
}

impl Client {
    /// Who the server takes this client for (works for every caller).
    pub async fn who_am_i(&self) -> Result<WhoAmI, Error> {
        let r = self
            .unary(Call::READ, WhoAmIRequest {}, |ch, r| async move {
                ClusterClient::new(ch).who_am_i(r).await
            })
            .await?;
        self.saw(&r.header);
        Ok(WhoAmI {
            identity: r.identity,
            admin: r.admin,
            team: r.team,
            namespace_root: r.namespace_root,
            grants: r.grants.into_iter().filter_map(grant_in).collect(),
            usage: r
                .usage
                .into_iter()
                .map(|u| QuotaUsage {
                    resource: u.resource,
                    used: u.used,
                    limit: u.limit,
                })
                .collect(),
        })
    }

    /// Adds `perms` (letters of "rwcda") to the grant of (`path`, `to`). Needs `a` on
    /// `path`. Returns the zxid of the change.
    pub async fn grant(&self, path: &str, to: &Grantee, perms: &str) -> Result<u64, Error> {
        let req = GrantRequest {
            grant: Some(grant_out(path, to, perms)),
        };
        let r = self
            .unary(Call::write(false), req, |ch, r| async move {
                AccessClient::new(ch).grant(r).await
            })
            .await?;
        Ok(self.saw(&r.header))
    }

    /// Removes `perms` from the grant of (`path`, `to`). Needs `a` on `path`.
    pub async fn revoke(&self, path: &str, to: &Grantee, perms: &str) -> Result<u64, Error> {
        let req = RevokeRequest {
            grant: Some(grant_out(path, to, perms)),
        };
        let r = self
            .unary(Call::write(false), req, |ch, r| async move {
                AccessClient::new(ch).revoke(r).await
            })
            .await?;
        Ok(self.saw(&r.header))
    }

    /// The grants on `path` (and below it with `recursive`). Needs `a` on `path`.
    pub async fn list_grants(&self, path: &str, recursive: bool) -> Result<Vec<Grant>, Error> {
        let req = ListGrantsRequest {
            path: path.to_owned(),
            recursive,
        };
        let r = self
            .unary(Call::READ, req, |ch, r| async move {
                AccessClient::new(ch).list_grants(r).await
            })
            .await?;
        self.saw(&r.header);
        Ok(r.grants.into_iter().filter_map(grant_in).collect())
    }
}
