//! A naming service: four workers, each with a client of its own, take sequential ids
//! under `/naming/NAME` at the same time and print them; the ids are unique across the
//! workers and grow for each. Each id's node is deleted right after it is created (the
//! folder's counter keeps growing), so the folder stays empty. Ends once every worker
//! has taken its ids, or on Ctrl-C.
//!
//! ```text
//! cargo run --example naming_service -- [ENDPOINT] [NAME]
//! ```
//!
//! ENDPOINT defaults to `CONCORD_ENDPOINT`, else `127.0.0.1:7181`; NAME to `demo`.

use std::collections::BTreeSet;
use std::time::Duration;

use concord::{Client, IdGenerator, IdOptions};

const WORKERS: usize = 4;
const IDS_PER_WORKER: usize = 5;

async fn worker(endpoint: String, folder: String, n: usize) -> Result<Vec<u64>, concord::Error> {
    let client = Client::builder()
        .endpoint(endpoint)
        .call_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    let ids = IdGenerator::new(&client, &folder, IdOptions::default());
    let mut taken = Vec::new();
    for _ in 0..IDS_PER_WORKER {
        let id = ids.next_id().await?;
        println!("worker {n} took id {id}");
        taken.push(id);
    }
    Ok(taken)
}

async fn run(endpoint: String, folder: String) -> Result<(), Box<dyn std::error::Error>> {
    let workers: Vec<_> = (1..=WORKERS)
        .map(|n| tokio::spawn(worker(endpoint.clone(), folder.clone(), n)))
        .collect();
    let mut all = BTreeSet::new();
    for (n, handle) in (1..=WORKERS).zip(workers) {
        let taken = handle.await??;
        println!("worker {n}: {taken:?}");
        all.extend(taken);
    }
    println!(
        "{} ids taken under {folder}, {} distinct",
        WORKERS * IDS_PER_WORKER,
        all.len()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .or_else(|| std::env::var("CONCORD_ENDPOINT").ok())
        .unwrap_or_else(|| "127.0.0.1:7181".into());
    let name = args.next().unwrap_or_else(|| "demo".into());
    let folder = format!("/naming/{name}");
    tokio::select! {
        result = run(endpoint, folder) => result,
        _ = tokio::signal::ctrl_c() => {
            println!("interrupted");
            Ok(())
        }
    }
}
