//! Applying `TxnOp::Access`: the bootstrap seed, grants and revocations of the
//! replicated grant table (`security::acl::Grants`), in zxid order like every txn.
//!
//! A seed is idempotent: it grants only what was never seeded (so a revoked seed
//! grant stays revoked) and creates only the namespace roots that are missing, so
//! any server may propose it at any time and a second seed changes nothing.
//!
//! What it must not do: IO, panics; check who asked (the services did).

use super::apply::Ctx;
use super::path;
use super::*;
use crate::security::{Grant, Grantee, GRANTS_MAX};
use crate::txn::{AccessOp, CreateOp};

impl DataTree {
    /// Applies one access op.
    pub(crate) fn apply_access(
        &mut self,
        op: &AccessOp,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<TxnResult, TreeError> {
        match op {
            AccessOp::Seed { grants, roots } => {
                for g in grants {
                    check_grant(g)?;
                }
                for root in roots {
                    self.create_with_parents(root, ctx, events);
                }
                self.grants.seed(grants);
            }
            AccessOp::Grant(g) => {
                check_grant(g)?;
                if !self.grants.grant(&g.path, &g.to, g.perms) {
                    return Err(TreeError::BadArguments(format!(
                        "the grant table is full ({GRANTS_MAX} grants)"
                    )));
                }
            }
            AccessOp::Revoke(g) => {
                check_grant(g)?;
                self.grants.revoke(&g.path, &g.to, g.perms);
            }
        }
        self.grants_zxid = ctx.zxid;
        Ok(TxnResult::AccessChanged)
    }

    /// Creates `target` and its missing ancestors as empty persistent nodes. Stops
    /// quietly at the first that cannot be created (a bad or reserved path, an
    /// ephemeral ancestor): a seed never fails on a root.
    fn create_with_parents(&mut self, target: &str, ctx: &Ctx, events: &mut Vec<Event>) {
        if path::validate(target).is_err() || queue::is_reserved(target) {
            return;
        }
        for at in crate::security::ancestors(target).skip(1) {
            if self.nodes.contains(at) {
                continue;
            }
            let op = CreateOp {
                path: at.to_string(),
                data: Bytes::new(),
                mode: CreateMode::Persistent,
                ttl_ms: 0,
                null_data: false,
            };
            if self.create(&op, ctx, events).is_err() {
                return;
            }
        }
    }

    /// The grant table as of the last applied txn (an O(1) clone keeps it).
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The zxid of the last txn that changed the grant table (at most
    /// `last_zxid()`): a permission checked on this tree at `last_zxid()` still holds
    /// on any tree whose `grants_zxid()` is not above it.
    pub fn grants_zxid(&self) -> Zxid {
        self.grants_zxid
    }
}

/// BadPath or BadArguments unless the grant is well formed.
fn check_grant(g: &Grant) -> Result<(), TreeError> {
    path::validate(&g.path).map_err(|reason| TreeError::BadPath {
        path: g.path.clone(),
        reason,
    })?;
    let name = match &g.to {
        Grantee::Identity(n) | Grantee::Team(n) => n,
    };
    if name.is_empty() {
        return Err(TreeError::BadArguments("a grant names no grantee".into()));
    }
    if g.perms.is_empty() {
        return Err(TreeError::BadArguments(
            "a grant names no permission".into(),
        ));
    }
    Ok(())
}
