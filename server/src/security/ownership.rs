//! Who may use and who may see a session, from its owner (the identity that opened
//! it, recorded in the replicated session table) and the caller. Pure rules; the
//! services (`api/owner.rs`) apply them once the session is applied where they run.
//!
//! What it must not do: look at the tree or wait for anything.

use super::{Access, Caller, Policy};

/// Whether `caller` may use (keep alive, close, write with, act for the members of)
/// a session owned by `owner`: its owner or an admin. A session with no recorded
/// owner (`""`, opened before owners were recorded) is for admins only.
pub fn may_use(caller: &Caller, owner: &str) -> bool {
    caller.is_admin() || (!owner.is_empty() && owner == &*caller.identity)
}

/// Whether `caller` may see (`Session.List`, `Get`) a session owned by `owner`: an
/// admin sees every session, anyone its own, a team member those of its team's
/// identities (as `policy` maps them now).
pub fn may_see(policy: &Policy, caller: &Caller, owner: &str) -> bool {
    if may_use(caller, owner) {
        return true;
    }
    let Some(team) = caller.team() else {
        return false;
    };
    if owner.is_empty() {
        return false;
    }
    match policy.caller(owner.into()).access {
        Access::Team(theirs) => theirs.name == team.name,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, TeamConfig};

    fn policy() -> Policy {
        let team = |name: &str, ids: &[&str]| TeamConfig {
            name: name.into(),
            root: format!("/teams/{name}"),
            identities: ids.iter().map(|s| (*s).into()).collect(),
            quota: Default::default(),
        };
        let config = Config {
            admins: vec!["admin".into(), "ops-*".into()],
            teams: vec![team("pay", &["pay-*"]), team("search", &["search-*"])],
            ..Config::default()
        };
        Policy::from_config(&config).unwrap()
    }

    #[test]
    fn only_the_owner_or_an_admin_may_use_a_session() {
        let p = policy();
        let c = |id: &str| p.caller(id.into());
        assert!(may_use(&c("pay-a"), "pay-a"));
        assert!(!may_use(&c("pay-b"), "pay-a"), "a teammate is a stranger");
        assert!(!may_use(&c("search-a"), "pay-a"));
        assert!(!may_use(&c("nobody"), "pay-a"));
        assert!(may_use(&c("ops-1"), "pay-a"));
        // No recorded owner: admins only, whoever asks.
        assert!(!may_use(&c("pay-a"), ""));
        assert!(may_use(&c("admin"), ""));
    }

    #[test]
    fn a_team_sees_its_identities_sessions() {
        let p = policy();
        let c = |id: &str| p.caller(id.into());
        assert!(may_see(&p, &c("pay-b"), "pay-a"));
        assert!(!may_see(&p, &c("search-a"), "pay-a"));
        assert!(
            !may_see(&p, &c("pay-b"), "ops-1"),
            "an admin's session is not the team's"
        );
        assert!(!may_see(&p, &c("pay-b"), "nobody"));
        assert!(!may_see(&p, &c("pay-b"), ""));
        assert!(!may_see(&p, &c("nobody"), "pay-a"));
        assert!(may_see(&p, &c("nobody2"), "nobody2"), "anyone sees its own");
        assert!(may_see(&p, &c("admin"), "search-a"));
    }
}
