//! Namespaces: what a caller sees as `/`, and the mapping of every path and queue
//! name between the caller's view and the tree.
//!
//! ```text
//!   team payments, root /teams/payments:
//!     client path  /x/y                  <-> tree path  /teams/payments/x/y
//!     client path  /                     <-> tree path  /teams/payments
//!     lock name    x                     <-> queue      /concord/locks/payments:x
//!     lock key     /concord/locks/x/0000000007
//!                                        <-> /concord/locks/payments:x/0000000007
//!   admin: every mapping is the identity
//! ```
//!
//! A client path is always inside the caller's root once mapped in: ZooKeeper paths
//! have no `..`, so `/teams/payments` + `/x` can only name a node below the root, and
//! the reserved `/concord` folder or another team's root is out of reach. A tree path
//! outside the root maps out to None: the services drop it (events, lists) or hide it.
//!
//! Lock and election queues live under the reserved `/concord/locks` and
//! `/concord/elections`, shared by every team: a team's queue name is prefixed with
//! its team name and a colon (team names never hold a colon, see identity.rs), so two
//! teams' lock `x` are two queues, and a team can neither name nor see another's.
//! Admins name queues as they are (and see a team's lock `x` as `payments:x`).
//!
//! What it must not do: check permissions (acl.rs), or look at the tree.

use super::identity::{Access, Caller};
use crate::tree::path::{self, PATH_BYTES_MAX};
use crate::tree::queue::{ELECTIONS_ROOT, LOCKS_ROOT};

/// One caller's view of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    /// The tree path the caller sees as `/`.
    root: String,
    /// The prefix of the caller's queue names ("payments:"), empty for an admin.
    queue_prefix: String,
}

impl Namespace {
    /// The view of `caller`: the whole tree for an admin (and, though the services
    /// refuse it first, for an unmapped caller), the team's root for a member.
    pub fn of(caller: &Caller) -> Namespace {
        match &caller.access {
            Access::Team(team) => Namespace {
                root: team.root.clone(),
                queue_prefix: format!("{}:", team.name),
            },
            Access::Admin | Access::Unmapped => Namespace::whole(),
        }
    }

    /// The whole tree, names as they are.
    pub fn whole() -> Namespace {
        Namespace {
            root: "/".to_string(),
            queue_prefix: String::new(),
        }
    }

    /// The tree path the caller sees as `/`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Whether the view is the tree itself (no mapping at all).
    pub fn is_identity(&self) -> bool {
        self.root == "/" && self.queue_prefix.is_empty()
    }

    /// The tree path of a (valid) client path, or why it cannot be one (too long
    /// once rooted).
    pub fn path_in(&self, client: &str) -> Result<String, String> {
        let tree = match (self.root.as_str(), client) {
            ("/", _) => return Ok(client.to_string()),
            (root, "/") => return Ok(root.to_string()),
            (root, client) => format!("{root}{client}"),
        };
        if tree.len() > PATH_BYTES_MAX {
            return Err(format!(
                "longer than {PATH_BYTES_MAX} bytes inside the namespace root ({} bytes)",
                self.root.len()
            ));
        }
        Ok(tree)
    }

    /// The client path of a tree path, or None if it is outside the root.
    pub fn path_out(&self, tree: &str) -> Option<String> {
        let root = self.root.as_str();
        if root == "/" {
            return Some(tree.to_string());
        }
        if tree == root {
            return Some("/".to_string());
        }
        let rest = tree.strip_prefix(root)?;
        rest.starts_with('/').then(|| rest.to_string())
    }

    /// The queue name behind a client's lock or election name.
    pub fn queue_name_in(&self, name: &str) -> String {
        format!("{}{name}", self.queue_prefix)
    }

    /// The tree path of a lock or election key (or a fence key): a key under the
    /// queue folders gets the caller's queue prefix; anything else is mapped as a
    /// path (it can then name no queue node, and a fence or release on it fails).
    pub fn key_in(&self, key: &str) -> String {
        if self.queue_prefix.is_empty() {
            return key.to_string();
        }
        for folder in [LOCKS_ROOT, ELECTIONS_ROOT] {
            if let Some(rest) = key.strip_prefix(folder) {
                if let Some(rest) = rest.strip_prefix('/') {
                    return format!("{folder}/{}{rest}", self.queue_prefix);
                }
            }
        }
        // Too long once rooted: still rooted (a path that long names no node), never
        // the key as the caller wrote it, which would name a node outside the root.
        self.path_in(key)
            .unwrap_or_else(|_| format!("{}{key}", self.root))
    }

    /// The client's name of a queue key (or any tree path: a key not under the queue
    /// folders maps as a path), or None if it is not the caller's.
    pub fn key_out(&self, key: &str) -> Option<String> {
        if self.queue_prefix.is_empty() {
            return Some(key.to_string());
        }
        for folder in [LOCKS_ROOT, ELECTIONS_ROOT] {
            if let Some(rest) = key.strip_prefix(folder) {
                if let Some(rest) = rest.strip_prefix('/') {
                    let rest = rest.strip_prefix(self.queue_prefix.as_str())?;
                    return Some(format!("{folder}/{rest}"));
                }
                if rest.is_empty() {
                    return None;
                }
            }
        }
        self.path_out(key)
    }

    /// A tree path or key as a message may show it: mapped out, or a mark saying it
    /// is outside the caller's namespace (never the tree path itself).
    pub fn shown(&self, tree: &str) -> String {
        self.key_out(tree)
            .unwrap_or_else(|| "(outside your namespace)".to_string())
    }

    /// `text` with the caller's own queue folders written as it names them
    /// ("/concord/locks/payments:x" becomes "/concord/locks/x"), for messages that
    /// carry a queue path inside free text.
    pub fn queue_text_out(&self, text: &str) -> String {
        if self.queue_prefix.is_empty() {
            return text.to_string();
        }
        let mut out = text.to_string();
        for folder in [LOCKS_ROOT, ELECTIONS_ROOT] {
            out = out.replace(
                &format!("{folder}/{}", self.queue_prefix),
                &format!("{folder}/"),
            );
        }
        out
    }

    /// Whether `key` names a place in a lock or election queue (its shape only).
    pub fn is_queue_key(key: &str) -> bool {
        [LOCKS_ROOT, ELECTIONS_ROOT].iter().any(|folder| {
            key.strip_prefix(folder)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| rest.contains('/'))
        })
    }

    /// The client name of a queue folder's name (None: not the caller's queue).
    pub fn queue_name_out<'a>(&self, name: &'a str) -> Option<&'a str> {
        name.strip_prefix(self.queue_prefix.as_str())
    }
}

/// A lock or election key's queue folder name, for tests and messages.
pub fn queue_of(key: &str) -> &str {
    path::name(path::parent(key))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A key too long to root is never used as written (outside the root).
    #[test]
    fn a_key_too_long_to_root_stays_inside_the_root() {
        let ns = Namespace {
            root: "/teams/pay".into(),
            queue_prefix: "pay:".into(),
        };
        let long = format!("/teams/search/{}", "x".repeat(PATH_BYTES_MAX - 14));
        assert!(long.len() <= PATH_BYTES_MAX);
        let mapped = ns.key_in(&long);
        assert!(mapped.starts_with("/teams/pay/"), "{}", &mapped[..40]);
    }
    use crate::security::Team;

    fn team(name: &str, root: &str) -> Namespace {
        Namespace::of(&Caller {
            identity: Arc::from("x"),
            access: Access::Team(Arc::new(Team {
                name: name.into(),
                root: root.into(),
                identities: Vec::new(),
                quota: Default::default(),
            })),
        })
    }

    #[test]
    fn paths_map_into_the_root_and_back() {
        let ns = team("pay", "/teams/pay");
        assert_eq!(ns.path_in("/").unwrap(), "/teams/pay");
        assert_eq!(ns.path_in("/x/y").unwrap(), "/teams/pay/x/y");
        assert_eq!(ns.path_in("/concord").unwrap(), "/teams/pay/concord");
        assert_eq!(ns.path_out("/teams/pay").as_deref(), Some("/"));
        assert_eq!(ns.path_out("/teams/pay/x").as_deref(), Some("/x"));
        assert_eq!(ns.path_out("/teams/payx"), None);
        assert_eq!(ns.path_out("/teams"), None);
        assert_eq!(ns.path_out("/concord/locks/a"), None);
        let long = format!("/{}", "a".repeat(PATH_BYTES_MAX - 1));
        assert!(ns.path_in(&long).is_err());
        let whole = Namespace::whole();
        assert!(whole.is_identity());
        assert_eq!(whole.path_in("/a").unwrap(), "/a");
        assert_eq!(whole.path_out("/a").as_deref(), Some("/a"));
    }

    #[test]
    fn queue_names_and_keys_carry_the_team() {
        let pay = team("pay", "/teams/pay");
        let search = team("search", "/teams/search");
        assert_eq!(pay.queue_name_in("x"), "pay:x");
        let key = "/concord/locks/x/0000000001";
        let tree = pay.key_in(key);
        assert_eq!(tree, "/concord/locks/pay:x/0000000001");
        assert_eq!(pay.key_out(&tree).as_deref(), Some(key));
        assert_eq!(search.key_out(&tree), None, "another team's key is hidden");
        assert_ne!(search.key_in(key), tree);
        assert_eq!(
            pay.key_in("/concord/elections/e/0000000002"),
            "/concord/elections/pay:e/0000000002"
        );
        // A key that is no queue key is a path in the namespace.
        assert_eq!(pay.key_in("/a"), "/teams/pay/a");
        assert_eq!(pay.key_in("/concord"), "/teams/pay/concord");
        assert_eq!(pay.key_out("/concord/locks"), None);
        assert_eq!(pay.shown("/teams/search/a"), "(outside your namespace)");
        assert_eq!(pay.queue_name_out("pay:x"), Some("x"));
        assert_eq!(pay.queue_name_out("search:x"), None);
        assert_eq!(queue_of(&tree), "pay:x");
        assert_eq!(
            pay.queue_text_out("/concord/locks/pay:x has 2 permits"),
            "/concord/locks/x has 2 permits"
        );
        assert!(Namespace::is_queue_key(key));
        assert!(!Namespace::is_queue_key("/concord/locks/x"));
        assert!(!Namespace::is_queue_key("/teams/pay/a"));
        // Admins see queue names as they are.
        assert_eq!(Namespace::whole().key_in(&tree), tree);
    }
}
