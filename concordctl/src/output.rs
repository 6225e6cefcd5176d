//! How `concordctl` prints things: pure formatting functions, no IO.

use concord::backup::BackupInfo;
use concord::{Event, Grant, Grantee, Members, ServerStatus, SessionInfo, Stat, WhoAmI};

/// One watch event: `zxid KIND path`, then the data (lossy UTF-8) when asked for.
pub fn event_line(event: &Event, with_data: bool) -> String {
    let kind = event.kind.as_str_name();
    let mut line = format!("{} {} {}", event.zxid, kind, event.path);
    if with_data {
        line.push(' ');
        line.push_str(&String::from_utf8_lossy(&event.data));
    }
    line
}

/// A stat as `name = value` lines, in ZooKeeper's order.
pub fn stat_lines(stat: &Stat) -> Vec<String> {
    vec![
        format!("czxid = {:#x}", stat.czxid),
        format!("mzxid = {:#x}", stat.mzxid),
        format!("pzxid = {:#x}", stat.pzxid),
        format!("ctime_ms = {}", stat.ctime_ms),
        format!("mtime_ms = {}", stat.mtime_ms),
        format!("version = {}", stat.version),
        format!("cversion = {}", stat.cversion),
        format!("aversion = {}", stat.aversion),
        format!("ephemeral_owner = {}", stat.ephemeral_owner),
        format!("data_length = {}", stat.data_length),
        format!("num_children = {}", stat.num_children),
    ]
}

/// One child in `ls -l`: the name, then the stat fields that matter most.
pub fn long_child_line(name: &str, stat: &Stat) -> String {
    format!(
        "{name}\tversion={} data_length={} num_children={} ephemeral_owner={} mzxid={:#x}",
        stat.version, stat.data_length, stat.num_children, stat.ephemeral_owner, stat.mzxid
    )
}

/// The path of `name` under `parent`.
pub fn join(parent: &str, name: &str) -> String {
    if parent.ends_with('/') {
        format!("{parent}{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// `session ls`: `id ttl_ms remaining_ms`.
pub fn session_line(info: &SessionInfo) -> String {
    format!("{} {} {}", info.session_id, info.ttl_ms, info.remaining_ms)
}

/// `session get`: one `name = value` line per field (`owner` when the server shows
/// it: to admins and to the owner), then one line per ephemeral.
pub fn session_lines(info: &SessionInfo) -> Vec<String> {
    let mut lines = vec![
        format!("session_id = {}", info.session_id),
        format!("ttl_ms = {}", info.ttl_ms),
        format!("remaining_ms = {}", info.remaining_ms),
    ];
    if !info.owner.is_empty() {
        lines.push(format!("owner = {}", info.owner));
    }
    lines.extend(
        info.ephemerals
            .iter()
            .map(|path| format!("ephemeral = {path}")),
    );
    lines
}

/// `status`: one `name = value` line per field.
pub fn status_lines(status: &ServerStatus) -> Vec<String> {
    let role = status.role.name().to_uppercase();
    vec![
        format!("server_id = {}", status.server_id),
        format!("role = {role}"),
        format!("leader_id = {}", status.leader_id),
        format!("leader_serving = {}", status.leader_serving),
        format!("zxid = {:#x}", status.zxid),
        format!("commit_zxid = {:#x}", status.commit_zxid),
        format!("epoch = {}", status.epoch),
        format!("node_count = {}", status.node_count),
        format!("session_count = {}", status.session_count),
        format!("watch_count = {}", status.watch_count),
        format!("ensemble_size = {}", status.ensemble_size),
        format!("version = {}", status.version),
        format!("zookeeper_addr = {}", status.zookeeper_addr),
        format!(
            "oldest_resumable_zxid = {:#x}",
            status.oldest_resumable_zxid
        ),
    ]
}

/// One grant: `PATH team|identity NAME PERMS`.
pub fn grant_line(g: &Grant) -> String {
    let (kind, name) = match &g.to {
        Grantee::Team(t) => ("team", t),
        Grantee::Identity(i) => ("identity", i),
    };
    format!("{} {kind} {name} {}", g.path, g.perms)
}

/// `whoami`: `name = value` lines, then one `grant ...` line per grant.
pub fn whoami_lines(me: &WhoAmI) -> Vec<String> {
    let mut lines = vec![
        format!("identity = {}", me.identity),
        format!("admin = {}", me.admin),
        format!("team = {}", me.team),
        format!("namespace_root = {}", me.namespace_root),
    ];
    lines.extend(me.grants.iter().map(|g| format!("grant {}", grant_line(g))));
    lines.extend(me.usage.iter().map(|u| {
        let limit = match u.limit {
            0 => "unlimited".to_owned(),
            n => n.to_string(),
        };
        format!("quota {} {} of {limit}", u.resource, u.used)
    }));
    lines
}

/// `snapshot save` and `snapshot status`: one `name = value` line per field.
pub fn backup_lines(info: &BackupInfo) -> Vec<String> {
    vec![
        format!("zxid = {:#x}", info.header.zxid),
        format!("nodes = {}", info.header.node_count),
        format!("sessions = {}", info.header.session_count),
        format!("snapshot_bytes = {}", info.snapshot_bytes),
        format!("server_id = {}", info.header.server_id),
        format!("checksum = ok (crc32 {:#010x})", info.crc32),
    ]
}

/// `members`: a header line, then one tab-separated line per member.
pub fn members_lines(m: &Members) -> Vec<String> {
    let mut lines = vec![format!(
        "# answered by server {}; leader {}",
        m.server_id,
        if m.leader_id == 0 {
            "unknown".to_string()
        } else {
            m.leader_id.to_string()
        }
    )];
    lines.push(
        "id\trole\tvoter\tzxid\tlag_txns\theard_ms_ago\tclient_addr\tpeer_addr\tzookeeper_addr"
            .into(),
    );
    for s in &m.members {
        let (zxid, lag) = if s.known {
            (format!("{:#x}", s.zxid), s.lag_txns.to_string())
        } else {
            ("-".into(), "-".into())
        };
        lines.push(format!(
            "{}\t{}\t{}\t{zxid}\t{lag}\t{}\t{}\t{}\t{}",
            s.id,
            s.role.name(),
            if s.voter { "voter" } else { "observer" },
            s.heard_ms_ago,
            s.client_addr,
            s.peer_addr,
            if s.zookeeper_addr.is_empty() {
                "-"
            } else {
                &s.zookeeper_addr
            }
        ));
    }
    let zookeeper: Vec<&str> = m
        .members
        .iter()
        .map(|s| s.zookeeper_addr.as_str())
        .collect();
    if !zookeeper.is_empty() && zookeeper.iter().all(|z| !z.is_empty()) {
        lines.push(format!(
            "# zookeeper connect string: {}",
            zookeeper.join(",")
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_line_has_zxid_kind_path_and_data() {
        let event = Event {
            zxid: 12,
            kind: concord::EventKind::DataChanged,
            path: "/a".into(),
            data: b"v2".to_vec(),
            ..Event::default()
        };
        assert_eq!(event_line(&event, false), "12 DATA_CHANGED /a");
        assert_eq!(event_line(&event, true), "12 DATA_CHANGED /a v2");
    }

    #[test]
    fn members_lines_show_unknown_progress_as_dashes() {
        let member = |id, role, known| concord::MemberStatus {
            id,
            client_addr: format!("127.0.0.1:{id}1"),
            peer_addr: format!("127.0.0.1:{id}2"),
            zookeeper_addr: format!("127.0.0.1:{id}3"),
            voter: id != 3,
            role,
            zxid: 0x10000000005,
            lag_txns: 2,
            known,
            heard_ms_ago: 40,
        };
        let m = Members {
            server_id: 2,
            leader_id: 1,
            members: vec![
                member(1, concord::Role::Leader, true),
                member(2, concord::Role::Follower, true),
                member(3, concord::Role::Unknown, false),
            ],
        };
        let lines = members_lines(&m);
        assert_eq!(lines[0], "# answered by server 2; leader 1");
        assert_eq!(
            lines[2],
            "1\tleader\tvoter\t0x10000000005\t2\t40\t127.0.0.1:11\t127.0.0.1:12\t127.0.0.1:13"
        );
        assert_eq!(
            lines[4],
            "3\tunknown\tobserver\t-\t-\t40\t127.0.0.1:31\t127.0.0.1:32\t127.0.0.1:33"
        );
        assert_eq!(
            lines[5],
            "# zookeeper connect string: 127.0.0.1:13,127.0.0.1:23,127.0.0.1:33"
        );
        // Without ZooKeeper addresses: a dash each, and no connect string.
        let mut m = m;
        for s in &mut m.members {
            s.zookeeper_addr.clear();
        }
        let lines = members_lines(&m);
        assert!(lines[2].ends_with("\t127.0.0.1:12\t-"), "{}", lines[2]);
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn session_lines_show_the_owner_when_the_server_does() {
        let mut info = SessionInfo {
            session_id: 5,
            ephemerals: vec!["/e".into()],
            ..SessionInfo::default()
        };
        assert!(!session_lines(&info).iter().any(|l| l.starts_with("owner")));
        info.owner = "pay-alice".into();
        let lines = session_lines(&info);
        assert_eq!(lines[3], "owner = pay-alice");
        assert_eq!(lines[4], "ephemeral = /e");
    }

    #[test]
    fn join_handles_the_root() {
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }

    #[test]
    fn stat_lines_name_every_field() {
        let stat = Stat {
            version: 3,
            num_children: 2,
            ..Stat::default()
        };
        let lines = stat_lines(&stat);
        assert_eq!(lines.len(), 11);
        assert!(lines.contains(&"version = 3".to_string()));
        assert!(lines.contains(&"num_children = 2".to_string()));
    }
}
