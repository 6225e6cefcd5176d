//! Tests of `concordctl`'s argument parsing (clap `try_parse_from`).

use super::*;

fn parse(args: &[&str]) -> Cli {
    let mut argv = vec!["concordctl"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn fails(args: &[&str]) -> bool {
    let mut argv = vec!["concordctl"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).is_err()
}

fn create_args(args: &[&str]) -> CreateArgs {
    match parse(args).command {
        Command::Create(create) => create,
        other => panic!("not a create: {other:?}"),
    }
}

#[test]
fn endpoint_defaults_and_can_be_given_anywhere() {
    // CONCORD_ENDPOINT may be set in the environment of the test run; the flag wins.
    let cli = parse(&["status", "--endpoint", "http://127.0.0.1:9999"]);
    assert_eq!(cli.endpoint, "http://127.0.0.1:9999");
    let cli = parse(&["--endpoint", "h:1", "get", "/a"]);
    assert_eq!(cli.endpoint, "h:1");
    if std::env::var_os("CONCORD_ENDPOINT").is_none() {
        assert_eq!(parse(&["status"]).endpoint, DEFAULT_ENDPOINT);
    }
}

#[test]
fn create_modes_follow_the_flags() {
    assert_eq!(
        create_args(&["create", "/a"]).mode(),
        CreateMode::Persistent
    );
    assert_eq!(
        create_args(&["create", "/a", "x", "-e"]).mode(),
        CreateMode::Ephemeral
    );
    assert_eq!(
        create_args(&["create", "-e", "-s", "/a"]).mode(),
        CreateMode::EphemeralSequential
    );
    assert_eq!(
        create_args(&["create", "-s", "/a"]).mode(),
        CreateMode::PersistentSequential
    );
    assert_eq!(
        create_args(&["create", "--container", "/a"]).mode(),
        CreateMode::Container
    );
    let ttl = create_args(&["create", "/a", "--ttl", "500"]);
    assert_eq!(ttl.mode(), CreateMode::PersistentWithTtl);
    assert_eq!(ttl.ttl, Some(500));
    assert_eq!(
        create_args(&["create", "-s", "/a", "--ttl", "500"]).mode(),
        CreateMode::PersistentSequentialWithTtl
    );
}

#[test]
fn create_data_and_stdin_marker() {
    let args = create_args(&["create", "/a", "hello"]);
    assert_eq!(args.data.as_deref(), Some("hello"));
    let args = create_args(&["create", "/a", "-"]);
    assert_eq!(args.data.as_deref(), Some("-"));
    assert_eq!(create_args(&["create", "/a"]).data, None);
}

#[test]
fn conflicting_create_flags_are_rejected() {
    assert!(fails(&["create", "/a", "--container", "-e"]));
    assert!(fails(&["create", "/a", "--container", "--ttl", "5"]));
    assert!(fails(&["create", "/a", "-e", "--ttl", "5"]));
    assert!(fails(&["create"]));
}

#[test]
fn versions_default_to_any_and_accept_negatives() {
    match parse(&["set", "/a", "v"]).command {
        Command::Set(set) => assert_eq!((set.data.as_str(), set.version), ("v", -1)),
        other => panic!("{other:?}"),
    }
    match parse(&["set", "/a", "v", "-v", "3"]).command {
        Command::Set(set) => assert_eq!(set.version, 3),
        other => panic!("{other:?}"),
    }
    match parse(&["delete", "/a", "-v", "-1"]).command {
        Command::Delete(delete) => assert_eq!(delete.version, -1),
        other => panic!("{other:?}"),
    }
    match parse(&["delete", "/a", "--version", "7"]).command {
        Command::Delete(delete) => assert_eq!(delete.version, 7),
        other => panic!("{other:?}"),
    }
    assert!(fails(&["set", "/a"]));
}

#[test]
fn get_ls_and_stat() {
    match parse(&["get", "/a", "--stat"]).command {
        Command::Get(get) => assert!(get.stat),
        other => panic!("{other:?}"),
    }
    match parse(&["ls", "/", "-R", "-l"]).command {
        Command::Ls(ls) => assert!(ls.recursive && ls.with_stats),
        other => panic!("{other:?}"),
    }
    match parse(&["ls", "/"]).command {
        Command::Ls(ls) => assert!(!ls.recursive && !ls.with_stats),
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse(&["stat", "/a"]).command, Command::Stat(_)));
}

#[test]
fn watch_flags() {
    match parse(&[
        "watch", "/a", "-r", "--data", "--from", "0x10", "--count", "3",
    ])
    .command
    {
        Command::Watch(w) => {
            assert!(w.recursive && w.data);
            assert_eq!((w.from, w.count), (Some(16), Some(3)));
        }
        other => panic!("{other:?}"),
    }
    match parse(&["watch", "/a"]).command {
        Command::Watch(w) => assert_eq!((w.from, w.count, w.recursive), (None, None, false)),
        other => panic!("{other:?}"),
    }
    assert!(fails(&["watch", "/a", "--from", "zz"]));
}

#[test]
fn session_subcommands() {
    assert!(matches!(
        parse(&["session", "open", "--ttl", "3000"]).command,
        Command::Session(SessionCommand::Open { ttl: 3000 })
    ));
    assert!(matches!(
        parse(&["session", "open"]).command,
        Command::Session(SessionCommand::Open { ttl: 0 })
    ));
    assert!(matches!(
        parse(&["session", "ls"]).command,
        Command::Session(SessionCommand::Ls)
    ));
    assert!(matches!(
        parse(&["session", "get", "42"]).command,
        Command::Session(SessionCommand::Get { id: 42 })
    ));
    assert!(matches!(
        parse(&["session", "close", "0xff"]).command,
        Command::Session(SessionCommand::Close { id: 255 })
    ));
    assert!(fails(&["session", "close"]));
    assert!(fails(&["session"]));
}

#[test]
fn parse_u64_accepts_decimal_and_hex() {
    assert_eq!(parse_u64("12"), Ok(12));
    assert_eq!(parse_u64("0x1f"), Ok(31));
    assert!(parse_u64("-1").is_err());
    assert!(parse_u64("").is_err());
}

#[test]
fn tls_flags_as_etcdctl_names_them() {
    let plain = parse(&["status"]);
    assert_eq!(plain.connect_options().tls, None);
    let tls = parse(&[
        "--cacert",
        "ca.pem",
        "--cert",
        "a.pem",
        "--key",
        "a-key.pem",
        "status",
    ]);
    let t = tls.connect_options().tls.unwrap();
    assert_eq!(t.ca_file, std::path::PathBuf::from("ca.pem"));
    assert_eq!(t.cert_file.as_deref(), Some(std::path::Path::new("a.pem")));
    assert_eq!(
        t.key_file.as_deref(),
        Some(std::path::Path::new("a-key.pem"))
    );
    let ca_only = parse(&["get", "/a", "--cacert", "ca.pem"]);
    assert!(ca_only.connect_options().tls.unwrap().cert_file.is_none());
    assert!(
        fails(&["--cert", "a.pem", "status"]),
        "a certificate without its key"
    );
    assert!(fails(&["--cacert", "ca.pem", "--key", "k.pem", "status"]));
}

#[test]
fn whoami_and_acl_subcommands() {
    assert!(matches!(parse(&["whoami"]).command, Command::Whoami));
    match parse(&["acl", "grant", "/a", "rw", "--team", "pay"]).command {
        Command::Acl(AclCommand::Grant(g)) => {
            assert_eq!((g.path.as_str(), g.perms.as_str()), ("/a", "rw"));
            assert_eq!((g.team.as_deref(), g.identity), (Some("pay"), None));
        }
        other => panic!("{other:?}"),
    }
    match parse(&["acl", "revoke", "/a", "w", "--identity", "pay-*"]).command {
        Command::Acl(AclCommand::Revoke(g)) => assert_eq!(g.identity.as_deref(), Some("pay-*")),
        other => panic!("{other:?}"),
    }
    match parse(&["acl", "ls", "/", "-R"]).command {
        Command::Acl(AclCommand::Ls { path, recursive }) => assert!(path == "/" && recursive),
        other => panic!("{other:?}"),
    }
    // Exactly one grantee.
    assert!(fails(&["acl", "grant", "/a", "r"]));
    assert!(fails(&[
        "acl",
        "grant",
        "/a",
        "r",
        "--team",
        "t",
        "--identity",
        "i"
    ]));
}

#[test]
fn snapshot_and_members_parse() {
    match parse(&["snapshot", "save", "/tmp/b"]).command {
        Command::Snapshot(SnapshotCommand::Save { file, linearizable }) => {
            assert_eq!(file, PathBuf::from("/tmp/b"));
            assert!(!linearizable);
        }
        other => panic!("not a snapshot save: {other:?}"),
    }
    match parse(&["snapshot", "status", "b"]).command {
        Command::Snapshot(SnapshotCommand::Status { file }) => assert_eq!(file, PathBuf::from("b")),
        other => panic!("not a snapshot status: {other:?}"),
    }
    assert!(fails(&["snapshot", "save"]), "a file is needed");
    match parse(&["snapshot", "save", "--linearizable", "f"]).command {
        Command::Snapshot(SnapshotCommand::Save { linearizable, .. }) => assert!(linearizable),
        other => panic!("not a snapshot save: {other:?}"),
    }
    assert!(fails(&["snapshot"]));
    match parse(&["members"]).command {
        Command::Members(m) => assert!(!m.no_redirect),
        other => panic!("not members: {other:?}"),
    }
    match parse(&["members", "--no-redirect"]).command {
        Command::Members(m) => assert!(m.no_redirect),
        other => panic!("not members: {other:?}"),
    }
}
