//! `concord restore FILE --data-dir DIR`: makes a new data folder from a backup
//! file (`concordctl snapshot save`), from which a server starts and serves the
//! restored tree. The file is checked whole first (header crc, snapshot crc, and a
//! full decode of the tree, which must agree with the header); a used folder is
//! refused. The store is written beside its final name and renamed into place, so
//! a failed restore leaves no `concord.redb` behind.
//!
//! ```text
//!   FILE ─▶ backup::inspect (header, crc) ─▶ DataTree::decode_snapshot (every check)
//!        ─▶ DIR/concord.redb.restoring: save_snapshot(zxid), epochs = zxid's epoch
//!        ─▶ rename to DIR/concord.redb ─▶ fsync DIR
//! ```
//!
//! The new store holds the snapshot only (an empty log starting at its zxid) and
//! the epochs of its zxid, as a server that had just written that snapshot would;
//! it carries no must-resync marker, so every member restored from the same file
//! votes at once and they elect a leader among equals.
//!
//! What it must not do: write into a folder that holds anything, or accept a file
//! that fails any check.

use std::path::{Path, PathBuf};

use concord_proto::backup::{self, BackupError, HEADER_BYTES};

use super::recovery::{ACCEPTED_EPOCH, CURRENT_EPOCH, STORE_FILE};
use crate::storage::{RedbStorage, Storage};
use crate::tree::DataTree;
use crate::txn::{zxid_epoch, Zxid};

/// Why a restore did not happen. `exit_code` tells them apart for scripts.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The backup file cannot be read.
    #[error("cannot read {}: {source}", .file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    /// The file is not a backup, or fails a check: nothing was written.
    #[error("{}: {reason}; nothing was written", .file.display())]
    BadBackup { file: PathBuf, reason: String },
    /// The data folder holds something already.
    #[error("{} is not empty (it holds {entry:?}): restore makes a new data folder and writes into an empty or missing one only", .dir.display())]
    NotEmpty { dir: PathBuf, entry: String },
    /// Creating or writing the data folder failed (a half-written store is removed).
    #[error("cannot write the data folder {}: {reason}", .dir.display())]
    Write { dir: PathBuf, reason: String },
}

impl RestoreError {
    /// The process exit status for it: 1 reading or writing failed, 3 the file is
    /// not a good backup, 4 the data folder is not empty (2 is a usage error).
    pub fn exit_code(&self) -> u8 {
        match self {
            RestoreError::Read { .. } | RestoreError::Write { .. } => 1,
            RestoreError::BadBackup { .. } => 3,
            RestoreError::NotEmpty { .. } => 4,
        }
    }
}

/// What a restore wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreReport {
    /// The restored state is the one after every txn up to this zxid.
    pub zxid: Zxid,
    /// Nodes in the restored tree, the root included.
    pub node_count: u64,
    /// Sessions restored (each gets a fresh full TTL when the server starts).
    pub session_count: u64,
    /// The store written.
    pub store: PathBuf,
}

/// Restores `file` into the new data folder `data_dir` (see the module docs).
pub fn restore(file: &Path, data_dir: &Path) -> Result<RestoreReport, RestoreError> {
    check_empty(data_dir)?;
    let bytes = std::fs::read(file).map_err(|source| RestoreError::Read {
        file: file.to_path_buf(),
        source,
    })?;
    let bad = |reason: String| RestoreError::BadBackup {
        file: file.to_path_buf(),
        reason,
    };
    let info = backup::inspect(&bytes[..]).map_err(|e: BackupError| bad(e.to_string()))?;
    let snapshot = &bytes[HEADER_BYTES..];
    let tree = DataTree::decode_snapshot(snapshot)
        .map_err(|e| bad(format!("the snapshot does not decode: {e}")))?;
    let header = info.header;
    let found = (
        tree.last_zxid(),
        tree.node_count() as u64,
        tree.sessions().count() as u64,
    );
    if found != (header.zxid, header.node_count, header.session_count) {
        return Err(bad(format!(
            "the header says zxid {:#x}, {} nodes, {} sessions; the snapshot holds zxid {:#x}, {} nodes, {} sessions",
            header.zxid, header.node_count, header.session_count, found.0, found.1, found.2
        )));
    }
    let store = write_store(data_dir, header.zxid, snapshot)?;
    Ok(RestoreReport {
        zxid: header.zxid,
        node_count: header.node_count,
        session_count: header.session_count,
        store,
    })
}

/// Ok if `dir` is missing or empty.
fn check_empty(dir: &Path) -> Result<(), RestoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(RestoreError::Write {
                dir: dir.to_path_buf(),
                reason: e.to_string(),
            })
        }
    };
    if let Some(entry) = entries.flatten().next() {
        return Err(RestoreError::NotEmpty {
            dir: dir.to_path_buf(),
            entry: entry.file_name().to_string_lossy().into_owned(),
        });
    }
    Ok(())
}

/// Writes the store beside its final name, then renames it into place.
fn write_store(dir: &Path, zxid: Zxid, snapshot: &[u8]) -> Result<PathBuf, RestoreError> {
    let failed = |reason: String| RestoreError::Write {
        dir: dir.to_path_buf(),
        reason,
    };
    std::fs::create_dir_all(dir).map_err(|e| failed(e.to_string()))?;
    let store = dir.join(STORE_FILE);
    let temp = dir.join(format!("{STORE_FILE}.restoring"));
    let written = (|| {
        let (storage, _) = RedbStorage::open(&temp).map_err(|e| e.to_string())?;
        storage
            .save_snapshot(zxid, snapshot)
            .map_err(|e| e.to_string())?;
        let epoch = u64::from(zxid_epoch(zxid));
        for key in [ACCEPTED_EPOCH, CURRENT_EPOCH] {
            storage.set_u64(key, epoch).map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    })();
    let renamed = written.and_then(|()| {
        std::fs::rename(&temp, &store).map_err(|e| e.to_string())?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| e.to_string())
    });
    if let Err(reason) = renamed {
        let _ = std::fs::remove_file(&temp);
        return Err(failed(reason));
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::replica::Replica;

    /// A backup file of `tree`, as concordctl writes it.
    fn backup_of(tree: &DataTree) -> Vec<u8> {
        let header = backup::BackupHeader {
            zxid: tree.last_zxid(),
            node_count: tree.node_count() as u64,
            session_count: tree.sessions().count() as u64,
            server_id: 1,
        };
        let mut out = header.encode().to_vec();
        out.extend_from_slice(&tree.encode_snapshot().unwrap());
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restored_folder_starts_with_the_tree_and_a_used_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().join("old"),
            ..Config::default()
        };
        let replica = Replica::start(&config).await.unwrap();
        let op = crate::txn::TxnOp::Create(crate::txn::CreateOp {
            path: "/a".into(),
            data: bytes::Bytes::from_static(b"x"),
            mode: crate::txn::CreateMode::Persistent,
            ttl_ms: 0,
            null_data: false,
        });
        assert!(replica.submit(0, 0, op).await.unwrap().result.is_ok());
        let tree = replica.read(Clone::clone);
        replica.shutdown();
        let file = dir.path().join("backup");
        std::fs::write(&file, backup_of(&tree)).unwrap();

        let new = dir.path().join("new");
        let report = restore(&file, &new).unwrap();
        assert_eq!(report.zxid, tree.last_zxid());
        assert!(!new.join("concord.redb.restoring").exists());
        let e = restore(&file, &new).unwrap_err();
        assert_eq!(e.exit_code(), 4, "{e}");
        assert!(e.to_string().contains("not empty"), "{e}");

        let config = Config {
            data_dir: new,
            ..Config::default()
        };
        let restored = Replica::start(&config).await.unwrap();
        assert_eq!(restored.read(|t| t.digest()), tree.digest());
        assert!(restored.applied_zxid() >= tree.last_zxid());
        restored.shutdown();

        // One flipped byte anywhere: refused, nothing written.
        let mut bad = std::fs::read(&file).unwrap();
        let at = bad.len() / 2;
        bad[at] ^= 1;
        std::fs::write(&file, &bad).unwrap();
        let empty = dir.path().join("empty");
        let e = restore(&file, &empty).unwrap_err();
        assert_eq!(e.exit_code(), 3, "{e}");
        assert!(e.to_string().contains("damaged"), "{e}");
        assert!(!empty.join("concord.redb").exists());
    }
}
