//! The backup file `concordctl snapshot save` writes and `concord restore` reads: a
//! small header naming what the snapshot holds, then the snapshot exactly as
//! `Cluster/Snapshot` streamed it (the server's own encoding, with its crc32).
//!
//! ```text
//!   "CNCDBKUP" | version u8 (1) | zxid u64 | node_count u64 | session_count u64
//!            | server_id u64 | crc32 of the 41 bytes before it      (all LE)
//!   snapshot: "CNCDSNAP" | format u8 | varint zxid | ... | crc32 (LE) of all before it
//! ```
//!
//! The header has a crc of its own; the snapshot's crc covers the state. Checking a
//! file (`inspect`, `SnapshotCheck`) reads it once, in pieces, holding 4 bytes back.
//! The node count is not re-derived here (that needs the tree's decoder: `concord
//! restore` decodes the whole snapshot and compares).
//!
//! What it must not do: interpret the snapshot beyond its magic, zxid and crc.

use std::io::Read;

/// First bytes of a backup file.
pub const MAGIC: &[u8; 8] = b"CNCDBKUP";
/// The header's version.
pub const VERSION: u8 = 1;
/// The header's length in bytes.
pub const HEADER_BYTES: usize = 45;
/// First bytes of the snapshot after the header.
pub const SNAPSHOT_MAGIC: &[u8; 8] = b"CNCDSNAP";

/// What the header says the snapshot holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupHeader {
    /// The state is the one after every txn up to this zxid.
    pub zxid: u64,
    /// Nodes in the tree, the root included.
    pub node_count: u64,
    /// Sessions in the snapshot.
    pub session_count: u64,
    /// The server that took it.
    pub server_id: u64,
}

/// A backup file that checks out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupInfo {
    /// What the header says (its crc checked).
    pub header: BackupHeader,
    /// Bytes of the snapshot (the file less its header).
    pub snapshot_bytes: u64,
    /// The snapshot's crc32 (its last 4 bytes), which matched.
    pub crc32: u32,
}

/// Why a file is not a good backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupError {
    /// Reading or writing failed.
    Io(String),
    /// Not a Concord backup file (wrong magic, or shorter than its header).
    NotABackup(String),
    /// A header version this build does not know.
    UnknownVersion(u8),
    /// The header or the snapshot fails its check: the file is damaged.
    Corrupt(String),
}

impl std::fmt::Display for BackupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackupError::Io(m) => write!(f, "{m}"),
            BackupError::NotABackup(m) => write!(f, "not a Concord backup file: {m}"),
            BackupError::UnknownVersion(v) => write!(
                f,
                "backup file version {v} is unknown to this build (it reads version {VERSION})"
            ),
            BackupError::Corrupt(m) => write!(f, "the backup file is damaged: {m}"),
        }
    }
}

impl std::error::Error for BackupError {}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

impl BackupHeader {
    /// The header's bytes, its crc last.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[..8].copy_from_slice(MAGIC);
        out[8] = VERSION;
        let fields = [
            self.zxid,
            self.node_count,
            self.session_count,
            self.server_id,
        ];
        for (i, v) in fields.iter().enumerate() {
            out[9 + 8 * i..17 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32fast::hash(&out[..HEADER_BYTES - 4]);
        out[HEADER_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a header, checking its magic, version and crc.
    pub fn decode(bytes: &[u8]) -> Result<BackupHeader, BackupError> {
        if bytes.len() < HEADER_BYTES || !bytes.starts_with(MAGIC) {
            let what = if bytes.starts_with(SNAPSHOT_MAGIC) {
                "it is a bare snapshot, without the backup header".to_string()
            } else if bytes.len() < HEADER_BYTES && MAGIC.starts_with(&bytes[..bytes.len().min(8)])
            {
                format!("only {} bytes", bytes.len())
            } else {
                "bad magic".to_string()
            };
            return Err(BackupError::NotABackup(what));
        }
        if bytes[8] != VERSION {
            return Err(BackupError::UnknownVersion(bytes[8]));
        }
        let want = u32::from_le_bytes([bytes[41], bytes[42], bytes[43], bytes[44]]);
        if crc32fast::hash(&bytes[..HEADER_BYTES - 4]) != want {
            return Err(BackupError::Corrupt("header crc mismatch".into()));
        }
        Ok(BackupHeader {
            zxid: u64_at(bytes, 9),
            node_count: u64_at(bytes, 17),
            session_count: u64_at(bytes, 25),
            server_id: u64_at(bytes, 33),
        })
    }
}

/// Checks a snapshot fed in pieces: its magic, that its zxid is the header's, and
/// its crc32 trailer. Holds at most 4 bytes back (the candidate trailer) and the
/// first 19 (magic, format, zxid).
#[derive(Debug)]
pub struct SnapshotCheck {
    zxid: u64,
    crc: crc32fast::Hasher,
    /// The first bytes, until the zxid is read.
    head: Vec<u8>,
    head_checked: bool,
    /// The last 4 bytes seen (the trailer, once the input ends).
    tail: Vec<u8>,
    bytes: u64,
}

/// Magic, format byte and the longest varint u64.
const SNAPSHOT_HEAD_BYTES: usize = 8 + 1 + 10;

impl SnapshotCheck {
    /// A check of a snapshot that must be at `zxid`.
    pub fn new(zxid: u64) -> SnapshotCheck {
        SnapshotCheck {
            zxid,
            crc: crc32fast::Hasher::new(),
            head: Vec::with_capacity(SNAPSHOT_HEAD_BYTES),
            head_checked: false,
            tail: Vec::with_capacity(8),
            bytes: 0,
        }
    }

    /// Feeds the next bytes; fails as soon as the head is wrong.
    pub fn update(&mut self, data: &[u8]) -> Result<(), BackupError> {
        self.bytes += data.len() as u64;
        if !self.head_checked {
            let want = SNAPSHOT_HEAD_BYTES - self.head.len();
            self.head.extend_from_slice(&data[..data.len().min(want)]);
            self.check_head(false)?;
        }
        // Everything but the last 4 bytes seen goes into the crc.
        if data.len() >= 4 {
            self.crc.update(&self.tail);
            let (body, last) = data.split_at(data.len() - 4);
            self.crc.update(body);
            self.tail.clear();
            self.tail.extend_from_slice(last);
        } else {
            self.tail.extend_from_slice(data);
            let over = self.tail.len().saturating_sub(4);
            self.crc.update(&self.tail[..over]);
            self.tail.drain(..over);
        }
        Ok(())
    }

    /// Checks the head once enough of it is in (or, `at_end`, with what there is).
    fn check_head(&mut self, at_end: bool) -> Result<(), BackupError> {
        if self.head.len() >= 8 && !self.head.starts_with(SNAPSHOT_MAGIC) {
            return Err(BackupError::Corrupt("the snapshot has a bad magic".into()));
        }
        if self.head.len() < 10 {
            if at_end {
                return Err(BackupError::Corrupt(format!(
                    "the snapshot is only {} bytes",
                    self.bytes
                )));
            }
            return Ok(());
        }
        match read_varint(&self.head[9..]) {
            Some(zxid) if zxid == self.zxid => {
                self.head_checked = true;
                Ok(())
            }
            Some(zxid) => Err(BackupError::Corrupt(format!(
                "the header says zxid {:#x}, the snapshot {zxid:#x}",
                self.zxid
            ))),
            None if at_end || self.head.len() == SNAPSHOT_HEAD_BYTES => Err(BackupError::Corrupt(
                "the snapshot's zxid does not decode".into(),
            )),
            None => Ok(()),
        }
    }

    /// The input ended: the last 4 bytes must be the crc of all before them.
    /// Returns (snapshot bytes, crc).
    pub fn finish(mut self) -> Result<(u64, u32), BackupError> {
        if !self.head_checked {
            self.check_head(true)?;
        }
        if self.tail.len() < 4 {
            return Err(BackupError::Corrupt("the snapshot is truncated".into()));
        }
        let want = u32::from_le_bytes([self.tail[0], self.tail[1], self.tail[2], self.tail[3]]);
        if self.crc.finalize() != want {
            return Err(BackupError::Corrupt(
                "snapshot crc mismatch (truncated or altered)".into(),
            ));
        }
        Ok((self.bytes, want))
    }
}

/// A postcard (LEB128) varint u64 at the start of `bytes`, if complete.
fn read_varint(bytes: &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for (i, b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Reads a whole backup file from `reader` and checks it (header, snapshot head,
/// crc), 64 KiB at a time.
pub fn inspect(mut reader: impl Read) -> Result<BackupInfo, BackupError> {
    let io = |e: std::io::Error| BackupError::Io(e.to_string());
    let mut head = [0u8; HEADER_BYTES];
    let mut got = 0;
    while got < HEADER_BYTES {
        let n = reader.read(&mut head[got..]).map_err(io)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let header = BackupHeader::decode(&head[..got])?;
    let mut check = SnapshotCheck::new(header.zxid);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        check.update(&buf[..n])?;
    }
    let (snapshot_bytes, crc32) = check.finish()?;
    Ok(BackupInfo {
        header,
        snapshot_bytes,
        crc32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot-shaped body at `zxid` (magic, format, varint, body, crc).
    fn snapshot(zxid: u64, body: &[u8]) -> Vec<u8> {
        let mut out = SNAPSHOT_MAGIC.to_vec();
        out.push(2);
        let mut z = zxid;
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.extend_from_slice(body);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn file(zxid: u64) -> Vec<u8> {
        let header = BackupHeader {
            zxid,
            node_count: 3,
            session_count: 1,
            server_id: 2,
        };
        let mut out = header.encode().to_vec();
        out.extend_from_slice(&snapshot(zxid, &[5u8; 1000]));
        out
    }

    #[test]
    fn a_good_file_checks_out_fed_in_any_pieces() {
        let zxid = (7u64 << 40) | 12345;
        let bytes = file(zxid);
        let info = inspect(&bytes[..]).unwrap();
        assert_eq!(info.header.zxid, zxid);
        assert_eq!(info.header.node_count, 3);
        assert_eq!(info.snapshot_bytes as usize, bytes.len() - HEADER_BYTES);
        for piece in [1, 2, 3, 5, 64, 4096] {
            let mut check = SnapshotCheck::new(zxid);
            for p in bytes[HEADER_BYTES..].chunks(piece) {
                check.update(p).unwrap();
            }
            assert_eq!(check.finish().unwrap().1, info.crc32, "pieces of {piece}");
        }
    }

    #[test]
    fn every_damaged_byte_is_caught() {
        let bytes = file(99);
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(
                inspect(&bad[..]).is_err(),
                "byte {at} flipped went unnoticed"
            );
        }
        let cut = &bytes[..bytes.len() - 1];
        assert!(matches!(inspect(cut), Err(BackupError::Corrupt(_))));
        let bare = snapshot(99, b"x");
        let e = inspect(&bare[..]).unwrap_err();
        assert!(e.to_string().contains("bare snapshot"), "{e}");
        assert!(matches!(
            inspect(&b"hello"[..]),
            Err(BackupError::NotABackup(_))
        ));
    }
}
