//! The redb store on a disk that crashes (`crash_disk.rs`). A seeded workload of
//! appends, snapshots (new ones, replaced ones, and ones installed above the log),
//! purges, compactions of the file, truncations and epoch writes runs against a `CrashDisk`. At every crash
//! point (each write, sync and length change redb makes) the image a crash would
//! leave, under each `Tear`, is opened as a new store and checked against the
//! workload's model as it was before the call in flight and as it is after it:
//!
//! - the store opens;
//! - every snapshot it lists was saved and not purged, and loads with its bytes;
//! - its newest snapshot N reaches its log's start (`log_start <= N`), so no txn
//!   between them is missing;
//! - its log after N holds exactly the model's txns after N, before or after the
//!   call (every acknowledged txn, none that was truncated, none made up), each
//!   byte for byte;
//! - `last_zxid` is the newest of N and that log, each named u64 is its value
//!   before or after the call, and the store takes the next append.
//!
//! CI sweeps `SEEDS_DEFAULT` seeds. More (the long run), from a first seed:
//! `STORAGE_CRASH_SEEDS=200 STORAGE_CRASH_FIRST=0 cargo test --release -p
//! concord-server --lib storage::redb::crash_tests`. A failure names its seed and crash
//! point, and the command that replays that seed.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use ::redb::backends::InMemoryBackend;
use ::redb::StorageBackend;
use bytes::Bytes;

use super::crash_disk::{CrashDisk, Disk, Tear};
use super::RedbStorage;
use crate::storage::Storage;
use crate::test_env::env_u64;
use crate::txn::{make_zxid, SetOp, Txn, TxnOp, Zxid};
use crate::zab::rng::Rng;

/// Workloads per CI run, each of `STEPS` calls; see `the_store_reopens_after_every_crash`
/// for the crash points they reach.
const SEEDS_DEFAULT: u64 = 2;
/// Storage calls per workload.
const STEPS: usize = 120;
/// The tears tried at every crash point.
const TEARS: [Tear; 3] = [Tear::DropAll, Tear::KeepAll, Tear::Sectors];

/// One storage call of the workload.
#[derive(Clone, Debug)]
enum Call {
    Append(Vec<Zxid>),
    SaveSnapshot(Zxid),
    Purge(usize),
    /// `compact_file`: moves pages and shortens the file, changes nothing stored.
    Compact,
    TruncateAfter(Zxid),
    SetU64(&'static str, u64),
}

/// What the store holds after the calls so far (txn and snapshot contents are
/// functions of their zxids: `txn_at`, `snapshot_at`).
#[derive(Clone, Debug, Default)]
struct Model {
    log: BTreeSet<Zxid>,
    snapshots: BTreeSet<Zxid>,
    meta: BTreeMap<&'static str, u64>,
}

impl Model {
    /// The model after `call`.
    fn after(&self, call: &Call) -> Model {
        let mut m = self.clone();
        match call {
            Call::Append(zxids) => m.log.extend(zxids),
            Call::SaveSnapshot(zxid) => {
                m.snapshots.insert(*zxid);
            }
            Call::Purge(keep) => {
                let cut = m.snapshots.len().saturating_sub((*keep).max(1));
                m.snapshots = m.snapshots.iter().skip(cut).copied().collect();
            }
            Call::Compact => {}
            Call::TruncateAfter(zxid) => m.log.retain(|z| z <= zxid),
            Call::SetU64(key, value) => {
                m.meta.insert(key, *value);
            }
        }
        m
    }

    /// The txns after `zxid`.
    fn log_after(&self, zxid: Zxid) -> Vec<Zxid> {
        self.log
            .range((Bound::Excluded(zxid), Bound::Unbounded))
            .copied()
            .collect()
    }

    fn newest_snapshot(&self) -> Zxid {
        self.snapshots.last().copied().unwrap_or(0)
    }
}

/// A number spread over u64 by `x` (SplitMix64's finalizer), for sizes and contents.
fn spread(x: u64) -> u64 {
    Rng::new(x).next_u64()
}

/// The txn the workload writes at `zxid`: up to 2 KB of data, so commits touch a
/// varying number of pages.
fn txn_at(zxid: Zxid) -> Txn {
    let len = (spread(zxid) % 2048) as usize;
    Txn {
        zxid,
        time_ms: 1_700_000_000_000,
        session_id: 1,
        request_id: zxid,
        fence: None,
        op: TxnOp::Set(SetOp {
            path: format!("/k{}", zxid % 50),
            data: Bytes::from(vec![zxid as u8; len]),
            version: -1,
            null_data: false,
        }),
    }
}

/// The snapshot the workload saves at `zxid`: mostly tens of KB, one in eight
/// larger than a chunk (so it spans two).
fn snapshot_at(zxid: Zxid) -> Vec<u8> {
    let h = spread(zxid ^ 0x5eed);
    let len = if h.is_multiple_of(8) {
        super::snapshot::CHUNK_BYTES + (h % 100_000) as usize
    } else {
        (h % 60_000) as usize
    };
    let mut data = h.to_le_bytes().repeat(len / 8 + 1);
    data.truncate(len);
    data
}

/// The calls of workload `seed`: each valid for the store's contract given the ones
/// before it (appends above `last_zxid`, truncations above the newest snapshot).
fn workload(seed: u64) -> Vec<Call> {
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    let (mut epoch, mut counter) = (1u32, 0u64);
    let mut calls = Vec::with_capacity(STEPS);
    while calls.len() < STEPS {
        let above_snapshot = model.log_after(model.newest_snapshot());
        let call = match rng.below(100) {
            0..50 => {
                let n = 1 + rng.below(8);
                let zxids = (counter + 1..=counter + n).map(|c| make_zxid(epoch, c));
                counter += n;
                Call::Append(zxids.collect())
            }
            50..62 if !above_snapshot.is_empty() => {
                let i = rng.below(above_snapshot.len() as u64) as usize;
                Call::SaveSnapshot(above_snapshot[i])
            }
            62..66 if !model.snapshots.is_empty() => Call::SaveSnapshot(model.newest_snapshot()),
            66..69 => {
                // A SNAP from a leader, installed above this store's whole log.
                counter += 1 + rng.below(5);
                Call::SaveSnapshot(make_zxid(epoch, counter))
            }
            69..77 => Call::Purge(1 + rng.below(3) as usize),
            77..80 => Call::Compact,
            80..86 if above_snapshot.len() >= 2 => {
                // A new leader's TRUNC, then its epoch.
                let i = rng.below(above_snapshot.len() as u64 - 1) as usize;
                epoch += 1;
                counter = 0;
                Call::TruncateAfter(above_snapshot[i])
            }
            86.. => Call::SetU64(
                ["accepted_epoch", "current_epoch"][rng.below(2) as usize],
                u64::from(epoch) + rng.below(3),
            ),
            _ => continue,
        };
        model = model.after(&call);
        calls.push(call);
    }
    calls
}

fn perform(store: &RedbStorage, call: &Call) -> Result<(), String> {
    let done = match call {
        Call::Append(zxids) => store.append(&zxids.iter().map(|z| txn_at(*z)).collect::<Vec<_>>()),
        Call::SaveSnapshot(zxid) => store.save_snapshot(*zxid, &snapshot_at(*zxid)),
        Call::Purge(keep) => store.purge(*keep),
        Call::Compact => store.compact_file().map(drop),
        Call::TruncateAfter(zxid) => store.truncate_after(*zxid),
        Call::SetU64(key, value) => store.set_u64(key, *value),
    };
    done.map_err(|e| format!("{call:?} failed: {e}"))
}

/// The call in flight, and the model before and after it.
#[derive(Debug, Default)]
struct InFlight {
    call: Option<Call>,
    before: Model,
    after: Model,
}

/// What the crash hook shares with the workload's driver.
struct Crashes {
    /// Off while the store is created: `RedbStorage::open` makes a new store beside
    /// its path and renames it into place, so a crash then leaves no store at all
    /// (redb sizes a new file before writing its header: such a file never opens).
    armed: bool,
    in_flight: InFlight,
    rng: Rng,
    /// The sync count at the last `Tear::DropAll` image checked.
    dropped_all_at: Option<u64>,
    images: u64,
    image_bytes_max: usize,
    failure: Option<String>,
}

impl Crashes {
    /// A crash point: every tear's image must reopen as a store the model allows.
    fn at(&mut self, disk: &Disk) {
        if !self.armed || self.failure.is_some() {
            return;
        }
        for tear in TEARS {
            // Until the next sync, dropping every unsynced write leaves what it left.
            if tear == Tear::DropAll {
                if self.dropped_all_at == Some(disk.syncs()) {
                    continue;
                }
                self.dropped_all_at = Some(disk.syncs());
            }
            let image = disk.crash_image(tear, &mut self.rng);
            self.images += 1;
            self.image_bytes_max = self.image_bytes_max.max(image.len());
            if let Err(e) = check(image, &self.in_flight) {
                self.failure = Some(format!(
                    "crash point {} ({tear:?}) during {:?}: {e}",
                    disk.points(),
                    self.in_flight.call
                ));
                return;
            }
        }
    }
}

/// Opens `image` as a store and checks it against the model before and after the
/// call in flight (the module's list).
fn check(image: Vec<u8>, in_flight: &InFlight) -> Result<(), String> {
    let (before, after) = (&in_flight.before, &in_flight.after);
    // Reopened on redb's own memory backend: what happens to this store after the
    // crash is not under test.
    let backend = InMemoryBackend::new();
    backend
        .set_len(image.len() as u64)
        .and_then(|()| backend.write(0, &image))
        .map_err(|e| format!("loading the image: {e}"))?;
    let (store, _) = RedbStorage::open_backend(backend)
        .map_err(|e| format!("the store does not reopen: {e}"))?;
    let io = |e: crate::storage::StorageError| e.to_string();
    let snapshots = store.snapshots().map_err(io)?;
    for zxid in &snapshots {
        if !before.snapshots.contains(zxid) && !after.snapshots.contains(zxid) {
            return Err(format!("snapshot {zxid:#x} is listed but not saved"));
        }
        if store.load_snapshot(*zxid).map_err(io)? != snapshot_at(*zxid) {
            return Err(format!("snapshot {zxid:#x} has other bytes"));
        }
    }
    let newest = snapshots.last().copied().unwrap_or(0);
    let start = store.log_start().map_err(io)?;
    if start > newest {
        return Err(format!(
            "the log starts after {start:#x} but the newest snapshot is {newest:#x}: the txns between are lost"
        ));
    }
    let txns = store.read_after(newest, usize::MAX).map_err(io)?;
    if let Some(t) = txns.iter().find(|t| **t != txn_at(t.zxid)) {
        return Err(format!("txn {:#x} has other contents", t.zxid));
    }
    let log: Vec<Zxid> = txns.iter().map(|t| t.zxid).collect();
    if log != before.log_after(newest) && log != after.log_after(newest) {
        return Err(format!(
            "after snapshot {newest:#x} the log holds {} txns ({:x?}..{:x?}), the model {} before the call and {} after",
            log.len(),
            log.first(),
            log.last(),
            before.log_after(newest).len(),
            after.log_after(newest).len(),
        ));
    }
    let last = log.last().copied().unwrap_or(0).max(newest);
    let last_zxid = store.last_zxid().map_err(io)?;
    if last_zxid != last {
        return Err(format!("last_zxid {last_zxid:#x}, expected {last:#x}"));
    }
    for key in before.meta.keys().chain(after.meta.keys()) {
        let value = store.get_u64(key).map_err(io)?;
        if value != before.meta.get(key).copied() && value != after.meta.get(key).copied() {
            return Err(format!("{key} is {value:?}"));
        }
    }
    store
        .append(&[txn_at(last + 1)])
        .map_err(|e| format!("the reopened store refuses an append: {e}"))
}

/// What a sweep covered.
#[derive(Debug, Default)]
struct Covered {
    points: u64,
    images: u64,
    image_bytes_max: usize,
}

/// Runs workload `seed` with a crash check at every crash point.
fn run_seed(seed: u64) -> Result<Covered, String> {
    let crashes = Arc::new(Mutex::new(Crashes {
        armed: false,
        in_flight: InFlight::default(),
        rng: Rng::new(seed ^ 0xc7a5),
        dropped_all_at: None,
        images: 0,
        image_bytes_max: 0,
        failure: None,
    }));
    let hook = {
        let crashes = crashes.clone();
        Box::new(move |disk: &Disk| crashes.lock().unwrap().at(disk))
    };
    let disk = Arc::new(Mutex::new(Disk::default()));
    let (store, _) = RedbStorage::open_backend(CrashDisk::new(disk.clone(), Some(hook)))
        .map_err(|e| format!("open: {e}"))?;
    crashes.lock().unwrap().armed = true;
    let armed_at = disk.lock().unwrap().points();
    let failed = |crashes: &Mutex<Crashes>| crashes.lock().unwrap().failure.take();
    let mut model = Model::default();
    for call in workload(seed) {
        let after = model.after(&call);
        crashes.lock().unwrap().in_flight = InFlight {
            call: Some(call.clone()),
            before: model,
            after: after.clone(),
        };
        perform(&store, &call)?;
        model = after;
        if let Some(f) = failed(&crashes) {
            return Err(f);
        }
    }
    let points = disk.lock().unwrap().points() - armed_at;
    let c = crashes.lock().unwrap();
    Ok(Covered {
        points,
        images: c.images,
        image_bytes_max: c.image_bytes_max,
    })
}

#[test]
fn the_store_reopens_after_every_crash() {
    let first = env_u64("STORAGE_CRASH_FIRST", 0);
    let count = env_u64("STORAGE_CRASH_SEEDS", SEEDS_DEFAULT);
    let started = std::time::Instant::now();
    let mut covered = Covered::default();
    for seed in first..first + count {
        match run_seed(seed) {
            Ok(c) => {
                covered.points += c.points;
                covered.images += c.images;
                covered.image_bytes_max = covered.image_bytes_max.max(c.image_bytes_max);
            }
            Err(e) => panic!(
                "storage crash seed {seed}: {e}\nreplay: STORAGE_CRASH_FIRST={seed} STORAGE_CRASH_SEEDS=1 \
                 cargo test -p concord-server --lib storage::redb::crash_tests"
            ),
        }
    }
    eprintln!(
        "storage crashes: {count} seeds from {first}, {covered:?}, in {:?}",
        started.elapsed()
    );
    // What CI's seeds reach: over the 2,000 crash points asked for.
    assert!(
        covered.points >= 1_000 * count,
        "{} crash points in {count} seeds",
        covered.points
    );
}

/// What CI's seeds hold between them: every kind of call, and snapshots replaced,
/// installed above the log, and larger than a chunk.
#[test]
fn every_kind_of_call_is_in_the_workload() {
    let calls: Vec<Call> = (0..SEEDS_DEFAULT).flat_map(workload).collect();
    let has = |f: fn(&Call) -> bool| calls.iter().any(f);
    assert!(has(|c| matches!(c, Call::Append(_))));
    assert!(has(|c| matches!(c, Call::Purge(_))));
    assert!(has(|c| matches!(c, Call::Compact)));
    assert!(has(|c| matches!(c, Call::TruncateAfter(_))));
    assert!(has(|c| matches!(c, Call::SetU64(..))));
    let (mut replaced, mut installed, mut large) = (false, false, false);
    for seed in 0..SEEDS_DEFAULT {
        let mut model = Model::default();
        for call in &workload(seed) {
            if let Call::SaveSnapshot(z) = call {
                replaced |= model.snapshots.contains(z);
                installed |= model.log.last().is_none_or(|last| z > last);
                large |= snapshot_at(*z).len() > super::snapshot::CHUNK_BYTES;
            }
            model = model.after(call);
        }
    }
    assert!(
        replaced && installed && large,
        "{replaced} {installed} {large}"
    );
}
