//! `log_compact`: how long the Zab core's log compaction holds the thread that runs
//! it, and how long freeing what it covers takes. A server compacts after every
//! snapshot (`snapshot_every_txns`, 100,000 by default) on its pipeline's thread,
//! which on one runtime thread also serves every client.
//!
//!     cargo run --release -p concord-server --example log_compact
//!
//! Appends `--txns` (default 100,000) writes of 100 bytes to a log, as a server's
//! writes would, compacts all but the last 10, and prints the compaction's time and
//! the time freeing the covered txns takes (the pipeline hands those to tokio's
//! blocking pool); three rounds.

use std::time::{Duration, Instant};

use bytes::Bytes;
use concord_server::txn::{SetOp, Txn, TxnOp};
use concord_server::zab::log::Log;

fn write(zxid: u64) -> Txn {
    Txn {
        zxid,
        time_ms: 0,
        session_id: 0,
        request_id: 0,
        fence: None,
        op: TxnOp::Set(SetOp {
            path: format!("/bench/key-{:08}", zxid % 64),
            data: Bytes::from(vec![7u8; 100]),
            version: -1,
            null_data: false,
        }),
    }
}

fn main() {
    let txns: u64 = match std::env::args().skip_while(|a| a != "--txns").nth(1) {
        Some(n) => match n.parse() {
            Ok(n) if n > 10 => n,
            _ => {
                eprintln!("--txns: a count above 10");
                std::process::exit(2);
            }
        },
        None => 100_000,
    };
    let mut log = Log::default();
    let mut zxid = 0;
    for round in 1..=3 {
        let mut slowest_append = Duration::ZERO;
        for _ in 0..txns {
            zxid += 1;
            let started = Instant::now();
            log.append(write(zxid));
            slowest_append = slowest_append.max(started.elapsed());
        }
        let started = Instant::now();
        let covered = log.compact(zxid - 10);
        let compact = started.elapsed();
        let started = Instant::now();
        let freed = covered.map_or(0, |covered| {
            let count = covered.len();
            drop(covered);
            count
        });
        let free = started.elapsed();
        println!(
            "round {round}: {freed} txns covered; compact {compact:?}, freeing them {free:?}, \
             slowest append {slowest_append:?}"
        );
    }
}
