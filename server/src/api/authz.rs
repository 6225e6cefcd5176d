//! What every handler does first: who is calling (`View::of`), mapping its paths
//! into the tree and back (`security::Namespace`), and checking its permissions
//! against the replicated grant table (`security::Grants`). Refusals are
//! PERMISSION_DENIED naming the caller's path (clipped) and the missing permission.
//!
//! ```text
//!   request ─▶ View::of (Unmapped ─▶ PERMISSION_DENIED) ─▶ path_in ─▶ check(r|w|c|d|a)
//!           ─▶ submit / read ─▶ path_out, error_out ─▶ response
//! ```
//!
//! A request that no `Authenticated` layer saw (a handler called directly, as in
//! unit tests) is the local admin's.
//!
//! What it must not do: decide permissions itself (security::acl does).

use std::sync::Arc;

use concord_proto::v1::ErrorCode;
use tonic::{Request, Status};

use super::error::{at_op, error};
use crate::recipes::{Needs, RecipeError};
use crate::security::{self, Access, Caller, Denied, Grants, Namespace, Perms};
use crate::tree::path::clip;
use crate::tree::TreeError;

/// A request's caller and its view of the tree.
#[derive(Clone, Debug)]
pub(crate) struct View {
    pub(crate) caller: Caller,
    pub(crate) ns: Namespace,
}

/// The caller of `request` (the local admin when no `Authenticated` layer ran).
pub(crate) fn caller_of<T>(request: &Request<T>) -> Caller {
    security::caller(request)
        .cloned()
        .unwrap_or_else(|| Caller {
            identity: Arc::from("admin"),
            access: Access::Admin,
        })
}

impl View {
    /// The view of the caller of `request`; PERMISSION_DENIED for an identity no
    /// rule names (it may only call WhoAmI and Status).
    pub(crate) fn of<T>(request: &Request<T>) -> Result<View, Status> {
        View::for_caller(caller_of(request))
    }

    /// The view of `caller`, for any door; PERMISSION_DENIED for an identity no
    /// rule names.
    pub(crate) fn for_caller(caller: Caller) -> Result<View, Status> {
        if caller.access == Access::Unmapped {
            return Err(error(
                ErrorCode::PermissionDenied,
                format!(
                    "identity {:?} is neither an admin nor in a team; it may only call WhoAmI",
                    clip(&caller.identity).to_string()
                ),
            ));
        }
        let ns = Namespace::of(&caller);
        Ok(View { caller, ns })
    }

    /// Whether checks can be skipped (an admin has every permission).
    pub(crate) fn is_admin(&self) -> bool {
        self.caller.is_admin()
    }

    /// The tree path of a valid client path; BAD_PATH if it is too long once rooted.
    pub(crate) fn path_in(&self, client: &str) -> Result<String, Status> {
        self.ns.path_in(client).map_err(|reason| {
            error(
                ErrorCode::BadPath,
                format!("\"{}\": {}", clip(client), clip(&reason)),
            )
        })
    }

    /// The tree prefix of a sequential create's client prefix ("/" or "/q/"): the
    /// suffix must land inside the root, so "/" becomes "ROOT/".
    pub(crate) fn create_path_in(&self, client: &str, sequential: bool) -> Result<String, Status> {
        if sequential && client == "/" && self.ns.root() != "/" {
            return Ok(format!("{}/", self.ns.root()));
        }
        self.path_in(client)
    }

    /// The client path of a tree path (the mark of `Namespace::shown` if outside).
    pub(crate) fn path_out(&self, tree: &str) -> String {
        self.ns.shown(tree)
    }

    /// Ok if the caller has `need` at the tree path `path` in `grants`.
    pub(crate) fn check(&self, grants: &Grants, path: &str, need: Perms) -> Result<(), Status> {
        if self.is_admin() {
            return Ok(());
        }
        grants
            .check(&self.caller, path, need)
            .map_err(|d| self.denied(&d, None))
    }

    /// The PERMISSION_DENIED status of a failed check (of op `op` of a Multi).
    pub(crate) fn denied(&self, d: &Denied, op: Option<usize>) -> Status {
        let message = format!(
            "{:?} has no {} permission on {}",
            clip(&self.caller.identity).to_string(),
            d.missing.names(),
            clip(&self.path_out(&d.path))
        );
        match op {
            Some(index) => at_op(ErrorCode::PermissionDenied, index, message),
            None => error(ErrorCode::PermissionDenied, message),
        }
    }

    /// A tree error with its paths and keys as the caller sees them.
    pub(crate) fn tree_error_out(&self, e: TreeError) -> TreeError {
        if self.ns.is_identity() {
            return e;
        }
        let out = |p: String| self.ns.shown(&p);
        use TreeError as E;
        match e {
            E::NodeExists { path } => E::NodeExists { path: out(path) },
            E::NoNode { path } => E::NoNode { path: out(path) },
            E::BadVersion {
                path,
                expected,
                actual,
            } => E::BadVersion {
                path: out(path),
                expected,
                actual,
            },
            E::NotEmpty { path } => E::NotEmpty { path: out(path) },
            E::NoChildrenForEphemerals { path } => E::NoChildrenForEphemerals { path: out(path) },
            E::BadPath { path, reason } => E::BadPath {
                path: out(path),
                reason,
            },
            E::NotReapable { path } => E::NotReapable { path: out(path) },
            E::Fenced { key, token } => E::Fenced {
                key: out(key),
                token,
            },
            E::Reserved { path } => E::Reserved { path: out(path) },
            E::LockHeld { queue } => E::LockHeld { queue: out(queue) },
            // Names the team, never a path.
            e @ E::QuotaExceeded { .. } => e,
            e @ E::GrantsChanged { .. } => e,
            E::MultiOp { index, source } => E::MultiOp {
                index,
                source: Box::new(self.tree_error_out(*source)),
            },
            E::BadArguments(m) => E::BadArguments(self.ns.queue_text_out(&m)),
            e @ E::SessionExpired { .. } => e,
        }
    }

    /// The tree path of a lock or election key (Release, Validate, Proclaim,
    /// Resign); BAD_ARGUMENTS, naming the key as given, if it is not one.
    pub(crate) fn queue_key_in(&self, key: &str) -> Result<String, Status> {
        if !Namespace::is_queue_key(key) {
            return Err(error(
                ErrorCode::BadArguments,
                format!("{} is not a lock or election queue member", clip(key)),
            ));
        }
        Ok(self.ns.key_in(key))
    }

    /// A recipe error with its keys as the caller sees them.
    pub(crate) fn recipe_error_out(&self, e: RecipeError) -> RecipeError {
        match e {
            RecipeError::Tree(e) => RecipeError::Tree(self.tree_error_out(e)),
            RecipeError::Lost {
                key,
                session_id,
                expired,
            } => RecipeError::Lost {
                key: self.ns.shown(&key),
                session_id,
                expired,
            },
            e => e,
        }
    }

    /// The status of a recipe error, keys mapped out.
    pub(crate) fn recipe_status(&self, e: RecipeError) -> Status {
        match e {
            RecipeError::Denied(d) => self.denied(&d, None),
            e => self.recipe_error_out(e).into(),
        }
    }

    /// What a queue write of this caller needs at its namespace root when it is
    /// proposed (None for an admin).
    pub(crate) fn needs_on_root(&self, perms: Perms) -> Option<Needs> {
        (!self.is_admin()).then(|| Needs {
            caller: self.caller.clone(),
            path: self.ns.root().to_string(),
            perms,
        })
    }

    /// The status of a tree error, paths mapped out.
    pub(crate) fn tree_status(&self, e: TreeError) -> Status {
        self.tree_error_out(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::Team;

    #[test]
    fn errors_name_paths_as_the_caller_sees_them() {
        let caller = Caller {
            identity: Arc::from("pay-1"),
            access: Access::Team(Arc::new(Team {
                name: "pay".into(),
                root: "/teams/pay".into(),
                identities: Vec::new(),
                quota: Default::default(),
            })),
        };
        let view = View {
            ns: Namespace::of(&caller),
            caller,
        };
        let e = TreeError::MultiOp {
            index: 2,
            source: Box::new(TreeError::NoNode {
                path: "/teams/pay/a".into(),
            }),
        };
        let status = view.tree_status(e);
        assert_eq!(status.message(), "NO_NODE: op 2: /a does not exist");
        let status = view.tree_status(TreeError::NodeExists {
            path: "/teams/other".into(),
        });
        assert!(!status.message().contains("/teams"), "{}", status.message());
        let held = view.tree_status(TreeError::LockHeld {
            queue: "/concord/locks/pay:x".into(),
        });
        assert_eq!(held.message(), "LOCK_HELD: /concord/locks/x is held");
        let d = Denied {
            path: "/teams/pay/a".into(),
            missing: Perms::CREATE,
        };
        let s = view.denied(&d, Some(1));
        assert_eq!(
            s.message(),
            "PERMISSION_DENIED: op 1: \"pay-1\" has no create permission on /a"
        );
    }
}
