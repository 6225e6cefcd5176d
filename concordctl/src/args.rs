//! Command-line arguments of `concordctl` (clap derive). Parsing only: no IO.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use concord::{ConnectOptions, CreateMode, TlsOptions, DEFAULT_ENDPOINT};

/// Concord's command-line client.
#[derive(Debug, Parser)]
#[command(name = "concordctl", version, about)]
pub struct Cli {
    /// Server to talk to (`http://host:port` or `host:port`), or a comma-separated
    /// list of an ensemble's servers.
    #[arg(long, global = true, env = "CONCORD_ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub endpoint: String,
    /// TLS: CA certificates (PEM) the server's certificate must be signed by; the
    /// endpoint becomes https://.
    #[arg(long, global = true, env = "CONCORD_CACERT", value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// TLS: this client's certificate (PEM), for a server that requires one.
    #[arg(long, global = true, env = "CONCORD_CERT", value_name = "FILE", requires_all = ["cacert", "key"])]
    pub cert: Option<PathBuf>,
    /// TLS: the private key of --cert (PEM).
    #[arg(
        long,
        global = true,
        env = "CONCORD_KEY",
        value_name = "FILE",
        requires = "cert"
    )]
    pub key: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// How to connect: TLS when --cacert is given.
    pub fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            tls: self.cacert.as_ref().map(|ca| TlsOptions {
                ca_file: ca.clone(),
                cert_file: self.cert.clone(),
                key_file: self.key.clone(),
                domain: None,
            }),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a node and print its path. With -e the node lives as long as this
    /// command: it keeps its session alive until ctrl-c, then closes it.
    Create(CreateArgs),
    /// Print a node's data (and with --stat its stat).
    Get(GetArgs),
    /// Replace a node's data.
    Set(SetArgs),
    /// Delete a node.
    Delete(DeleteArgs),
    /// List a node's children.
    Ls(LsArgs),
    /// Print a node's stat.
    Stat(PathArg),
    /// Print one line per event (`zxid KIND path [data]`) until ctrl-c or --count;
    /// resumes after a dropped connection without losing or repeating events.
    Watch(WatchArgs),
    /// Open, inspect and close sessions.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Describe the server.
    Status,
    /// Run COMMAND while holding lock NAME. The command gets the fencing token in
    /// CONCORD_LOCK_TOKEN and the holder key in CONCORD_LOCK_KEY (pass both as a fence
    /// on its writes); the lock is released when it exits. If the session is lost
    /// meanwhile, the command is killed. Exits with the command's status.
    Lock(LockArgs),
    /// Campaign in election NAME and print one line per leadership change
    /// (`zxid term participant value`, or `zxid none`) until ctrl-c, which resigns.
    Elect(ElectArgs),
    /// Print who the server takes you for: identity, admin, team, namespace root and
    /// the grants that apply to you (`grant PATH team|identity NAME PERMS`).
    Whoami,
    /// Grant, revoke and list permissions (rwcda) on subtrees.
    #[command(subcommand)]
    Acl(AclCommand),
    /// Save a backup of the server's state, or check a backup file (admins).
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// List the ensemble's members: id, role, voter, applied zxid, lag in txns,
    /// ms since heard, client and peer addresses (admins). Asks the leader when the
    /// server named by --endpoint follows one (only the leader knows every member).
    Members(MembersArgs),
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Stream a consistent snapshot of the server's applied state into FILE (written
    /// to a temporary file, fsynced, then renamed: FILE is whole or untouched), and
    /// check its crc. Restore it with `concord restore FILE --data-dir DIR`.
    Save {
        file: PathBuf,
        /// Take it at the leader's quorum-confirmed commit point: it then holds
        /// every write acknowledged before (without: the server's applied state).
        #[arg(long)]
        linearizable: bool,
    },
    /// Check a backup file and print its zxid, node and session counts, size and
    /// checksum state; exits 1 if it is damaged.
    Status { file: PathBuf },
}

#[derive(Debug, Args)]
pub struct MembersArgs {
    /// Print the answer of the server named by --endpoint even when it follows a
    /// leader (it knows only itself and its leader).
    #[arg(long)]
    pub no_redirect: bool,
}

#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Add PERMS (letters of rwcda) to the grant of PATH for a team or an identity.
    Grant(GrantArgs),
    /// Remove PERMS from the grant of PATH for a team or an identity.
    Revoke(GrantArgs),
    /// List the grants on PATH (`PATH team|identity NAME PERMS`).
    Ls {
        path: String,
        /// Also the grants below PATH.
        #[arg(short = 'R', long)]
        recursive: bool,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("grantee").required(true).args(["team", "identity"])))]
pub struct GrantArgs {
    /// The subtree (as you see it: a team's `/` is its namespace root).
    pub path: String,
    /// Permission letters, a subset of rwcda.
    pub perms: String,
    /// The team to grant to (by its name in the server's config).
    #[arg(long)]
    pub team: Option<String>,
    /// The identity to grant to: a name, or a pattern with `*`.
    #[arg(long)]
    pub identity: Option<String>,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// Lock name (one path segment).
    pub name: String,
    /// Give up after MS milliseconds of waiting (0: wait forever).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub timeout: i64,
    /// Semaphore permits (concurrent holders); all users of NAME must agree.
    #[arg(long, default_value_t = 1)]
    pub permits: u32,
    /// TTL of the session that owns the lock (0: the server's default).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub session_ttl: i64,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// Election name (one path segment).
    pub name: String,
    /// This participant's id (default: concordctl-PID).
    #[arg(long)]
    pub id: Option<String>,
    /// The value to announce while leader.
    #[arg(long, default_value = "")]
    pub value: String,
    /// TTL of the session that owns the candidacy (0: the server's default).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub session_ttl: i64,
}

#[derive(Debug, Args)]
pub struct PathArg {
    /// Node path, for example /app/config.
    pub path: String,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Node path (for -s, the name prefix).
    pub path: String,
    /// Initial data; "-" reads it from stdin.
    pub data: Option<String>,
    /// Ephemeral: owned by a session this command keeps alive until ctrl-c.
    #[arg(short = 'e', long)]
    pub ephemeral: bool,
    /// Sequential: append a 10-digit counter to the name.
    #[arg(short = 's', long)]
    pub sequential: bool,
    /// Container: deleted by the server once its last child is gone.
    #[arg(long, conflicts_with_all = ["ephemeral", "sequential", "ttl"])]
    pub container: bool,
    /// Deleted after MS milliseconds without changes and without children.
    #[arg(long, value_name = "MS", conflicts_with = "ephemeral")]
    pub ttl: Option<i64>,
    /// TTL of the session that owns an ephemeral node (0: the server's default).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub session_ttl: i64,
}

impl CreateArgs {
    /// The create mode these flags ask for.
    pub fn mode(&self) -> CreateMode {
        match (
            self.ephemeral,
            self.sequential,
            self.container,
            self.ttl.is_some(),
        ) {
            (_, _, true, _) => CreateMode::Container,
            (true, true, _, _) => CreateMode::EphemeralSequential,
            (true, false, _, _) => CreateMode::Ephemeral,
            (false, true, _, true) => CreateMode::PersistentSequentialWithTtl,
            (false, false, _, true) => CreateMode::PersistentWithTtl,
            (false, true, _, false) => CreateMode::PersistentSequential,
            (false, false, _, false) => CreateMode::Persistent,
        }
    }
}

#[derive(Debug, Args)]
pub struct GetArgs {
    pub path: String,
    /// Also print the stat.
    #[arg(long)]
    pub stat: bool,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    pub path: String,
    /// New data; "-" reads it from stdin.
    pub data: String,
    /// Expected version (-1: any).
    #[arg(short = 'v', long, default_value_t = -1, allow_negative_numbers = true)]
    pub version: i32,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    pub path: String,
    /// Expected version (-1: any).
    #[arg(short = 'v', long, default_value_t = -1, allow_negative_numbers = true)]
    pub version: i32,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    pub path: String,
    /// List the whole subtree, one full path per line.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Show each child's stat.
    #[arg(short = 'l', long = "long")]
    pub with_stats: bool,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    pub path: String,
    /// Watch the whole subtree.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Print each event's data.
    #[arg(long)]
    pub data: bool,
    /// Replay events after this zxid first.
    #[arg(long, value_name = "ZXID", value_parser = parse_u64)]
    pub from: Option<u64>,
    /// Exit after N events.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Open a session, print its id and keep it alive until ctrl-c (then close it).
    Open {
        /// Requested TTL (0: the server's default).
        #[arg(long, value_name = "MS", default_value_t = 0)]
        ttl: i64,
    },
    /// List the live sessions the caller may see: `id ttl_ms remaining_ms`.
    Ls,
    /// Describe a session (its owner too, for an admin or the owner) and its ephemerals.
    Get {
        #[arg(value_parser = parse_u64)]
        id: u64,
    },
    /// Close a session, deleting its ephemerals.
    Close {
        #[arg(value_parser = parse_u64)]
        id: u64,
    },
}

/// Parses a decimal or `0x`-prefixed hexadecimal u64 (zxids and session ids).
pub fn parse_u64(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|e| format!("{text:?} is not a u64: {e}"))
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
