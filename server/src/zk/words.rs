//! ZooKeeper's four-letter words on the ZooKeeper-protocol port: the text answers of
//! ZooKeeper 3.9 (`server/command/*Command.java`), byte for byte where the facts are
//! the same, for the tools and probes that send them (zkServer.sh status, kazoo's
//! `server_version`, exporters that parse mntr, load balancer checks on ruok).
//!
//! ```text
//!   first 4 bytes of a connection ──answer(word, facts, allow)──▶ Answer::Text ─▶ write, close
//!                                                               └▶ Answer::NotAWord ─▶ a frame length
//! ```
//!
//! The caller gathers `ServerFacts` (numbers and strings only); this module only
//! formats them. It must not read clocks, sockets or the tree.
//!
//! Concord answers ruok, srvr, stat, mntr, conf, cons, wchs, envi and isro. ZooKeeper's
//! other words (crst, dirs, dump, gtmk, hash, srst, stmk, wchc, wchp, telnet close) are
//! recognised and answered as words the allow-list does not hold, which it never
//! does: `*` allows only the words Concord answers, as ZooKeeper's `*` allows only
//! the words it knows.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use super::watches::Watches;
use crate::txn::Zxid;

/// The ZooKeeper release whose client protocol and word formats Concord serves.
pub const ZOOKEEPER_VERSION: &str = "3.9.0";

/// What ZooKeeper answers while it cannot serve requests (no quorum, syncing).
pub const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

/// The words Concord answers; `*` in the allow-list means these.
const ANSWERED: [&str; 9] = [
    "ruok", "srvr", "stat", "mntr", "conf", "cons", "wchs", "envi", "isro",
];

/// ZooKeeper's other words (`FourLetterCommands`): recognised, never allowed here.
const RECOGNISED: [&str; 9] = [
    "crst", "dirs", "dump", "gtmk", "hash", "srst", "stmk", "wchc", "wchp",
];

/// ZooKeeper's name for the four bytes a telnet client sends when it closes.
const TELNET_CLOSE: ([u8; 4], &str) = ([0xff, 0xf4, 0xff, 0xfd], "telnet close");

/// What to do with a connection's first four bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A four-letter word: write this text, then close the connection.
    Text(String),
    /// Not a word ZooKeeper knows: the bytes are a frame's length, as ZooKeeper reads
    /// them (every ASCII word is far above jute.maxbuffer, so ZooKeeper closes the
    /// connection for it).
    NotAWord,
}

/// The words a server answers: ZooKeeper's `4lw.commands.whitelist`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowList {
    words: Vec<&'static str>,
}

impl Default for AllowList {
    /// srvr only, as ZooKeeper 3.5 and later (zkServer.sh status needs it).
    fn default() -> Self {
        Self {
            words: vec!["srvr"],
        }
    }
}

impl AllowList {
    /// ZooKeeper's setting: names separated by commas, spaces trimmed; `*` means
    /// every word Concord answers; srvr is always allowed. A name Concord does not
    /// answer allows nothing, as an unknown name does in ZooKeeper.
    pub fn parse(setting: &str) -> Self {
        let mut allow = Self::default();
        for name in setting.split(',').map(str::trim) {
            if name == "*" {
                allow.words = ANSWERED.to_vec();
                break;
            }
            if let Some(word) = ANSWERED.iter().find(|w| **w == name) {
                if !allow.words.contains(word) {
                    allow.words.push(word);
                }
            }
        }
        allow
    }

    /// Every word Concord answers.
    pub fn all() -> Self {
        Self::parse("*")
    }

    pub fn allows(&self, word: &str) -> bool {
        self.words.contains(&word)
    }
}

/// Concord's build, said as a ZooKeeper version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Build {
    /// Concord's version (`CARGO_PKG_VERSION`).
    pub concord_version: String,
    /// The source revision (a git hash), or any word when unknown.
    pub revision: String,
    /// When it was built, as ZooKeeper says it ("2024-02-12 20:59 UTC").
    pub built_on: String,
}

impl Build {
    /// `3.9.0-concord-<version>-<revision>, built on <date>`: ZooKeeper's
    /// `Version.getFullVersion()` form (`major.minor.micro-qualifier-revision, built
    /// on date`), with Concord as the qualifier. Tools parse the leading digits of
    /// this string (kazoo's `server_version` reads envi's `zookeeper.version` up to
    /// the first character that is not a digit or a dot and gates features on it;
    /// scripts and exporters match `\d+\.\d+\.\d+` in srvr or mntr), so it must
    /// start with the ZooKeeper release whose protocol Concord serves, not with
    /// Concord's own version, which they would take for an old ZooKeeper.
    pub fn full_version(&self) -> String {
        format!(
            "{ZOOKEEPER_VERSION}-concord-{}-{}, built on {}",
            self.concord_version, self.revision, self.built_on
        )
    }
}

/// A server's state as ZooKeeper names it (`ServerStats.getServerState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Leader,
    Follower,
    Observer,
    Standalone,
    ReadOnly,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leader => "leader",
            Self::Follower => "follower",
            Self::Observer => "observer",
            Self::Standalone => "standalone",
            Self::ReadOnly => "read-only",
        }
    }
}

/// Request latency over the server's client requests, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    pub min_ms: u64,
    pub avg_ms: f64,
    pub max_ms: u64,
}

/// Sizes in bytes as ZooKeeper's `BufferStats`: -1 until the first one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferSizes {
    pub last: i64,
    pub min: i64,
    pub max: i64,
}

/// What only a leader reports (`LeaderZooKeeperServer`'s gauges).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderFacts {
    /// Followers and observers connected.
    pub learners: u64,
    /// Voting followers synced and receiving proposals.
    pub synced_followers: u64,
    pub synced_non_voting_followers: u64,
    pub synced_observers: u64,
    /// sync requests waiting for a quorum.
    pub pending_syncs: u64,
    pub leader_uptime_ms: u64,
    pub proposal_sizes: BufferSizes,
}

/// One session's figures on a connection (`ServerCnxn.dumpConnectionInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionFacts {
    pub session_id: u64,
    /// The last request's short name (ZooKeeper's `lastOp`: "GETD", "PING", ...;
    /// "NA" before the first).
    pub last_op: String,
    /// When the connection was established, ms since the Unix epoch.
    pub established_ms: i64,
    pub timeout_ms: i32,
    /// The last request's xid; -1 before the first (then not printed).
    pub last_cxid: i64,
    /// The last reply's zxid; -1 before the first.
    pub last_zxid: i64,
    /// When the last reply went, ms since the Unix epoch; 0 before the first.
    pub last_response_ms: i64,
    pub last_latency_ms: i64,
    pub min_latency_ms: i64,
    pub avg_latency_ms: i64,
    pub max_latency_ms: i64,
}

/// One client connection, for stat and cons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionFacts {
    pub remote: SocketAddr,
    /// ZooKeeper's selector interest ops: 1 while reading, 0 while throttled.
    pub interest_ops: u32,
    /// Requests received and not yet answered.
    pub queued: u64,
    pub received: u64,
    pub sent: u64,
    /// None before the handshake made a session.
    pub session: Option<SessionFacts>,
}

/// The server's data watches, as wchs sums them (`WatchManager.toString`): ZooKeeper
/// counts its data table only (getData, exists, persistent, persistent recursive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchSummary {
    /// Connections with at least one data watch.
    pub connections: u64,
    /// Distinct paths with a data watch.
    pub paths: u64,
    /// (connection, path) pairs.
    pub total: u64,
}

impl WatchSummary {
    /// The summary of these connections' watches.
    pub fn of<'a>(connections: impl IntoIterator<Item = &'a Watches>) -> Self {
        let mut paths = std::collections::HashSet::new();
        let mut summary = Self::default();
        for watches in connections {
            let before = summary.total;
            for path in watches.data_table_paths() {
                summary.total += 1;
                paths.insert(path);
            }
            summary.connections += u64::from(summary.total > before);
        }
        summary.paths = paths.len() as u64;
        summary
    }
}

/// Everything the words report, gathered by the caller at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerFacts {
    pub build: Build,
    /// False while the server cannot serve client requests (ZooKeeper's
    /// `isRunning()`): then srvr, stat, mntr, conf, cons and wchs answer
    /// `NOT_SERVING` and isro answers "null".
    pub serving: bool,
    pub mode: Mode,
    /// A quorum member's state for mntr's zk_peer_state ("leading - broadcast",
    /// "following - broadcast"); None for a standalone server.
    pub peer_state: Option<String>,
    /// Voters in the ensemble, for zk_quorum_size; None for a standalone server.
    pub quorum_size: Option<u64>,
    /// The last zxid this server applied.
    pub zxid: Zxid,
    pub latency: Latency,
    pub packets_received: u64,
    pub packets_sent: u64,
    pub outstanding_requests: u64,
    pub uptime_ms: u64,
    pub znode_count: u64,
    /// ZooKeeper's count: data-table plus child-table watches over all connections
    /// (`Watches::zk_watch_count` summed).
    pub watch_count: u64,
    pub ephemerals_count: u64,
    /// Bytes of paths and data, as ZooKeeper's `approximateDataSize`.
    pub approximate_data_size: u64,
    pub global_sessions: u64,
    pub local_sessions: u64,
    /// -1 where the platform cannot say, as ZooKeeper's `OSMXBean`.
    pub open_file_descriptor_count: i64,
    pub max_file_descriptor_count: i64,
    /// Some on the leader only.
    pub leader: Option<LeaderFacts>,
    /// Client connections on this port; their number is Connections and
    /// zk_num_alive_connections.
    pub connections: Vec<ConnectionFacts>,
    pub watches: WatchSummary,
    /// conf's lines in order, as ZooKeeper's `dumpConf` (clientPort, secureClientPort,
    /// dataDir, dataDirSize, dataLogDir, dataLogSize, tickTime, maxClientCnxns,
    /// minSessionTimeout, maxSessionTimeout, clientPortListenBacklog, serverId, then a
    /// quorum member's).
    pub conf: Vec<(String, String)>,
    /// envi's lines after zookeeper.version, in order (host.name, os.name, ...).
    pub env: Vec<(String, String)>,
}

/// Whether four bytes are a word ZooKeeper knows (answered or not).
pub fn is_word(word: &[u8; 4]) -> bool {
    name_of(word).is_some()
}

/// The answer to a connection's first four bytes.
pub fn answer(word: &[u8; 4], facts: &ServerFacts, allowed: &AllowList) -> Answer {
    let Some(name) = name_of(word) else {
        return Answer::NotAWord;
    };
    if !allowed.allows(name) {
        return Answer::Text(not_allowed(name));
    }
    Answer::Text(match name {
        "ruok" => "imok".to_owned(),
        "envi" => envi(facts),
        "isro" if !facts.serving => "null".to_owned(),
        "isro" if facts.mode == Mode::ReadOnly => "ro".to_owned(),
        "isro" => "rw".to_owned(),
        _ if !facts.serving => format!("{NOT_SERVING}\n"),
        "srvr" => stat(facts, false),
        "stat" => stat(facts, true),
        "mntr" => mntr(facts),
        "conf" => lines(&facts.conf),
        "cons" => cons(facts),
        "wchs" => wchs(facts),
        // No allow-list holds another word.
        _ => not_allowed(name),
    })
}

/// ZooKeeper's answer to a word it knows and does not run (`NopCommand`).
fn not_allowed(name: &str) -> String {
    format!("{name} is not executed because it is not in the whitelist.\n")
}

fn name_of(word: &[u8; 4]) -> Option<&'static str> {
    if *word == TELNET_CLOSE.0 {
        return Some(TELNET_CLOSE.1);
    }
    ANSWERED
        .iter()
        .chain(RECOGNISED.iter())
        .copied()
        .find(|name| name.as_bytes() == word)
}

/// srvr, and stat with its client list (`StatCommand`).
fn stat(facts: &ServerFacts, with_clients: bool) -> String {
    let mut out = format!("Zookeeper version: {}\n", facts.build.full_version());
    if facts.mode == Mode::ReadOnly {
        out.push_str("READ-ONLY mode; serving only read-only clients\n");
    }
    if with_clients {
        out.push_str("Clients:\n");
        for connection in &facts.connections {
            connection_line(&mut out, connection, true);
            out.push('\n');
        }
        out.push('\n');
    }
    let l = &facts.latency;
    let _ = write!(
        out,
        "Latency min/avg/max: {}/{}/{}\nReceived: {}\nSent: {}\nConnections: {}\n\
         Outstanding: {}\nZxid: 0x{:x}\nMode: {}\nNode count: {}\n",
        l.min_ms,
        java_double(l.avg_ms),
        l.max_ms,
        facts.packets_received,
        facts.packets_sent,
        facts.connections.len(),
        facts.outstanding_requests,
        facts.zxid,
        facts.mode.as_str(),
        facts.znode_count,
    );
    if let Some(leader) = &facts.leader {
        let p = leader.proposal_sizes;
        let _ = writeln!(
            out,
            "Proposal sizes last/min/max: {}/{}/{}",
            p.last, p.min, p.max
        );
    }
    out
}

/// mntr (`MonitorCommand`): `zk_<key>\t<value>` lines.
fn mntr(facts: &ServerFacts) -> String {
    let mut out = String::new();
    let mut put = |key: &str, value: &dyn std::fmt::Display| {
        let _ = writeln!(out, "zk_{key}\t{value}");
    };
    put("version", &facts.build.full_version());
    put("server_state", &facts.mode.as_str());
    if let Some(peer_state) = &facts.peer_state {
        put("peer_state", peer_state);
    }
    let l = &facts.latency;
    put("avg_latency", &java_double(l.avg_ms));
    put("max_latency", &l.max_ms);
    put("min_latency", &l.min_ms);
    put("packets_received", &facts.packets_received);
    put("packets_sent", &facts.packets_sent);
    put("num_alive_connections", &facts.connections.len());
    put("outstanding_requests", &facts.outstanding_requests);
    put("uptime", &facts.uptime_ms);
    put("znode_count", &facts.znode_count);
    put("watch_count", &facts.watch_count);
    put("ephemerals_count", &facts.ephemerals_count);
    put("approximate_data_size", &facts.approximate_data_size);
    put("global_sessions", &facts.global_sessions);
    put("local_sessions", &facts.local_sessions);
    put(
        "open_file_descriptor_count",
        &facts.open_file_descriptor_count,
    );
    put(
        "max_file_descriptor_count",
        &facts.max_file_descriptor_count,
    );
    if let Some(quorum_size) = facts.quorum_size {
        put("quorum_size", &quorum_size);
    }
    if let Some(leader) = &facts.leader {
        put("learners", &leader.learners);
        put("synced_followers", &leader.synced_followers);
        put(
            "synced_non_voting_followers",
            &leader.synced_non_voting_followers,
        );
        put("synced_observers", &leader.synced_observers);
        put("pending_syncs", &leader.pending_syncs);
        put("leader_uptime", &leader.leader_uptime_ms);
        put("last_proposal_size", &leader.proposal_sizes.last);
        put("max_proposal_size", &leader.proposal_sizes.max);
        put("min_proposal_size", &leader.proposal_sizes.min);
    }
    out
}

/// cons (`ConsCommand`): every connection in full, then a blank line.
fn cons(facts: &ServerFacts) -> String {
    let mut out = String::new();
    for connection in &facts.connections {
        connection_line(&mut out, connection, false);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// wchs (`WatchCommand` over `WatchManager.toString`).
fn wchs(facts: &ServerFacts) -> String {
    let w = &facts.watches;
    format!(
        "{} connections watching {} paths\nTotal watches:{}\n",
        w.connections, w.paths, w.total
    )
}

/// envi (`EnvCommand`): "Environment:", then zookeeper.version and the rest.
fn envi(facts: &ServerFacts) -> String {
    let mut out = format!(
        "Environment:\nzookeeper.version={}\n",
        facts.build.full_version()
    );
    out.push_str(&lines(&facts.env));
    out
}

fn lines(pairs: &[(String, String)]) -> String {
    let mut out = String::new();
    for (key, value) in pairs {
        let _ = writeln!(out, "{key}={value}");
    }
    out
}

/// `ServerCnxn.dumpConnectionInfo`: brief for stat, full for cons.
fn connection_line(out: &mut String, c: &ConnectionFacts, brief: bool) {
    let _ = write!(
        out,
        " {}[{:x}](queued={},recved={},sent={}",
        java_socket_address(c.remote),
        c.interest_ops,
        c.queued,
        c.received,
        c.sent
    );
    if let (false, Some(s)) = (brief, &c.session) {
        let _ = write!(
            out,
            ",sid=0x{:x},lop={},est={},to={}",
            s.session_id, s.last_op, s.established_ms, s.timeout_ms
        );
        if s.last_cxid >= 0 {
            let _ = write!(out, ",lcxid=0x{:x}", s.last_cxid);
        }
        let _ = write!(
            out,
            ",lzxid=0x{:x},lresp={},llat={},minlat={},avglat={},maxlat={}",
            s.last_zxid,
            s.last_response_ms,
            s.last_latency_ms,
            s.min_latency_ms,
            s.avg_latency_ms,
            s.max_latency_ms
        );
    }
    out.push(')');
}

/// Java's `InetSocketAddress.toString()` for an address with no host name:
/// `/127.0.0.1:2181`, `/[0:0:0:0:0:0:0:1]:2181` (no zero compression in Java).
fn java_socket_address(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V4(ip) => format!("/{ip}:{}", addr.port()),
        IpAddr::V6(ip) => {
            let groups: Vec<String> = ip.segments().iter().map(|g| format!("{g:x}")).collect();
            format!("/[{}]:{}", groups.join(":"), addr.port())
        }
    }
}

/// Java's `Double.toString`: plain with at least one decimal between 10^-3 and
/// 10^7, else `d.dddE<exp>`.
fn java_double(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let magnitude = value.abs();
    if magnitude == 0.0 || (1e-3..1e7).contains(&magnitude) {
        let plain = format!("{value}");
        return if plain.contains('.') {
            plain
        } else {
            plain + ".0"
        };
    }
    let sci = format!("{value:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let dot = if mantissa.contains('.') { "" } else { ".0" };
    format!("{mantissa}{dot}E{exponent}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zk::watches::{Limits, WatchKind};

    fn build() -> Build {
        Build {
            concord_version: "0.1.0".to_owned(),
            revision: "abc123".to_owned(),
            built_on: "2026-12-07 19:00 UTC".to_owned(),
        }
    }

    fn session() -> SessionFacts {
        SessionFacts {
            session_id: 0x1000_0000_0abc,
            last_op: "GETD".to_owned(),
            established_ms: 1_700_000_000_000,
            timeout_ms: 30_000,
            last_cxid: 7,
            last_zxid: 0x1_0000_0010,
            last_response_ms: 1_700_000_000_500,
            last_latency_ms: 1,
            min_latency_ms: 0,
            avg_latency_ms: 1,
            max_latency_ms: 3,
        }
    }

    fn standalone() -> ServerFacts {
        ServerFacts {
            build: build(),
            serving: true,
            mode: Mode::Standalone,
            peer_state: None,
            quorum_size: None,
            zxid: 0x1_0000_002a,
            latency: Latency {
                min_ms: 0,
                avg_ms: 0.5,
                max_ms: 12,
            },
            packets_received: 40,
            packets_sent: 39,
            outstanding_requests: 0,
            uptime_ms: 60_000,
            znode_count: 5,
            watch_count: 3,
            ephemerals_count: 1,
            approximate_data_size: 44,
            global_sessions: 1,
            local_sessions: 0,
            open_file_descriptor_count: 42,
            max_file_descriptor_count: 1_048_576,
            leader: None,
            connections: vec![
                ConnectionFacts {
                    remote: "127.0.0.1:52668".parse().expect("addr"),
                    interest_ops: 1,
                    queued: 0,
                    received: 12,
                    sent: 11,
                    session: Some(session()),
                },
                ConnectionFacts {
                    remote: "[::1]:40000".parse().expect("addr"),
                    interest_ops: 0,
                    queued: 2,
                    received: 1,
                    sent: 0,
                    session: None,
                },
            ],
            watches: WatchSummary {
                connections: 1,
                paths: 2,
                total: 2,
            },
            conf: vec![
                ("clientPort".to_owned(), "2181".to_owned()),
                ("tickTime".to_owned(), "2000".to_owned()),
            ],
            env: vec![("os.name".to_owned(), "Linux".to_owned())],
        }
    }

    fn leader() -> ServerFacts {
        ServerFacts {
            mode: Mode::Leader,
            peer_state: Some("leading - broadcast".to_owned()),
            quorum_size: Some(3),
            leader: Some(LeaderFacts {
                learners: 2,
                synced_followers: 2,
                synced_non_voting_followers: 0,
                synced_observers: 0,
                pending_syncs: 0,
                leader_uptime_ms: 5_000,
                proposal_sizes: BufferSizes {
                    last: 90,
                    min: 36,
                    max: 120,
                },
            }),
            ..standalone()
        }
    }

    fn text(word: &[u8; 4], facts: &ServerFacts, allowed: &AllowList) -> String {
        match answer(word, facts, allowed) {
            Answer::Text(text) => text,
            Answer::NotAWord => panic!("{word:?} is a word"),
        }
    }

    #[test]
    fn the_default_allow_list_answers_srvr_only() {
        let facts = standalone();
        let allow = AllowList::default();
        assert!(text(b"srvr", &facts, &allow).starts_with("Zookeeper version: "));
        assert_eq!(
            text(b"ruok", &facts, &allow),
            "ruok is not executed because it is not in the whitelist.\n"
        );
        assert_eq!(
            text(b"mntr", &facts, &allow),
            "mntr is not executed because it is not in the whitelist.\n"
        );
    }

    #[test]
    fn the_allow_list_parses_as_zookeepers_setting_and_always_holds_srvr() {
        let allow = AllowList::parse(" ruok , mntr,,bogus");
        for word in ["ruok", "mntr", "srvr"] {
            assert!(allow.allows(word), "{word}");
        }
        for word in ["stat", "conf", "bogus", "dump"] {
            assert!(!allow.allows(word), "{word}");
        }
        let all = AllowList::parse("ruok, *");
        for word in ANSWERED {
            assert!(all.allows(word), "{word}");
        }
        assert_eq!(all, AllowList::all());
    }

    #[test]
    fn a_star_allows_no_word_concord_does_not_answer() {
        let facts = standalone();
        for word in RECOGNISED {
            let bytes: [u8; 4] = word.as_bytes().try_into().expect("four bytes");
            assert_eq!(
                text(&bytes, &facts, &AllowList::all()),
                format!("{word} is not executed because it is not in the whitelist.\n")
            );
        }
        assert_eq!(
            text(&[0xff, 0xf4, 0xff, 0xfd], &facts, &AllowList::all()),
            "telnet close is not executed because it is not in the whitelist.\n"
        );
    }

    #[test]
    fn bytes_zookeeper_does_not_know_are_not_a_word() {
        let facts = standalone();
        for word in [b"RUOK", b"abcd", b"\0\0\0\x2c", b"ruo "] {
            assert!(!is_word(word));
            assert_eq!(answer(word, &facts, &AllowList::all()), Answer::NotAWord);
        }
        assert!(is_word(b"ruok"));
        assert!(is_word(b"wchp"));
    }

    #[test]
    fn ruok_answers_imok_with_no_newline_even_when_not_serving() {
        let mut facts = standalone();
        facts.serving = false;
        assert_eq!(text(b"ruok", &facts, &AllowList::all()), "imok");
    }

    #[test]
    fn srvr_answers_zookeepers_lines() {
        assert_eq!(
            text(b"srvr", &standalone(), &AllowList::default()),
            "Zookeeper version: 3.9.0-concord-0.1.0-abc123, built on 2026-12-07 19:00 UTC\n\
             Latency min/avg/max: 0/0.5/12\n\
             Received: 40\n\
             Sent: 39\n\
             Connections: 2\n\
             Outstanding: 0\n\
             Zxid: 0x10000002a\n\
             Mode: standalone\n\
             Node count: 5\n"
        );
    }

    #[test]
    fn srvr_on_a_leader_adds_proposal_sizes() {
        let out = text(b"srvr", &leader(), &AllowList::default());
        assert!(out.contains("\nMode: leader\nNode count: 5\n"), "{out}");
        assert!(
            out.ends_with("Proposal sizes last/min/max: 90/36/120\n"),
            "{out}"
        );
    }

    #[test]
    fn stat_lists_clients_briefly_between_version_and_latency() {
        let out = text(b"stat", &standalone(), &AllowList::all());
        let expected_head =
            "Zookeeper version: 3.9.0-concord-0.1.0-abc123, built on 2026-12-07 19:00 UTC\n\
             Clients:\n \
             /127.0.0.1:52668[1](queued=0,recved=12,sent=11)\n \
             /[0:0:0:0:0:0:0:1]:40000[0](queued=2,recved=1,sent=0)\n\
             \n\
             Latency min/avg/max: 0/0.5/12\n";
        assert!(out.starts_with(expected_head), "{out}");
        assert!(out.ends_with("Mode: standalone\nNode count: 5\n"), "{out}");
    }

    #[test]
    fn cons_lists_each_connection_in_full_then_a_blank_line() {
        assert_eq!(
            text(b"cons", &standalone(), &AllowList::all()),
            " /127.0.0.1:52668[1](queued=0,recved=12,sent=11,sid=0x100000000abc,lop=GETD,\
             est=1700000000000,to=30000,lcxid=0x7,lzxid=0x100000010,lresp=1700000000500,\
             llat=1,minlat=0,avglat=1,maxlat=3)\n \
             /[0:0:0:0:0:0:0:1]:40000[0](queued=2,recved=1,sent=0)\n\
             \n"
        );
    }

    #[test]
    fn cons_leaves_out_lcxid_before_the_first_request_and_prints_lzxid_minus_one_as_java() {
        let mut facts = standalone();
        facts.connections.truncate(1);
        if let Some(s) = facts.connections[0].session.as_mut() {
            s.last_cxid = -1;
            s.last_zxid = -1;
            s.last_op = "NA".to_owned();
        }
        let out = text(b"cons", &facts, &AllowList::all());
        assert!(out.contains(",to=30000,lzxid=0xffffffffffffffff,"), "{out}");
        assert!(out.contains("lop=NA,"), "{out}");
    }

    #[test]
    fn mntr_answers_tab_separated_zk_keys_with_version_and_state_first() {
        let out = text(b"mntr", &standalone(), &AllowList::all());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[..2],
            [
                "zk_version\t3.9.0-concord-0.1.0-abc123, built on 2026-12-07 19:00 UTC",
                "zk_server_state\tstandalone",
            ]
        );
        for line in [
            "zk_avg_latency\t0.5",
            "zk_max_latency\t12",
            "zk_min_latency\t0",
            "zk_packets_received\t40",
            "zk_packets_sent\t39",
            "zk_num_alive_connections\t2",
            "zk_outstanding_requests\t0",
            "zk_znode_count\t5",
            "zk_watch_count\t3",
            "zk_ephemerals_count\t1",
            "zk_approximate_data_size\t44",
            "zk_open_file_descriptor_count\t42",
            "zk_max_file_descriptor_count\t1048576",
            "zk_uptime\t60000",
            "zk_global_sessions\t1",
        ] {
            assert!(lines.contains(&line), "{line} in {out}");
        }
        for line in &lines {
            let (key, value) = line.split_once('\t').expect("a tab");
            assert!(key.starts_with("zk_") && !value.contains('\t'), "{line}");
        }
        assert!(out.ends_with('\n'));
        assert!(!out.contains("zk_synced_followers"), "{out}");
        assert!(!out.contains("zk_peer_state"), "{out}");
    }

    #[test]
    fn mntr_on_a_leader_adds_the_leaders_keys_and_the_peer_state() {
        let out = text(b"mntr", &leader(), &AllowList::all());
        for line in [
            "zk_server_state\tleader",
            "zk_peer_state\tleading - broadcast",
            "zk_quorum_size\t3",
            "zk_learners\t2",
            "zk_synced_followers\t2",
            "zk_synced_non_voting_followers\t0",
            "zk_synced_observers\t0",
            "zk_pending_syncs\t0",
            "zk_leader_uptime\t5000",
            "zk_last_proposal_size\t90",
            "zk_max_proposal_size\t120",
            "zk_min_proposal_size\t36",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in {out}");
        }
    }

    #[test]
    fn a_server_not_serving_says_so_to_every_word_but_ruok_envi_and_isro() {
        let mut facts = standalone();
        facts.serving = false;
        for word in [b"srvr", b"stat", b"mntr", b"conf", b"cons", b"wchs"] {
            assert_eq!(
                text(word, &facts, &AllowList::all()),
                format!("{NOT_SERVING}\n"),
                "{word:?}"
            );
        }
        assert_eq!(text(b"isro", &facts, &AllowList::all()), "null");
        assert!(text(b"envi", &facts, &AllowList::all()).starts_with("Environment:\n"));
    }

    #[test]
    fn isro_answers_rw_or_ro_with_no_newline() {
        let mut facts = standalone();
        assert_eq!(text(b"isro", &facts, &AllowList::all()), "rw");
        facts.mode = Mode::ReadOnly;
        assert_eq!(text(b"isro", &facts, &AllowList::all()), "ro");
        let out = text(b"srvr", &facts, &AllowList::all());
        assert!(
            out.contains("\nREAD-ONLY mode; serving only read-only clients\nLatency"),
            "{out}"
        );
        assert!(out.contains("\nMode: read-only\n"), "{out}");
    }

    #[test]
    fn conf_answers_its_lines_as_key_equals_value() {
        assert_eq!(
            text(b"conf", &standalone(), &AllowList::all()),
            "clientPort=2181\ntickTime=2000\n"
        );
    }

    #[test]
    fn envi_starts_with_the_zookeeper_version_kazoo_parses() {
        let out = text(b"envi", &standalone(), &AllowList::all());
        assert_eq!(
            out,
            "Environment:\n\
             zookeeper.version=3.9.0-concord-0.1.0-abc123, built on 2026-12-07 19:00 UTC\n\
             os.name=Linux\n"
        );
        // kazoo's server_version: the digits and dots that start zookeeper.version.
        let version = out
            .lines()
            .find_map(|l| l.strip_prefix("zookeeper.version="))
            .expect("the line");
        let digits: String = version
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        assert_eq!(digits, "3.9.0");
    }

    #[test]
    fn wchs_sums_the_data_watches_as_zookeeper_does() {
        assert_eq!(
            text(b"wchs", &standalone(), &AllowList::all()),
            "1 connections watching 2 paths\nTotal watches:2\n"
        );
    }

    #[test]
    fn watch_summary_counts_data_table_paths_over_connections() {
        let limits = Limits {
            watches_max: 100,
            path_bytes_max: 1_000,
        };
        let mut one = Watches::new(limits);
        one.add(WatchKind::Data, "/a").expect("room");
        one.add(WatchKind::Child, "/c").expect("room");
        let mut two = Watches::new(limits);
        two.add(WatchKind::Data, "/a").expect("room");
        two.add(WatchKind::PersistentRecursive, "/r").expect("room");
        let mut children_only = Watches::new(limits);
        children_only.add(WatchKind::Child, "/a").expect("room");
        assert_eq!(
            WatchSummary::of([&one, &two, &children_only]),
            WatchSummary {
                connections: 2,
                paths: 2,
                total: 3,
            }
        );
    }

    #[test]
    fn doubles_print_as_java_prints_them() {
        assert_eq!(java_double(0.0), "0.0");
        assert_eq!(java_double(2.0), "2.0");
        assert_eq!(java_double(0.5), "0.5");
        assert_eq!(java_double(1.0 / 3.0), "0.3333333333333333");
        assert_eq!(java_double(0.001), "0.001");
        assert_eq!(java_double(0.0001), "1.0E-4");
        assert_eq!(java_double(1.5e-5), "1.5E-5");
        assert_eq!(java_double(1e7), "1.0E7");
        assert_eq!(java_double(12_345_678.0), "1.2345678E7");
        assert_eq!(java_double(9_999_999.5), "9999999.5");
        assert_eq!(java_double(f64::NAN), "NaN");
    }
}
