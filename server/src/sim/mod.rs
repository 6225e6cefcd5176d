//! A deterministic simulator of whole replicas (test builds only).
//!
//! One thread, one event queue, one random stream per subsystem (network, disk,
//! workload, faults), all drawn from the seed. N servers (3 or 5 voters, sometimes
//! an observer), each running the code a server runs: the replica engine
//! (`replica::engine`: the Zab core, proposals, applying to the data tree, the
//! waiter table, session deadlines, the snapshot policy), its disk a `MemStorage`
//! written by the persister's `persist::write` and the snapshotter's
//! `write_snapshot`, and read back at every restart by recovery's `recover_from`.
//!
//! The world around them (`world.rs`, `faults.rs`, `workload.rs`): a network with
//! delay, loss, duplication, reordering, stale messages held for 50-300 ticks, and
//! partitions (symmetric, one-way, isolating the leader, a bridge that alone hears
//! both sides); crashes that lose what was not made durable (the first pending
//! write possibly torn), process pauses (no ticks, nothing read, the clock jumps on
//! resume), followers that stop reading their peers (`SimOptions::deaf_followers`),
//! disk write errors (the server stops), snapshots written after a delay
//! (a crash cuts them short, or falls between the save and its purge), discarded
//! histories; clients with sessions (kept alive, closed, or left to expire, which
//! the serving leader does every tick), ephemerals, plain writes, Multis, a mutex and
//! an election with fenced writes, reads at any running server with the session's
//! `min_zxid`, and read indexes.
//!
//! Invariants are checked as every event is handled (`check.rs`, named after the
//! Zab specification's); then the liveness phase heals everything and requires a
//! new write to commit everywhere within a bound. The same seed gives the same trace
//! hash.
//!
//! What it does not run: the tokio shell around the engine (`replica/pipeline.rs`:
//! its select loop and back-pressure, whose effect on a follower, that it stops
//! reading its peers, `deaf_followers` models), the peer transport, forwarding,
//! keep-alives through followers, and the reaping of containers and TTL nodes.
//!
//! ```text
//!   seed ─▶ SimOptions::from_seed ─▶ World::run (chaos, heal, liveness) ─▶ Ok(report) | Err(failure)
//! ```
//!
//! Commands:
//! - CI: `cargo test -p concord-server sim::tests::` (12000 seeds by default, about
//!   75 s in a test build; ZAB_SIM_SEEDS sets the count, ZAB_SIM_FIRST the first seed);
//! - longer sweep: `ZAB_SIM_FIRST=12000 ZAB_SIM_SEEDS=200000 ZAB_SIM_CHAOS_TICKS=1000
//!   cargo test -p concord-server sim::tests::zab_sim_seeds -- --nocapture`;
//! - replay: `ZAB_SEED=1234 cargo test -p concord-server sim::tests::zab_sim_replay -- --nocapture`
//!   (add ZAB_SIM_VERBOSE=1 for the event log, ZAB_BUG=ack|commit|epoch|resync for a
//!   planted bug).

mod check;
mod faults;
mod server;
#[cfg(test)]
mod tests;
mod workload;
mod world;

pub use world::Stats;

use crate::zab::PlantedBug;
use world::World;

/// What one run simulates.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub seed: u64,
    pub voters: usize,
    pub observers: usize,
    /// Length of the fault phase.
    pub chaos_ticks: u64,
    /// Bound on the liveness phase.
    pub liveness_ticks: u64,
    pub bug: Option<PlantedBug>,
    /// Servers that speak only peer protocol 1 (a rolling upgrade half done): what
    /// they send and what is sent to them takes protocol 1's form, as the peer
    /// transport makes it (`peer::downgrade`).
    pub protocol_1: Vec<crate::zab::ServerId>,
    /// Every 2 to 8 ticks, a follower or observer that still reads stops reading
    /// its peers for 5 to 60 ticks, as the pipeline's back-pressure makes it (its
    /// disk behind, or its log full while its snapshot is written): its core hears
    /// nothing and does not tick meanwhile, while the process runs and is asked
    /// for reads. Dense on purpose: sparser stops commit more but catch a core
    /// trusted too soon after a second stop far later (docs/testing.md). Drawn
    /// from a stream of its own, so the other faults of a seed stay as they were.
    pub deaf_followers: bool,
    /// Print every status change and fault.
    pub verbose: bool,
}

impl SimOptions {
    /// The ensemble shape is drawn from the seed: 3 voters, 5 voters, or 3 + 1 observer.
    pub fn from_seed(seed: u64) -> SimOptions {
        let (voters, observers) = match seed % 3 {
            0 => (3, 0),
            1 => (5, 0),
            _ => (3, 1),
        };
        SimOptions {
            seed,
            voters,
            observers,
            chaos_ticks: 300,
            liveness_ticks: 150,
            bug: None,
            protocol_1: Vec::new(),
            deaf_followers: false,
            verbose: false,
        }
    }
}

/// The outcome of a passing run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Hash of the whole event trace: equal for equal seeds.
    pub trace: u64,
    pub stats: Stats,
}

/// Runs one seed; Err names the broken invariant.
pub fn run(opts: SimOptions) -> Result<Report, String> {
    let mut world = World::new(opts)?;
    let result = world.run();
    result.map(|()| Report {
        trace: world.trace,
        stats: world.stats.clone(),
    })
}

/// The command that replays `seed`.
pub fn replay_command(seed: u64, bug: Option<PlantedBug>) -> String {
    let bug = match bug {
        None => "",
        Some(PlantedBug::AckBeforeFsync) => "ZAB_BUG=ack ",
        Some(PlantedBug::CommitWithoutQuorum) => "ZAB_BUG=commit ",
        Some(PlantedBug::SkipEpochPersist) => "ZAB_BUG=epoch ",
        Some(PlantedBug::IgnoreResync) => "ZAB_BUG=resync ",
    };
    format!(
        "{bug}ZAB_SEED={seed} ZAB_SIM_VERBOSE=1 cargo test -p concord-server sim::tests::zab_sim_replay -- --nocapture"
    )
}
