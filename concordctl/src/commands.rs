//! Runs one parsed `concordctl` command against the server and prints the result.
//!
//! Long-running commands (ephemeral create, session open, watch) end on ctrl-c; the
//! first two close their session on the way out so that nothing lingers for a TTL.

use std::fmt::Display;
use std::io::{ErrorKind, Read, Write};

use concord::{
    ChildrenOptions, Client, ConnectionState, CreateOptions, Error, ErrorCode, Grantee,
    ReadOptions, RetryPolicy, Session, WatchMessage, WatchOptions,
};

use crate::args::{
    AclCommand, Cli, Command, CreateArgs, GrantArgs, LsArgs, SessionCommand, SnapshotCommand,
    WatchArgs,
};
use crate::output;

/// The message of the error a print returns once stdout's reader has gone
/// (`concordctl watch /a | head -1`): the command stops, letting go of what it holds,
/// and concordctl exits 0 without a word, as a writer into `head` should.
pub const STDOUT_CLOSED: &str = "stdout closed";

/// Runs `cli.command`.
pub async fn run(cli: Cli) -> Result<(), Error> {
    let options = cli.connect_options();
    let client = Client::connect_lazy_with(&cli.endpoint, &options)?;
    match cli.command {
        Command::Create(args) => create(&client, args).await,
        Command::Get(args) => {
            let node = client.get(&args.path, ReadOptions::default()).await?;
            write_out(&node.data)?;
            write_out(b"\n")?;
            if args.stat {
                print_lines(output::stat_lines(&node.stat))?;
            }
            Ok(())
        }
        Command::Set(args) => {
            let data = read_data(&args.data)?;
            client.set(&args.path, data, args.version).await.map(|_| ())
        }
        Command::Delete(args) => client.delete(&args.path, args.version).await.map(|_| ()),
        Command::Ls(args) => ls(&client, args).await,
        Command::Stat(args) => match client
            .exists(&args.path, ReadOptions::default())
            .await?
            .stat
        {
            Some(stat) => print_lines(output::stat_lines(&stat)),
            None => Err(Error::client(
                ErrorCode::NoNode,
                format!("{} does not exist", args.path),
            )),
        },
        Command::Watch(args) => watch(&client, args).await,
        Command::Session(cmd) => session(&client, cmd).await,
        Command::Status => print_lines(output::status_lines(&client.status().await?)),
        Command::Lock(args) => super::locks::lock(&client, args).await,
        Command::Elect(args) => super::locks::elect(&client, args).await,
        Command::Whoami => print_lines(output::whoami_lines(&client.who_am_i().await?)),
        Command::Acl(cmd) => acl(&client, cmd).await,
        Command::Snapshot(SnapshotCommand::Save { file, linearizable }) => {
            let read = ReadOptions {
                linearizable,
                ..ReadOptions::default()
            };
            print_lines(output::backup_lines(
                &client.save_snapshot(&file, read).await?,
            ))
        }
        Command::Snapshot(SnapshotCommand::Status { file }) => {
            print_lines(output::backup_lines(&backup_status(&file)?))
        }
        Command::Members(args) => members(&client, &options, args.no_redirect).await,
    }
}

/// Checks a backup file; a damaged one is an error naming what is wrong.
fn backup_status(file: &std::path::Path) -> Result<concord::backup::BackupInfo, Error> {
    let f = std::fs::File::open(file).map_err(|e| {
        Error::client(
            ErrorCode::BadArguments,
            format!("cannot open {}: {e}", file.display()),
        )
    })?;
    concord::backup::inspect(std::io::BufReader::new(f)).map_err(|e| {
        let code = match e {
            concord::backup::BackupError::Io(_) => ErrorCode::BadArguments,
            _ => ErrorCode::BadState,
        };
        Error::client(code, format!("{}: {e}", file.display()))
    })
}

/// `members`: the answer of the leader when the server asked follows one.
async fn members(
    client: &Client,
    options: &concord::ConnectOptions,
    no_redirect: bool,
) -> Result<(), Error> {
    let mut answer = client.members().await?;
    let leader = answer
        .members
        .iter()
        .find(|m| m.id == answer.leader_id && m.id != answer.server_id)
        .map(|m| m.client_addr.clone());
    if let (Some(addr), false) = (leader, no_redirect) {
        let leader = Client::connect_lazy_with(&addr, options)?;
        match leader.members().await {
            Ok(from_leader) => answer = from_leader,
            Err(e) => eprintln!(
                "warning: the leader at {addr} did not answer ({e}); server {}'s view follows",
                answer.server_id
            ),
        }
    }
    print_lines(output::members_lines(&answer))
}

async fn acl(client: &Client, cmd: AclCommand) -> Result<(), Error> {
    let grantee = |args: &GrantArgs| match (&args.team, &args.identity) {
        (Some(team), _) => Grantee::Team(team.clone()),
        (None, Some(identity)) => Grantee::Identity(identity.clone()),
        // clap requires one of them.
        (None, None) => Grantee::Identity(String::new()),
    };
    match cmd {
        AclCommand::Grant(args) => client
            .grant(&args.path, &grantee(&args), &args.perms)
            .await
            .map(|_| ()),
        AclCommand::Revoke(args) => client
            .revoke(&args.path, &grantee(&args), &args.perms)
            .await
            .map(|_| ()),
        AclCommand::Ls { path, recursive } => {
            let grants = client.list_grants(&path, recursive).await?;
            print_lines(grants.iter().map(output::grant_line).collect())
        }
    }
}

async fn create(client: &Client, args: CreateArgs) -> Result<(), Error> {
    let data = match &args.data {
        Some(data) => read_data(data)?,
        None => Vec::new(),
    };
    let mut options = CreateOptions::mode(args.mode());
    options.ttl_ms = args.ttl.unwrap_or(0);
    if !args.ephemeral {
        let created = client.create(&args.path, data, options).await?;
        return print_line(&created.path);
    }
    let session = client.open_session(args.session_ttl).await?;
    options.session_id = session.id();
    let created = match client.create(&args.path, data, options).await {
        Ok(created) => created,
        Err(err) => {
            // Do not leave an unused session behind; the create error is what matters.
            let _ = session.close().await;
            return Err(err);
        }
    };
    print_then_hold(&created.path, session).await
}

/// Prints `line`, then holds `session` (closing it at once if stdout is gone).
async fn print_then_hold(line: &str, session: Session) -> Result<(), Error> {
    if let Err(err) = print_line(line) {
        let _ = session.close().await;
        return Err(err);
    }
    hold_session(session).await
}

/// Keeps `session` alive until ctrl-c (then closes it) or until it ends by itself.
async fn hold_session(session: Session) -> Result<(), Error> {
    let ended = tokio::select! {
        _ = tokio::signal::ctrl_c() => None,
        state = session.ended() => Some(state),
    };
    match ended {
        None => session.close().await,
        Some(ConnectionState::Closed) => Ok(()),
        Some(_) => Err(Error::client(
            ErrorCode::SessionExpired,
            format!("session {} expired", session.id()),
        )),
    }
}

async fn ls(client: &Client, args: LsArgs) -> Result<(), Error> {
    let options = ChildrenOptions {
        with_stats: args.with_stats,
        ..ChildrenOptions::default()
    };
    // Depth-first pre-order, children in name order. Each entry: the path, what to
    // print for it (None for the listed node itself) and its stat.
    let mut stack = vec![(args.path.clone(), None::<String>, None)];
    while let Some((path, shown, stat)) = stack.pop() {
        if let Some(shown) = &shown {
            match (&stat, args.with_stats) {
                (Some(stat), true) => print_line(output::long_child_line(shown, stat))?,
                _ => print_line(shown)?,
            }
            let has_children = stat.as_ref().is_none_or(|s| s.num_children > 0);
            if !args.recursive || !has_children {
                continue;
            }
        }
        let page = client.children(&path, &options).await?;
        for child in page.children.into_iter().rev() {
            let child_path = output::join(&path, &child.name);
            let shown = if args.recursive {
                child_path.clone()
            } else {
                child.name
            };
            stack.push((child_path, Some(shown), child.stat));
        }
    }
    Ok(())
}

async fn watch(client: &Client, args: WatchArgs) -> Result<(), Error> {
    let options = WatchOptions {
        path: args.path,
        recursive: args.recursive,
        with_data: args.data,
        start_zxid: args.from,
        resume: Some(RetryPolicy::default()),
        ..WatchOptions::default()
    };
    let mut watch = client.watch(options).await?;
    let mut seen = 0u64;
    if args.count == Some(0) {
        return Ok(());
    }
    loop {
        let msg = tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            msg = watch.next() => msg,
        };
        match msg {
            None => return Ok(()),
            Some(Err(err)) => return Err(err),
            Some(Ok(WatchMessage::Event(event))) => {
                print_line(output::event_line(&event, args.data))?;
                seen += 1;
                if args.count.is_some_and(|count| seen >= count) {
                    return Ok(());
                }
            }
            Some(Ok(_)) => {}
        }
    }
}

async fn session(client: &Client, cmd: SessionCommand) -> Result<(), Error> {
    match cmd {
        SessionCommand::Open { ttl } => {
            let session = client.open_session(ttl).await?;
            print_then_hold(&session.id().to_string(), session).await
        }
        SessionCommand::Ls => {
            for info in client.list_sessions().await? {
                print_line(output::session_line(&info))?;
            }
            Ok(())
        }
        SessionCommand::Get { id } => {
            print_lines(output::session_lines(&client.session_info(id).await?))
        }
        SessionCommand::Close { id } => client.close_session(id).await.map(|_| ()),
    }
}

/// The data argument: the text itself, or all of stdin for "-".
fn read_data(arg: &str) -> Result<Vec<u8>, Error> {
    if arg != "-" {
        return Ok(arg.as_bytes().to_vec());
    }
    let mut data = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut data)
        .map_err(|e| Error::client(ErrorCode::BadArguments, format!("reading stdin: {e}")))?;
    Ok(data)
}

/// Writes `bytes` to stdout; a closed stdout is the `STDOUT_CLOSED` error.
fn write_out(bytes: &[u8]) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| match e.kind() {
            ErrorKind::BrokenPipe => Error::client(ErrorCode::Internal, STDOUT_CLOSED),
            _ => Error::client(ErrorCode::Internal, format!("writing stdout: {e}")),
        })
}

/// Writes `line` and a newline to stdout, as `write_out`.
pub fn print_line(line: impl Display) -> Result<(), Error> {
    write_out(format!("{line}\n").as_bytes())
}

fn print_lines(lines: Vec<String>) -> Result<(), Error> {
    lines.iter().try_for_each(print_line)
}
