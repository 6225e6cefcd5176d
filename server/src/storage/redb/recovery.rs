//! Opening a redb store: create a new one whole (beside its name, then renamed),
//! create the tables, remove incomplete snapshots, validate the log after the newest
//! snapshot, and compute `last_zxid`; and discarding a store (kept aside under a new
//! name) for an operator who chose to start again empty.
//!
//! ```text
//!   open ─▶ tables ─▶ chunks without index? delete ─▶ log after newest snapshot:
//!           crc ok, decodes, key == txn.zxid, ascending? first bad ─▶ Err(BadLogEntry)
//!                                                       all good ─▶ OpenReport
//! ```
//!
//! Every log entry was written by a committed redb transaction, and redb commits are
//! atomic: there is no torn tail to cut. An entry that fails its check is corruption
//! (disk, memory, or a hand on the file), wherever it sits, and the entries after it
//! may be acknowledged writes.
//!
//! What it must not do: repair, skip or delete a bad entry: the store refuses to open,
//! and the history stays as it was for the operator to decide.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, RwLock};

use ::redb::{Database, ReadOnlyDatabase, ReadableDatabase, ReadableTable};

use super::snapshot::remove_chunks;
use super::{
    check_entry, redb_err, write_durably, Place, RedbStorage, LOG, META, SNAP_CHUNKS, SNAP_INDEX,
    STATE,
};
use crate::storage::StorageError;
use crate::txn::Zxid;

/// What `RedbStorage::open` found and repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Zxids of incomplete snapshots (chunks without an index record) that were deleted.
    pub incomplete_snapshots_removed: Vec<Zxid>,
}

/// redb's page cache. Its default (1 GiB) would hold the whole log and snapshots in
/// memory for nothing: the log is appended and read back only on recovery, SNAP and
/// old watch resumes, and the tree itself lives in memory already. Every page written
/// passes through it (snapshot chunks too), so it is always full: what a commit needs
/// again is the log's tail leaf and the branch pages above it, a few pages.
const CACHE_BYTES: usize = 8 << 20;

impl RedbStorage {
    /// Opens the store at `path`, creating it if absent: incomplete snapshots are
    /// deleted (reported, and logged with `tracing::warn`) and the log after the
    /// newest complete snapshot is validated. A bad entry there is
    /// Err(BadLogEntry) naming its zxid; nothing is removed.
    pub fn open(path: &Path) -> Result<(RedbStorage, OpenReport), StorageError> {
        let what = format!("open {}", path.display());
        let exists = path
            .try_exists()
            .map_err(|e| StorageError::Io(format!("{what}: {e}")))?;
        if !exists {
            create_whole(path)?;
        }
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(redb_err(&what))?;
        RedbStorage::recover(db, &what, Place::File(path.to_path_buf()))
    }

    /// `open` over another redb backend (a test's disk that crashes).
    #[cfg(test)]
    pub(crate) fn open_backend(
        backend: impl ::redb::StorageBackend,
    ) -> Result<(RedbStorage, OpenReport), StorageError> {
        let what = "open backend";
        let backend = std::sync::Arc::new(backend);
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create_with_backend(SharedBackend(backend.clone()))
            .map_err(redb_err(what))?;
        RedbStorage::recover(db, what, Place::Backend(backend))
    }

    /// What `open` does once redb has opened the file.
    fn recover(
        db: Database,
        what: &str,
        place: Place,
    ) -> Result<(RedbStorage, OpenReport), StorageError> {
        create_tables(&db, what)?;
        let report = OpenReport {
            incomplete_snapshots_removed: remove_incomplete_snapshots(&db)?,
        };
        if let Some((zxid, reason)) = find_bad_entry(&db)? {
            return Err(StorageError::BadLogEntry { zxid, reason });
        }
        let last_zxid = newest_zxid(&db)?;
        let store = RedbStorage {
            db: RwLock::new(db),
            last_zxid: AtomicU64::new(last_zxid),
            order_lock: Mutex::new(()),
            commits_total: AtomicU64::new(0),
            commit_seconds: crate::telemetry::metrics::backend_commit_histogram(),
            turns: Default::default(),
            place,
        };
        Ok((store, report))
    }
}

/// A test's backend, shared between redb and the store (which asks its length).
#[cfg(test)]
#[derive(Debug)]
struct SharedBackend<B>(std::sync::Arc<B>);

#[cfg(test)]
impl<B: ::redb::StorageBackend> ::redb::StorageBackend for SharedBackend<B> {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
}

/// Creates an empty store at `path` so that no crash can leave part of one there
/// (redb sizes a new file before it writes its header, and a file without a
/// header never opens again): the store is made beside it under a name of its
/// own, committed, renamed into place, and the rename synced in the directory.
fn create_whole(path: &Path) -> Result<(), StorageError> {
    let io = |e: std::io::Error| StorageError::Io(format!("create {}: {e}", path.display()));
    let mut creating = path.as_os_str().to_owned();
    creating.push(".creating");
    let creating = PathBuf::from(creating);
    match std::fs::remove_file(&creating) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let what = format!("create {}", creating.display());
    let db = Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(&creating)
        .map_err(redb_err(&what))?;
    create_tables(&db, &what)?;
    drop(db);
    std::fs::rename(&creating, path).map_err(io)?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

/// Creates the store's tables where missing, in one durable commit.
fn create_tables(db: &Database, what: &str) -> Result<(), StorageError> {
    write_durably(db, what, |wtx| {
        wtx.open_table(LOG).map_err(redb_err("create log"))?;
        wtx.open_table(META).map_err(redb_err("create meta"))?;
        wtx.open_table(STATE).map_err(redb_err("create state"))?;
        wtx.open_table(SNAP_CHUNKS)
            .map_err(redb_err("create chunks"))?;
        wtx.open_table(SNAP_INDEX)
            .map_err(redb_err("create index"))?;
        Ok(())
    })
}

/// Deletes chunks that have no index record (a save interrupted by a crash).
fn remove_incomplete_snapshots(db: &Database) -> Result<Vec<Zxid>, StorageError> {
    let what = "find incomplete snapshots";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let chunks = rtx.open_table(SNAP_CHUNKS).map_err(redb_err(what))?;
    let mut orphans = BTreeSet::new();
    for entry in chunks.range::<(u64, u32)>(..).map_err(redb_err(what))? {
        let zxid = entry.map_err(redb_err(what))?.0.value().0;
        if !orphans.contains(&zxid) && index.get(zxid).map_err(redb_err(what))?.is_none() {
            orphans.insert(zxid);
        }
    }
    drop((index, chunks, rtx));
    for &zxid in &orphans {
        tracing::warn!(zxid = format!("{zxid:#x}"), "removing incomplete snapshot");
        write_durably(db, "remove incomplete snapshot", |wtx| {
            remove_chunks(wtx, zxid)
        })?;
    }
    Ok(orphans.into_iter().collect())
}

/// Finds the first bad log entry after the newest complete snapshot: (key, reason).
fn find_bad_entry(db: &Database) -> Result<Option<(Zxid, String)>, StorageError> {
    let what = "validate log";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let start = index
        .last()
        .map_err(redb_err(what))?
        .map_or(0, |(k, _)| k.value());
    let log = rtx.open_table(LOG).map_err(redb_err(what))?;
    let mut prev: Option<Zxid> = None;
    for entry in log
        .range::<u64>((Bound::Excluded(start), Bound::Unbounded))
        .map_err(redb_err(what))?
    {
        let (key, value) = entry.map_err(redb_err(what))?;
        let key = key.value();
        if prev.is_some_and(|p| key <= p) {
            return Ok(Some((key, "keys do not ascend".into())));
        }
        if let Err(reason) = check_entry(key, value.value()) {
            return Ok(Some((key, reason)));
        }
        prev = Some(key);
    }
    Ok(None)
}

/// max(newest log zxid, newest snapshot zxid), 0 if both are empty.
fn newest_zxid(db: &Database) -> Result<Zxid, StorageError> {
    let what = "read last zxid";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let log = rtx.open_table(LOG).map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let log_last = log
        .last()
        .map_err(redb_err(what))?
        .map_or(0, |(k, _)| k.value());
    let snap_last = index
        .last()
        .map_err(redb_err(what))?
        .map_or(0, |(k, _)| k.value());
    Ok(log_last.max(snap_last))
}

/// What `RedbStorage::discard` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discarded {
    /// Where the old file was moved (None: there was no file).
    pub kept_at: Option<PathBuf>,
    /// The callers' named u64s (`Storage::set_u64`) read from the old file and written
    /// into the new one, before `set` was applied.
    pub carried: Vec<(String, u64)>,
    /// Why the old file's named u64s could not be read, if they could not.
    pub unreadable: Option<String>,
}

impl RedbStorage {
    /// Moves the store at `path` aside (renamed to `<name>.discarded-<suffix>`, never
    /// deleted) and creates an empty store in its place that holds the old file's
    /// named u64s (as far as they can be read) with `set` applied over them, durably.
    /// Err(Misuse) if the store is open in another process or the new name is taken.
    pub fn discard(
        path: &Path,
        suffix: &str,
        set: &[(&str, u64)],
    ) -> Result<Discarded, StorageError> {
        let mut read = if path.exists() {
            read_meta_read_only(path)?
        } else {
            Ok(Vec::new())
        };
        let kept_at = if path.exists() {
            let mut name = path.file_name().unwrap_or_default().to_os_string();
            name.push(format!(".discarded-{suffix}"));
            let aside = path.with_file_name(name);
            if aside.exists() {
                return Err(StorageError::Misuse(format!(
                    "{} exists already",
                    aside.display()
                )));
            }
            std::fs::rename(path, &aside).map_err(|e| {
                StorageError::Io(format!(
                    "rename {} to {}: {e}",
                    path.display(),
                    aside.display()
                ))
            })?;
            if read.is_err() {
                // Not readable in place (redb needs to repair it after a crash):
                // let it repair the copy set aside, which it would do at start-up too.
                read = read_meta_repairing(&aside);
            }
            Some(aside)
        } else {
            None
        };
        let (carried, unreadable) = match read {
            Ok(meta) => (meta, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let (store, _) = RedbStorage::open(path)?;
        store.write("discard", |wtx| {
            let mut meta = wtx.open_table(META).map_err(redb_err("discard"))?;
            for (key, value) in &carried {
                meta.insert(key.as_str(), *value)
                    .map_err(redb_err("discard"))?;
            }
            for (key, value) in set {
                meta.insert(*key, *value).map_err(redb_err("discard"))?;
            }
            Ok(())
        })?;
        Ok(Discarded {
            kept_at,
            carried,
            unreadable,
        })
    }
}

/// The named u64s of a store, read without changing the file. The outer Err: the
/// store is open in another process (nothing may be done); the inner: unreadable.
#[allow(clippy::type_complexity)]
fn read_meta_read_only(
    path: &Path,
) -> Result<Result<Vec<(String, u64)>, StorageError>, StorageError> {
    match ReadOnlyDatabase::open(path) {
        Ok(db) => Ok(read_meta(&db)),
        Err(::redb::DatabaseError::DatabaseAlreadyOpen) => Err(StorageError::Misuse(format!(
            "{} is open in another process: stop that server first",
            path.display()
        ))),
        Err(e) => Ok(Err(redb_err("open read-only")(e))),
    }
}

/// The named u64s of a store that redb may have to repair first.
fn read_meta_repairing(path: &Path) -> Result<Vec<(String, u64)>, StorageError> {
    let db = Database::open(path).map_err(redb_err("open discarded store"))?;
    read_meta(&db)
}

fn read_meta(db: &impl ReadableDatabase) -> Result<Vec<(String, u64)>, StorageError> {
    let what = "read meta";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let meta = match rtx.open_table(META) {
        Ok(t) => t,
        Err(::redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(redb_err(what)(e)),
    };
    let mut out = Vec::new();
    for entry in meta.range::<&str>(..).map_err(redb_err(what))? {
        let (key, value) = entry.map_err(redb_err(what))?;
        out.push((key.value().to_string(), value.value()));
    }
    Ok(out)
}
