//! Permissions on subtrees: `Perms` (rwcda), `Grant`s to identities or teams, and the
//! replicated grant table `Grants` with the one question every service asks: what
//! may this caller do at this path?
//!
//! ```text
//!   effective(caller, /a/b/c) = ∪ perms of the grants on /, /a, /a/b, /a/b/c
//!                               whose grantee matches the caller
//!   admin: everything        unmapped identity: nothing
//! ```
//!
//! Grants are inherited downward and additive (never a deny), unlike ZooKeeper's
//! per-node ACLs. The table is part of the replicated state: the tree holds it and
//! changes it only by applying `TxnOp::Access` (tree/access.rs), so every server
//! answers the same way at the same zxid. Paths here are tree paths (absolute); the
//! services map a team's paths in and out (`namespace`).
//!
//! What it must not do: IO, or know about requests (the services ask, this answers).

use serde::{Deserialize, Serialize};

use super::identity::{glob_matches, Access, Caller};
use crate::tree::path;

/// A set of permissions: read, write, create, delete, admin (ZooKeeper's rwcda).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Perms(u8);

/// The letters of the permissions, in bit order.
const LETTERS: [(char, Perms); 5] = [
    ('r', Perms::READ),
    ('w', Perms::WRITE),
    ('c', Perms::CREATE),
    ('d', Perms::DELETE),
    ('a', Perms::ADMIN),
];

impl Perms {
    pub const NONE: Perms = Perms(0);
    /// Read a node's data, stat and children; watch it.
    pub const READ: Perms = Perms(1);
    /// Change a node's data.
    pub const WRITE: Perms = Perms(2);
    /// Create children (checked on the parent).
    pub const CREATE: Perms = Perms(4);
    /// Delete children (checked on the parent).
    pub const DELETE: Perms = Perms(8);
    /// Manage grants on the subtree.
    pub const ADMIN: Perms = Perms(16);
    pub const ALL: Perms = Perms(31);

    /// Parses letters of "rwcda" (any order, repeats allowed); refuses others.
    pub fn parse(text: &str) -> Result<Perms, String> {
        let mut perms = Perms::NONE;
        for ch in text.chars() {
            match LETTERS.iter().find(|(l, _)| *l == ch) {
                Some((_, p)) => perms = perms.union(*p),
                None => {
                    return Err(format!(
                        "permission {ch:?} is not one of r, w, c, d, a (in {:?})",
                        path::clip(text)
                    ))
                }
            }
        }
        Ok(perms)
    }

    /// The bits as stored (only the five low bits are meaningful).
    pub fn bits(self) -> u8 {
        self.0
    }

    /// The permissions of `bits`, ignoring unknown bits.
    pub fn from_bits(bits: u8) -> Perms {
        Perms(bits & Perms::ALL.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every permission of `other` is in `self`.
    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn union(self, other: Perms) -> Perms {
        Perms(self.0 | other.0)
    }

    /// `self` without the permissions of `other`.
    pub fn minus(self, other: Perms) -> Perms {
        Perms(self.0 & !other.0)
    }

    /// Names of the permissions, for messages ("read", "create", ...).
    pub fn names(self) -> String {
        const NAMES: [&str; 5] = ["read", "write", "create", "delete", "admin"];
        let names: Vec<&str> = LETTERS
            .iter()
            .zip(NAMES)
            .filter(|((_, p), _)| self.contains(*p))
            .map(|(_, n)| n)
            .collect();
        names.join("+")
    }
}

impl std::fmt::Display for Perms {
    /// The letters, in "rwcda" order.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (letter, p) in LETTERS {
            if self.contains(p) {
                write!(f, "{letter}")?;
            }
        }
        Ok(())
    }
}

/// Who a grant is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Grantee {
    /// An identity name, or a pattern where `*` stands for any run of characters.
    Identity(String),
    /// Every member of the team of this name.
    Team(String),
}

impl Grantee {
    /// Whether the grant applies to `caller` (never to an admin or unmapped caller:
    /// they have everything, or nothing, whatever the grants say).
    pub fn matches(&self, caller: &Caller) -> bool {
        match (&caller.access, self) {
            (Access::Team(team), Grantee::Team(name)) => team.name == *name,
            (Access::Team(_), Grantee::Identity(pattern)) => {
                glob_matches(pattern, &caller.identity)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Grantee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Grantee::Identity(p) => write!(f, "identity {:?}", path::clip(p).to_string()),
            Grantee::Team(t) => write!(f, "team {:?}", path::clip(t).to_string()),
        }
    }
}

/// Permissions on the subtree at `path` for `to`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    /// An absolute tree path.
    pub path: String,
    pub to: Grantee,
    pub perms: Perms,
}

/// A check failed: `missing` is needed on `path` (a tree path) and not granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub path: String,
    pub missing: Perms,
}

/// Most grants in the table; a Grant beyond it fails (a bound on replicated state).
pub const GRANTS_MAX: usize = 65_536;

/// The replicated grant table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    /// Grants by path, then grantee. Persistent maps: a clone is O(1), so a watch
    /// stream can hold the table of the moment while it checks a batch.
    by_path: imbl::OrdMap<String, imbl::OrdMap<Grantee, Perms>>,
    /// Number of (path, grantee) entries in `by_path`.
    len: usize,
    /// Every (path, grantee) a seed ever granted: a seed grant is applied once, so
    /// one that was revoked later is not granted again by the next seed.
    seeded: imbl::OrdSet<(String, Grantee)>,
}

impl Grants {
    /// An empty table (nothing granted, nothing seeded).
    pub fn new() -> Grants {
        Grants::default()
    }

    /// Whether nothing was ever granted or seeded.
    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty() && self.seeded.is_empty()
    }

    /// Number of (path, grantee) grants.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Adds `perms` to the grant of (path, to). False if the table is full and this
    /// would be a new entry (nothing changes then).
    pub fn grant(&mut self, path: &str, to: &Grantee, perms: Perms) -> bool {
        if perms.is_empty() {
            return true;
        }
        let exists = self.by_path.get(path).is_some_and(|m| m.contains_key(to));
        if !exists && self.len >= GRANTS_MAX {
            return false;
        }
        let entry = self.by_path.entry(path.to_string()).or_default();
        let old = entry.get(to).copied().unwrap_or_default();
        entry.insert(to.clone(), old.union(perms));
        if !exists {
            self.len += 1;
        }
        true
    }

    /// Removes `perms` from the grant of (path, to); drops it once empty.
    pub fn revoke(&mut self, path: &str, to: &Grantee, perms: Perms) {
        let Some(entry) = self.by_path.get_mut(path) else {
            return;
        };
        let Some(old) = entry.get(to).copied() else {
            return;
        };
        let left = old.minus(perms);
        if left.is_empty() {
            entry.remove(to);
            self.len -= 1;
            if entry.is_empty() {
                self.by_path.remove(path);
            }
        } else {
            entry.insert(to.clone(), left);
        }
    }

    /// Grants each of `grants` not seeded before, and remembers it as seeded.
    pub fn seed(&mut self, grants: &[Grant]) {
        for g in grants {
            let key = (g.path.clone(), g.to.clone());
            if self.seeded.contains(&key) {
                continue;
            }
            if self.grant(&g.path, &g.to, g.perms) {
                self.seeded.insert(key);
            }
        }
    }

    /// Whether `grant` (its path and grantee) was seeded already.
    pub fn is_seeded(&self, grant: &Grant) -> bool {
        self.seeded
            .contains(&(grant.path.clone(), grant.to.clone()))
    }

    /// What `caller` may do at the tree path `path`.
    pub fn effective(&self, caller: &Caller, path: &str) -> Perms {
        match caller.access {
            Access::Admin => return Perms::ALL,
            Access::Unmapped => return Perms::NONE,
            Access::Team(_) => {}
        }
        let mut perms = Perms::NONE;
        for at in ancestors(path) {
            if let Some(entry) = self.by_path.get(at) {
                for (to, p) in entry {
                    if to.matches(caller) {
                        perms = perms.union(*p);
                    }
                }
            }
            if perms == Perms::ALL {
                break;
            }
        }
        perms
    }

    /// Ok if `caller` has every permission of `need` at `path`.
    pub fn check(&self, caller: &Caller, path: &str, need: Perms) -> Result<(), Denied> {
        let missing = need.minus(self.effective(caller, path));
        if missing.is_empty() {
            return Ok(());
        }
        Err(Denied {
            path: path.to_string(),
            missing,
        })
    }

    /// The grants on `path`, and below it when `recursive`, sorted by path then grantee.
    pub fn list(&self, path: &str, recursive: bool) -> Vec<Grant> {
        let mut out = Vec::new();
        let range = self.by_path.range::<_, String>(path.to_string()..);
        for (at, entry) in range {
            // Paths starting with `path` sort together, right after it.
            if !at.starts_with(path) {
                break;
            }
            if at != path && !(recursive && is_below(path, at)) {
                continue;
            }
            for (to, perms) in entry {
                out.push(Grant {
                    path: at.clone(),
                    to: to.clone(),
                    perms: *perms,
                });
            }
        }
        out
    }

    /// Every grant whose grantee matches `caller`, sorted by path.
    pub fn applying_to(&self, caller: &Caller) -> Vec<Grant> {
        let mut out = Vec::new();
        for (at, entry) in &self.by_path {
            for (to, perms) in entry {
                if to.matches(caller) {
                    out.push(Grant {
                        path: at.clone(),
                        to: to.clone(),
                        perms: *perms,
                    });
                }
            }
        }
        out
    }

    /// Every grant, sorted by path then grantee (for snapshots and digests).
    pub fn all(&self) -> impl Iterator<Item = Grant> + '_ {
        self.by_path.iter().flat_map(|(at, entry)| {
            entry.iter().map(move |(to, perms)| Grant {
                path: at.clone(),
                to: to.clone(),
                perms: *perms,
            })
        })
    }

    /// Every seeded (path, grantee), sorted.
    pub fn seeded(&self) -> impl Iterator<Item = &(String, Grantee)> {
        self.seeded.iter()
    }

    /// Rebuilds a table from what `all` and `seeded` gave (a snapshot).
    pub fn from_parts(
        grants: impl IntoIterator<Item = Grant>,
        seeded: impl IntoIterator<Item = (String, Grantee)>,
    ) -> Grants {
        let mut table = Grants::new();
        for g in grants {
            table.grant(&g.path, &g.to, g.perms);
        }
        table.seeded = seeded.into_iter().collect();
        table
    }
}

/// `path` and each of its ancestors, the root first: "/", "/a", "/a/b".
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let root = std::iter::once("/");
    let below = path
        .char_indices()
        .skip(1)
        .filter(|&(_, c)| c == '/')
        .map(move |(i, _)| &path[..i])
        .chain((path != "/").then_some(path));
    root.chain(below)
}

/// Whether `inner` is strictly below `outer`.
pub fn is_below(outer: &str, inner: &str) -> bool {
    if outer == "/" {
        return inner != "/" && inner.starts_with('/');
    }
    inner.len() > outer.len()
        && inner.starts_with(outer)
        && inner.as_bytes().get(outer.len()) == Some(&b'/')
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::security::Team;

    fn team_caller(identity: &str, team: &str) -> Caller {
        Caller {
            identity: Arc::from(identity),
            access: Access::Team(Arc::new(Team {
                name: team.into(),
                root: format!("/teams/{team}"),
                identities: Vec::new(),
                quota: Default::default(),
            })),
        }
    }

    fn p(s: &str) -> Perms {
        Perms::parse(s).unwrap()
    }

    #[test]
    fn perms_parse_print_and_combine() {
        assert_eq!(p("rwcda"), Perms::ALL);
        assert_eq!(p("ar"), Perms::READ.union(Perms::ADMIN));
        assert_eq!(p("ar").to_string(), "ra");
        assert_eq!(p(""), Perms::NONE);
        assert!(Perms::parse("rx").is_err());
        assert!(p("rw").contains(Perms::READ));
        assert!(!p("rw").contains(p("rc")));
        assert_eq!(p("rwc").minus(p("w")), p("rc"));
        assert_eq!(p("rc").names(), "read+create");
        assert_eq!(Perms::from_bits(0xff), Perms::ALL);
    }

    #[test]
    fn ancestors_and_below() {
        assert_eq!(ancestors("/").collect::<Vec<_>>(), ["/"]);
        assert_eq!(
            ancestors("/a/b/c").collect::<Vec<_>>(),
            ["/", "/a", "/a/b", "/a/b/c"]
        );
        assert!(is_below("/a", "/a/b"));
        assert!(!is_below("/a", "/ab"));
        assert!(!is_below("/a", "/a"));
        assert!(is_below("/", "/a"));
        assert!(!is_below("/", "/"));
    }

    #[test]
    fn grants_are_inherited_additive_and_match_their_grantee() {
        let mut g = Grants::new();
        let alice = team_caller("alice", "pay");
        let bob = team_caller("bob", "pay");
        let eve = team_caller("eve", "search");
        g.grant("/teams/pay", &Grantee::Team("pay".into()), p("r"));
        g.grant("/teams/pay/a", &Grantee::Identity("al*".into()), p("wc"));
        assert_eq!(g.effective(&alice, "/teams/pay/a/b/c"), p("rwc"));
        assert_eq!(g.effective(&alice, "/teams/pay"), p("r"));
        assert_eq!(g.effective(&bob, "/teams/pay/a/b"), p("r"));
        assert_eq!(g.effective(&eve, "/teams/pay/a"), Perms::NONE);
        assert_eq!(g.effective(&alice, "/teams/payx"), Perms::NONE);
        let admin = Caller {
            identity: Arc::from("root"),
            access: Access::Admin,
        };
        let nobody = Caller {
            identity: Arc::from("alice"),
            access: Access::Unmapped,
        };
        assert_eq!(g.effective(&admin, "/anything"), Perms::ALL);
        assert_eq!(g.effective(&nobody, "/teams/pay/a"), Perms::NONE);
        let denied = g.check(&bob, "/teams/pay/a", p("rw")).unwrap_err();
        assert_eq!(denied.missing, p("w"));
        assert!(g.check(&alice, "/teams/pay/a", p("rw")).is_ok());
        // Revoking part of a grant leaves the rest; revoking all removes it.
        g.revoke("/teams/pay/a", &Grantee::Identity("al*".into()), p("w"));
        assert_eq!(g.effective(&alice, "/teams/pay/a"), p("rc"));
        g.revoke("/teams/pay/a", &Grantee::Identity("al*".into()), p("c"));
        assert_eq!(g.len(), 1);
        assert_eq!(g.list("/", true).len(), 1);
    }

    #[test]
    fn seeds_apply_once_even_after_a_revoke() {
        let mut g = Grants::new();
        let seed = Grant {
            path: "/teams/pay".into(),
            to: Grantee::Team("pay".into()),
            perms: Perms::ALL,
        };
        g.seed(std::slice::from_ref(&seed));
        assert!(g.is_seeded(&seed));
        g.revoke(&seed.path, &seed.to, Perms::ALL);
        g.seed(std::slice::from_ref(&seed));
        assert_eq!(g.len(), 0, "a revoked seed grant stays revoked");
        let rebuilt = Grants::from_parts(g.all(), g.seeded().cloned());
        assert_eq!(rebuilt, g);
    }

    #[test]
    fn list_finds_a_path_and_its_subtree_only() {
        let mut g = Grants::new();
        let t = Grantee::Team("t".into());
        for path in ["/a", "/a/b", "/a/b/c", "/ab", "/b"] {
            g.grant(path, &t, p("r"));
        }
        let paths = |v: Vec<Grant>| v.into_iter().map(|g| g.path).collect::<Vec<_>>();
        assert_eq!(paths(g.list("/a", true)), ["/a", "/a/b", "/a/b/c"]);
        assert_eq!(paths(g.list("/a", false)), ["/a"]);
        assert_eq!(paths(g.list("/", true)).len(), 5);
        assert!(g.list("/c", true).is_empty());
    }
}
