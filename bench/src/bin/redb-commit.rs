//! `redb-commit`: what one durable redb commit costs this machine, in three layouts
//! of the txn log, so that a change to the log's layout is chosen by measurement
//! (issue 16). No server runs: one thread commits to a scratch redb file.
//!
//! ```text
//!   per-txn    one key per txn (the server's layout: zxid -> txn)
//!   per-batch  one key per commit holding the whole batch
//!   journal    per-txn, but redb's page writes are appended to a preallocated
//!              journal file and fsynced there; the redb file itself is written and
//!              never synced. A lower bound for a journal under redb: it has no
//!              recovery, so it measures a commit and nothing else.
//!   coalesced  per-txn, but redb's page writes wait in memory until its sync,
//!              then go to the file in one write per run of adjacent pages
//! ```
//!
//! For each layout it prefills the log with `--prefill` entries (the log a server
//! keeps between snapshots), then makes `--commits` commits of `--batch` txns of
//! `--txn-bytes` each, with `Durability::Immediate` and the server's 8 MiB page
//! cache, and prints per commit: wall time (mean, p50, p99), write system calls
//! (redb's page writes plus its header) and CPU (user + system, the fsync's kernel
//! path included). Layouts run in turn, `--rounds` times, so the disk's drift weighs
//! on each alike.
//!
//!     cargo run --release -p concord-bench --bin redb-commit -- [--dir /tmp] [--batch 1]
//!
//! Writes only in a scratch folder under `--dir` and deletes it.

use std::fs::{File, OpenOptions};
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use redb::backends::FileBackend;
use redb::{BackendError, Database, Durability, StorageBackend, TableDefinition};

/// The log's table as the server declares it (storage/redb.rs).
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// The server's redb page cache (storage/redb/recovery.rs).
const CACHE_BYTES: usize = 8 << 20;
/// The journal's preallocated size; appends wrap to its start after a sync of the
/// redb file.
const JOURNAL_BYTES: u64 = 64 << 20;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
enum Layout {
    PerTxn,
    PerBatch,
    Journal,
    Coalesced,
}

#[derive(Parser, Debug)]
#[command(about = "What one durable redb commit costs, per layout of the txn log")]
struct Args {
    /// Folder for the scratch files.
    #[arg(long, default_value = "/tmp")]
    dir: PathBuf,
    /// Layouts to measure, in turn.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "per-txn,per-batch,journal,coalesced"
    )]
    layouts: Vec<Layout>,
    /// Log entries written before measuring.
    #[arg(long, default_value_t = 100_000)]
    prefill: u64,
    /// Commits measured per layout and round.
    #[arg(long, default_value_t = 2_000)]
    commits: u64,
    /// Txns per commit (a group commit's batch).
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// Bytes of one encoded txn (a set of a 100-byte value encodes to about 150).
    #[arg(long, default_value_t = 150)]
    txn_bytes: usize,
    /// Rounds over the layouts.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let scratch = args
        .dir
        .join(format!("concord-redb-commit-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let result = run(&args, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn run(args: &Args, scratch: &Path) -> Result<(), String> {
    println!(
        "| layout | txns per commit | commits | mean µs | p50 µs | p99 µs | writes per commit | CPU µs per commit |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for _ in 0..args.rounds {
        for &layout in &args.layouts {
            let r = measure(args, layout, scratch)?;
            println!(
                "| {layout:?} | {} | {} | {:.0} | {} | {} | {:.2} | {:.0} |",
                args.batch, args.commits, r.mean_us, r.p50_us, r.p99_us, r.writes, r.cpu_us
            );
        }
    }
    Ok(())
}

struct Measured {
    mean_us: f64,
    p50_us: u64,
    p99_us: u64,
    writes: f64,
    cpu_us: f64,
}

fn measure(args: &Args, layout: Layout, scratch: &Path) -> Result<Measured, String> {
    let path = scratch.join("log.redb");
    let _ = std::fs::remove_file(&path);
    let mut builder = Database::builder();
    builder.set_cache_size(CACHE_BYTES);
    let open = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let db = match layout {
        Layout::Journal => {
            let backend = Journaled::new(open(&path)?, open(&scratch.join("journal"))?)?;
            builder.create_with_backend(backend).map_err(fail)?
        }
        Layout::Coalesced => {
            let backend = Coalesced {
                file: FileBackend::new(open(&path)?).map_err(|e| format!("redb file: {e}"))?,
                pending: Mutex::new(Vec::new()),
            };
            builder.create_with_backend(backend).map_err(fail)?
        }
        Layout::PerTxn | Layout::PerBatch => builder.create(&path).map_err(fail)?,
    };
    let txn = vec![7u8; args.txn_bytes];
    let wtx = db.begin_write().map_err(fail)?;
    {
        let mut log = wtx.open_table(LOG).map_err(fail)?;
        for key in 0..args.prefill {
            log.insert(key, txn.as_slice()).map_err(fail)?;
        }
    }
    wtx.commit().map_err(fail)?;

    let batch = vec![7u8; args.txn_bytes * args.batch as usize];
    let mut key = args.prefill;
    let mut took = Vec::with_capacity(args.commits as usize);
    let (writes_before, cpu_before) = (write_calls()?, cpu_seconds()?);
    let started = Instant::now();
    for _ in 0..args.commits {
        let one = Instant::now();
        let mut wtx = db.begin_write().map_err(fail)?;
        wtx.set_durability(Durability::Immediate).map_err(fail)?;
        {
            let mut log = wtx.open_table(LOG).map_err(fail)?;
            if layout == Layout::PerBatch {
                log.insert(key, batch.as_slice()).map_err(fail)?;
                key += args.batch;
            } else {
                for _ in 0..args.batch {
                    log.insert(key, txn.as_slice()).map_err(fail)?;
                    key += 1;
                }
            }
        }
        wtx.commit().map_err(fail)?;
        took.push(one.elapsed().as_micros() as u64);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (writes_after, cpu_after) = (write_calls()?, cpu_seconds()?);
    drop(db);
    took.sort_unstable();
    let n = args.commits.max(1) as f64;
    Ok(Measured {
        mean_us: elapsed / n * 1e6,
        p50_us: took.get(took.len() / 2).copied().unwrap_or(0),
        p99_us: took.get(took.len() * 99 / 100).copied().unwrap_or(0),
        writes: (writes_after - writes_before) as f64 / n,
        cpu_us: (cpu_after - cpu_before) / n * 1e6,
    })
}

/// A redb error as this tool reports it.
fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Write system calls this process has made (`syscw` of /proc/self/io).
fn write_calls() -> Result<u64, String> {
    let io = std::fs::read_to_string("/proc/self/io").map_err(|e| format!("/proc/self/io: {e}"))?;
    io.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no syscw in /proc/self/io".to_string())
}

/// User plus system CPU seconds of this process (/proc/self/stat, in clock ticks of
/// 10 ms: enough over thousands of commits).
fn cpu_seconds() -> Result<f64, String> {
    let stat =
        std::fs::read_to_string("/proc/self/stat").map_err(|e| format!("/proc/self/stat: {e}"))?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    // utime and stime are fields 14 and 15 of the line; 12 and 13 after the name.
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => Ok((user + system) as f64 / 100.0),
        _ => Err("unreadable /proc/self/stat".into()),
    }
}

/// The byte-range lock methods of a `StorageBackend` that wraps redb's file in a
/// field `file`: every lock is the file's.
macro_rules! forward_locks_to_file {
    () => {
        fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
            self.file.try_lock_range(start, end)
        }

        fn try_lock_shared_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> Result<bool, BackendError> {
            self.file.try_lock_shared_range(start, end)
        }

        fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
            self.file.lock_range(start, end)
        }

        fn lock_shared_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> Result<(), BackendError> {
            self.file.lock_shared_range(start, end)
        }

        fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
            self.file.unlock_range(start, end)
        }

        fn query_lock_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> Result<bool, BackendError> {
            self.file.query_lock_range(start, end)
        }
    };
}

/// The value behind `mutex` (a panic elsewhere while it was held changes nothing
/// here: the writes it holds are whole).
fn held<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// redb's file, with every page write also appended to a journal, and `sync_data`
/// syncing the journal instead of the file.
#[derive(Debug)]
struct Journaled {
    file: FileBackend,
    journal: File,
    /// Page writes since the last sync (offset, length, bytes), and where the next
    /// journal record goes.
    pending: Mutex<(Vec<u8>, u64)>,
}

impl Journaled {
    /// Preallocates the journal by writing zeros (as ZooKeeper does its log), so an
    /// append's fdatasync has no file metadata to write.
    fn new(file: File, journal: File) -> Result<Journaled, String> {
        let zeros = vec![0u8; 1 << 20];
        for mib in 0..JOURNAL_BYTES >> 20 {
            journal
                .write_all_at(&zeros, mib << 20)
                .map_err(|e| format!("journal: {e}"))?;
        }
        journal.sync_all().map_err(|e| format!("journal: {e}"))?;
        Ok(Journaled {
            file: FileBackend::new(file).map_err(|e| format!("redb file: {e}"))?,
            journal,
            pending: Mutex::new((Vec::new(), 0)),
        })
    }
}

impl StorageBackend for Journaled {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.file.set_len(len)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut pending = held(&self.pending);
        pending.0.extend_from_slice(&offset.to_le_bytes());
        pending
            .0
            .extend_from_slice(&(data.len() as u64).to_le_bytes());
        pending.0.extend_from_slice(data);
        self.file.write(offset, data)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        let mut pending = held(&self.pending);
        let (records, at) = &mut *pending;
        if *at + records.len() as u64 > JOURNAL_BYTES {
            self.file.sync_data()?;
            *at = 0;
        }
        self.journal.write_all_at(records, *at)?;
        *at += records.len() as u64;
        records.clear();
        self.journal.sync_data()
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.file.sync_data()?;
        self.file.close()
    }

    forward_locks_to_file!();
}

/// redb's file, with its page writes held in memory until its next sync and then
/// written in one call per run of adjacent pages (reads see the held writes).
#[derive(Debug)]
struct Coalesced {
    file: FileBackend,
    /// Writes since the last sync, in the order redb made them: (offset, bytes).
    pending: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl Coalesced {
    /// Writes what is held: adjacent writes joined when none overlaps another,
    /// otherwise one by one in redb's order.
    fn write_pending(&self) -> Result<(), std::io::Error> {
        let writes = std::mem::take(&mut *held(&self.pending));
        let mut order: Vec<&(u64, Vec<u8>)> = writes.iter().collect();
        order.sort_by_key(|(offset, _)| *offset);
        let end = |w: &(u64, Vec<u8>)| w.0 + w.1.len() as u64;
        if order.windows(2).any(|w| end(w[0]) > w[1].0) {
            for (offset, data) in &writes {
                self.file.write(*offset, data)?;
            }
            return Ok(());
        }
        let mut run: Vec<u8> = Vec::new();
        let mut run_at = 0;
        for w in order {
            if !run.is_empty() && run_at + run.len() as u64 != w.0 {
                self.file.write(run_at, &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_at = w.0;
            }
            run.extend_from_slice(&w.1);
        }
        if !run.is_empty() {
            self.file.write(run_at, &run)?;
        }
        Ok(())
    }
}

impl StorageBackend for Coalesced {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.file.read(offset, out)?;
        let out_end = offset + out.len() as u64;
        for (at, data) in held(&self.pending).iter() {
            let (from, to) = ((*at).max(offset), (at + data.len() as u64).min(out_end));
            if from < to {
                out[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&data[(from - at) as usize..(to - at) as usize]);
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.write_pending()?;
        self.file.set_len(len)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        held(&self.pending).push((offset, data.to_vec()));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.write_pending()?;
        self.file.sync_data()
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.write_pending()?;
        self.file.close()
    }

    forward_locks_to_file!();
}
