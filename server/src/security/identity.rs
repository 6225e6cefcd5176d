//! Identities and what they map to: `Pattern`s name identities, `Policy` maps an
//! identity to its `Access` (admin, a team, or nothing), and `Caller` is the answer
//! for one request.
//!
//! What it must not do: look at certificates (the TLS layer hands over the identity
//! it derived), or at the tree (permissions on subtrees are checked elsewhere).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::{Config, ConfigError, QuotaConfig, TeamConfig};
use crate::tree::path;

/// What the connection layer knows of a client connection; tonic puts it in the
/// extensions of every request on that connection.
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// The client's address, when the socket has one.
    pub remote_addr: Option<SocketAddr>,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The identity derived from the client's certificate (by the configured rule),
    /// when it presented one.
    pub cert_identity: Option<Arc<str>>,
}

/// An identity name, or a pattern in which each `*` stands for any run of
/// characters (`spiffe://example.org/payments/*`, `payments-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    /// A pattern; refuses an empty one.
    pub fn new(text: &str) -> Result<Pattern, ConfigError> {
        if text.is_empty() {
            return Err(ConfigError::Invalid("an identity pattern is empty".into()));
        }
        Ok(Pattern(text.to_owned()))
    }

    /// Whether `identity` matches: equal, or equal with each `*` taking any run.
    pub fn matches(&self, identity: &str) -> bool {
        glob_matches(&self.0, identity)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `identity` matches the pattern text `pattern` (see `Pattern`).
pub fn glob_matches(pattern: &str, identity: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = identity.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty(); // no '*': an exact name
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A team: its name and the namespace root its clients see as `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team {
    pub name: String,
    /// An absolute tree path; `/` for a team that sees the whole tree.
    pub root: String,
    /// Who belongs.
    pub identities: Vec<Pattern>,
    /// The team's hard limits (0: unlimited); see `security::quota`.
    pub quota: QuotaConfig,
}

/// What an identity may reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// The whole tree, and every operation.
    Admin,
    /// A team member: rooted in the team's namespace.
    Team(Arc<Team>),
    /// An identity no rule names: it may ask who it is, and nothing else.
    Unmapped,
}

/// Who sent a request, and what that identity maps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub identity: Arc<str>,
    pub access: Access,
}

impl Caller {
    pub fn is_admin(&self) -> bool {
        self.access == Access::Admin
    }

    /// The caller's team, if it belongs to one.
    pub fn team(&self) -> Option<&Team> {
        match &self.access {
            Access::Team(team) => Some(team),
            _ => None,
        }
    }
}

/// The identity rules in force: admins, teams, and the local identity.
#[derive(Clone, Debug)]
pub struct Policy {
    local_identity: Arc<str>,
    admins: Vec<Pattern>,
    /// In config order: an identity belongs to the first team that names it.
    teams: Vec<Arc<Team>>,
}

impl Policy {
    /// The rules of `config`: patterns non-empty, team names unique and non-empty,
    /// roots valid paths outside the reserved `/concord` folder, no root inside
    /// another team's (namespaces never overlap).
    pub fn from_config(config: &Config) -> Result<Policy, ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if config.local_identity.is_empty() {
            return invalid("local_identity is empty".into());
        }
        let admins = patterns(&config.admins)?;
        let mut teams: Vec<Arc<Team>> = Vec::with_capacity(config.teams.len());
        for t in &config.teams {
            let team = team(t)?;
            for other in &teams {
                if other.name == team.name {
                    return invalid(format!("team {:?} is listed twice", team.name));
                }
                if nested(&other.root, &team.root) || nested(&team.root, &other.root) {
                    return invalid(format!(
                        "the roots of teams {:?} ({}) and {:?} ({}) overlap",
                        other.name, other.root, team.name, team.root
                    ));
                }
            }
            teams.push(Arc::new(team));
        }
        Ok(Policy {
            local_identity: Arc::from(config.local_identity.as_str()),
            admins,
            teams,
        })
    }

    /// The identity of a caller without a certificate.
    pub fn local_identity(&self) -> Arc<str> {
        self.local_identity.clone()
    }

    /// The teams, in config order.
    pub fn teams(&self) -> &[Arc<Team>] {
        &self.teams
    }

    /// The team named `name`.
    pub fn team(&self, name: &str) -> Option<&Arc<Team>> {
        self.teams.iter().find(|t| t.name == name)
    }

    /// What `identity` maps to: admin first, then the first team naming it.
    pub fn caller(&self, identity: Arc<str>) -> Caller {
        let access = if self.admins.iter().any(|p| p.matches(&identity)) {
            Access::Admin
        } else if let Some(team) = self
            .teams
            .iter()
            .find(|t| t.identities.iter().any(|p| p.matches(&identity)))
        {
            Access::Team(team.clone())
        } else {
            Access::Unmapped
        };
        Caller { identity, access }
    }
}

fn patterns(texts: &[String]) -> Result<Vec<Pattern>, ConfigError> {
    texts.iter().map(|t| Pattern::new(t)).collect()
}

fn team(t: &TeamConfig) -> Result<Team, ConfigError> {
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    if t.name.is_empty() {
        return invalid("a team has no name".into());
    }
    // Lock and election names of a team are prefixed with "NAME:" (namespace.rs).
    let name_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if !t.name.chars().all(name_ok) {
        return invalid(format!(
            "team name {:?}: use letters, digits, '-', '_' and '.' only",
            t.name
        ));
    }
    if let Err(e) = path::validate(&t.root) {
        return invalid(format!("team {:?}: root: {e}", t.name));
    }
    let reserved = crate::tree::queue::RESERVED_PREFIX;
    if nested(reserved, &t.root) {
        return invalid(format!(
            "team {:?}: root {} is inside the reserved {reserved}",
            t.name, t.root
        ));
    }
    if t.quota.requests_burst > 0 && t.quota.requests_per_second == 0 {
        return invalid(format!(
            "team {:?}: quota.requests_burst needs quota.requests_per_second",
            t.name
        ));
    }
    Ok(Team {
        name: t.name.clone(),
        root: t.root.clone(),
        identities: patterns(&t.identities)?,
        quota: t.quota,
    })
}

/// Whether `inner` is `outer` or below it.
fn nested(outer: &str, inner: &str) -> bool {
    outer == "/"
        || inner == outer
        || (inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_names_and_runs() {
        let p = |s: &str| Pattern::new(s).unwrap();
        assert!(p("alice").matches("alice"));
        assert!(!p("alice").matches("alice2"));
        assert!(!p("alice").matches("xalice"));
        assert!(p("team-*").matches("team-a"));
        assert!(p("team-*").matches("team-"));
        assert!(!p("team-*").matches("team"));
        assert!(p("spiffe://x/*/app").matches("spiffe://x/payments/app"));
        assert!(!p("spiffe://x/*/app").matches("spiffe://x/payments/app2"));
        assert!(p("*").matches("anyone"));
        assert!(p("a*b*c").matches("abc"));
        assert!(p("a*b*c").matches("a-b-b-c"));
        assert!(!p("a*b*c").matches("a-c-b"));
        assert!(!p("ab*ba").matches("aba"));
        assert!(Pattern::new("").is_err());
    }

    fn config(teams: &[(&str, &str, &[&str])]) -> Config {
        Config {
            teams: teams
                .iter()
                .map(|(name, root, ids)| TeamConfig {
                    name: (*name).into(),
                    root: (*root).into(),
                    identities: ids.iter().map(|s| (*s).into()).collect(),
                    quota: QuotaConfig::default(),
                })
                .collect(),
            ..Config::default()
        }
    }

    #[test]
    fn identities_map_to_admin_then_the_first_team() {
        let mut c = config(&[
            ("payments", "/teams/payments", &["pay-*", "shared"]),
            ("search", "/teams/search", &["search-*", "shared"]),
        ]);
        c.admins = vec!["ops-*".into()];
        let policy = Policy::from_config(&c).unwrap();
        let access = |id: &str| policy.caller(Arc::from(id)).access;
        assert_eq!(access("ops-1"), Access::Admin);
        assert_eq!(
            access("pay-1"),
            Access::Team(policy.team("payments").unwrap().clone())
        );
        assert_eq!(
            access("shared"),
            Access::Team(policy.team("payments").unwrap().clone())
        );
        assert_eq!(
            access("search-9"),
            Access::Team(policy.team("search").unwrap().clone())
        );
        assert_eq!(access("stranger"), Access::Unmapped);
        // By default the local identity is an admin.
        let default = Policy::from_config(&Config::default()).unwrap();
        assert!(default.caller(default.local_identity()).is_admin());
    }

    #[test]
    fn bad_teams_are_refused() {
        let bad = |teams: &[(&str, &str, &[&str])]| Policy::from_config(&config(teams)).is_err();
        assert!(bad(&[("", "/a", &["x"])]));
        assert!(bad(&[("a:b", "/a", &["x"])]));
        assert!(bad(&[("a/b", "/a", &["x"])]));
        assert!(bad(&[("a", "relative", &["x"])]));
        assert!(bad(&[("a", "/concord/x", &["x"])]));
        assert!(bad(&[("a", "/concord", &["x"])]));
        assert!(bad(&[("a", "/t/a", &[""])]));
        assert!(bad(&[("a", "/t/a", &["x"]), ("a", "/t/b", &["y"])]));
        assert!(bad(&[("a", "/t", &["x"]), ("b", "/t/b", &["y"])]));
        assert!(bad(&[("a", "/t/b", &["x"]), ("b", "/t/b", &["y"])]));
        assert!(!bad(&[("a", "/t/a", &["x"]), ("b", "/t/ab", &["y"])]));
        assert!(!bad(&[("a", "/", &["x"])]));
    }
}
