//! Runs one parsed `concordctl` command against the server and prints the result.
//!
//! Long-running commands (ephemeral create, session open, watch) end on ctrl-c; the
//! first two close their session on the way out so that nothing lingers for a TTL.

use std::io::{Read, Write};

use concord::proto::watch_response::Msg;
use concord::{
    ChildrenOptions, Client, CreateOptions, Error, ErrorCode, ReadOptions, RetryPolicy, Session,
    SessionState, WatchOptions,
};

use crate::args::{Cli, Command, CreateArgs, LsArgs, SessionCommand, WatchArgs};
use crate::output;

/// Runs `cli.command`.
pub async fn run(cli: Cli) -> Result<(), Error> {
    let client = Client::connect_lazy(cli.endpoint)?;
    match cli.command {
        Command::Create(args) => create(&client, args).await,
        Command::Get(args) => {
            let node = client.get(&args.path, ReadOptions::default()).await?;
            let mut out = std::io::stdout().lock();
            write_out(&mut out, &node.data)?;
            write_out(&mut out, b"\n")?;
            if args.stat {
                print_lines(output::stat_lines(&node.stat));
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
            Some(stat) => {
                print_lines(output::stat_lines(&stat));
                Ok(())
            }
            None => Err(Error::client(
                ErrorCode::NoNode,
                format!("{} does not exist", args.path),
            )),
        },
        Command::Watch(args) => watch(&client, args).await,
        Command::Session(cmd) => session(&client, cmd).await,
        Command::Status => {
            print_lines(output::status_lines(&client.status().await?));
            Ok(())
        }
        Command::Lock(args) => super::locks::lock(&client, args).await,
        Command::Elect(args) => super::locks::elect(&client, args).await,
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
        println!("{}", created.path);
        return Ok(());
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
    println!("{}", created.path);
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
        Some(SessionState::Closed) => Ok(()),
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
                (Some(stat), true) => println!("{}", output::long_child_line(shown, stat)),
                _ => println!("{shown}"),
            }
            let has_children = stat.as_ref().is_none_or(|s| s.num_children > 0);
            if !args.recursive || !has_children {
                continue;
            }
        }
        let page = client.children_all(&path, &options).await?;
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
            Some(Ok(Msg::Event(event))) => {
                println!("{}", output::event_line(&event, args.data));
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
            println!("{}", session.id());
            hold_session(session).await
        }
        SessionCommand::Ls => {
            for info in client.list_sessions().await? {
                println!("{}", output::session_line(&info));
            }
            Ok(())
        }
        SessionCommand::Get { id } => {
            print_lines(output::session_lines(&client.session_info(id).await?));
            Ok(())
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

fn write_out(out: &mut impl Write, bytes: &[u8]) -> Result<(), Error> {
    out.write_all(bytes)
        .map_err(|e| Error::client(ErrorCode::Internal, format!("writing stdout: {e}")))
}

fn print_lines(lines: Vec<String>) {
    for line in lines {
        println!("{line}");
    }
}
