//! Backups: `Client::save_snapshot` streams `Cluster/Snapshot` into a backup file,
//! atomically (a temporary file beside it, fsynced, then renamed into place and
//! the folder fsynced), checking the snapshot's crc as it arrives; `inspect` checks
//! a backup file (the format is `concord_proto::backup`'s).
//!
//! ```text
//!   Cluster/Snapshot: info, data, data, ... ─▶ .NAME.tmp-PID (header, then the bytes)
//!        SnapshotCheck (magic, zxid, crc) ─▶ fsync ─▶ rename to NAME ─▶ fsync folder
//! ```
//!
//! What it must not do: leave a partial file under the final name, or hold more
//! than one chunk of the snapshot in memory.

use std::path::{Path, PathBuf};

use concord_proto::v1::{cluster_client::ClusterClient, SnapshotRequest};
use tokio::io::AsyncWriteExt;

pub use concord_proto::backup::{inspect, BackupError, BackupHeader, BackupInfo, SnapshotCheck};

use crate::client::{read_err, Client};
use crate::error::Error;
use crate::{ErrorCode, ReadOptions};

/// An error about the local file (`path`).
fn file_err(path: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::client(
        ErrorCode::BadArguments,
        format!("{what} {}: {e}", path.display()),
    )
}

/// The snapshot the server sent does not check out.
fn stream_err(e: impl std::fmt::Display) -> Error {
    Error::client(
        ErrorCode::Internal,
        format!("the snapshot the server sent fails its check: {e}"),
    )
}

/// Where the file is written before it is renamed to `path`.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "backup".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

impl Client {
    /// Streams a snapshot of the server's applied state into the backup file
    /// `path` (replaced if it exists, only once the new one is whole and durable).
    /// The server first waits until it has applied every zxid this client has
    /// seen (`read.min_zxid` too), or with `read.linearizable` the leader's
    /// commit point. Needs an admin. Returns what the file holds.
    pub async fn save_snapshot(&self, path: &Path, read: ReadOptions) -> Result<BackupInfo, Error> {
        let temp = temp_path(path);
        let request = SnapshotRequest {
            min_zxid: read.min_zxid.max(self.last_seen_zxid()),
            linearizable: read.linearizable,
        };
        let written = self.write_snapshot(&temp, request).await;
        let info = match written {
            Ok(info) => info,
            Err(e) => {
                let _ = tokio::fs::remove_file(&temp).await;
                return Err(e);
            }
        };
        if let Err(e) = tokio::fs::rename(&temp, path).await {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(file_err(path, "cannot rename the temporary file to", e));
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // The rename is durable once the folder is.
        let synced = tokio::task::spawn_blocking(move || std::fs::File::open(&dir)?.sync_all())
            .await
            .map_err(|e| file_err(path, "cannot sync the folder of", e))?;
        synced.map_err(|e| file_err(path, "cannot sync the folder of", e))?;
        Ok(info)
    }

    /// Writes the backup into `temp` (created new), fsynced.
    async fn write_snapshot(
        &self,
        temp: &Path,
        request: SnapshotRequest,
    ) -> Result<BackupInfo, Error> {
        let mut stream = ClusterClient::new(self.link().clone())
            .max_decoding_message_size(4 << 20)
            .snapshot(request)
            .await
            .map_err(read_err)?
            .into_inner();
        let first = stream.message().await.map_err(read_err)?;
        let Some(info) = first.and_then(|m| m.info) else {
            return Err(stream_err("the first message names no snapshot"));
        };
        self.saw(&info.header);
        let header = BackupHeader {
            zxid: info.zxid,
            node_count: info.node_count,
            session_count: info.session_count,
            server_id: info.server_id,
        };
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(temp)
            .await
            .map_err(|e| file_err(temp, "cannot create", e))?;
        let write = |e| file_err(temp, "cannot write", e);
        file.write_all(&header.encode()).await.map_err(write)?;
        let mut check = SnapshotCheck::new(header.zxid);
        while let Some(chunk) = stream.message().await.map_err(read_err)? {
            check.update(&chunk.data).map_err(stream_err)?;
            file.write_all(&chunk.data).await.map_err(write)?;
        }
        let (snapshot_bytes, crc32) = check.finish().map_err(stream_err)?;
        file.flush().await.map_err(write)?;
        file.sync_all().await.map_err(write)?;
        Ok(BackupInfo {
            header,
            snapshot_bytes,
            crc32,
        })
    }
}
