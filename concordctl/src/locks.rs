//! `concordctl lock` and `concordctl elect`: hold a lock around a command, campaign
//! and follow an election. Both own a session for as long as they run.

use concord::{Client, ConnectionState, Error, ErrorCode, LockOptions, Session};
use tokio_stream::StreamExt;

use crate::args::{ElectArgs, LockArgs};
use crate::commands::print_line;

/// Environment variable carrying the fencing token to the command.
pub const TOKEN_ENV: &str = "CONCORD_LOCK_TOKEN";
/// Environment variable carrying the holder key to the command.
pub const KEY_ENV: &str = "CONCORD_LOCK_KEY";

/// Runs the command while holding the lock; exits with the command's status.
pub async fn lock(client: &Client, args: LockArgs) -> Result<(), Error> {
    let session = client.open_session(args.session_ttl).await?;
    let options = LockOptions {
        timeout_ms: args.timeout,
        owner_id: format!("concordctl-{}", std::process::id()),
        permits: args.permits,
    };
    let hold = match client.acquire(&args.name, session.id(), &options).await {
        Ok(hold) => hold,
        Err(err) => {
            let _ = session.close().await;
            return Err(err);
        }
    };
    let status = run_holding(&session, &args.command, &hold.key, hold.token).await;
    let _ = client.release(&hold.key, hold.token).await;
    let _ = session.close().await;
    let code = status?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// Runs `command` with the lock's env; kills it if the session ends first.
async fn run_holding(
    session: &Session,
    command: &[String],
    key: &str,
    token: u64,
) -> Result<i32, Error> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| Error::client(ErrorCode::BadArguments, "no command given"))?;
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .env(TOKEN_ENV, token.to_string())
        .env(KEY_ENV, key)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::client(ErrorCode::BadArguments, format!("{program}: {e}")))?;
    tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| Error::client(ErrorCode::Internal, e.to_string()))?;
            Ok(status.code().unwrap_or(1))
        }
        state = session.ended() => {
            let _ = child.kill().await;
            Err(Error::client(
                ErrorCode::SessionExpired,
                format!("session {} {state:?}: lock lost, command killed", session.id()),
            ))
        }
    }
}

/// Campaigns and prints leadership changes until ctrl-c (then resigns).
pub async fn elect(client: &Client, args: ElectArgs) -> Result<(), Error> {
    let session = client.open_session(args.session_ttl).await?;
    let id = args
        .id
        .unwrap_or_else(|| format!("concordctl-{}", std::process::id()));
    let mut changes = client.observe(&args.name).await?;
    let campaign = client.campaign(&args.name, session.id(), &id, args.value, 0);
    tokio::pin!(campaign);
    let mut leading = None;
    let mut printed = Ok(());
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            state = session.ended() => {
                return Err(Error::client(
                    ErrorCode::SessionExpired,
                    format!("session {} {state:?}", session.id()),
                ));
            }
            won = &mut campaign, if leading.is_none() => {
                let leader = won?;
                eprintln!("leading {} with term {}", leader.key, leader.term);
                leading = Some(leader);
            }
            change = changes.next() => {
                let Some(change) = change else { break };
                let change = change?;
                let zxid = change.zxid;
                let line = match change.leader {
                    Some(l) => format!(
                        "{zxid} {} {} {}",
                        l.term,
                        l.participant_id,
                        String::from_utf8_lossy(&l.value)
                    ),
                    None => format!("{zxid} none"),
                };
                printed = print_line(line);
                if printed.is_err() {
                    break; // stdout is gone: resign and close as on ctrl-c
                }
            }
        }
    }
    if let Some(l) = leading {
        let _ = client.resign(&l.key, l.term).await;
    }
    if session.state() == ConnectionState::Connected {
        session.close().await?;
    }
    printed
}
