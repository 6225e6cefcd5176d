//! Snapshot encoding of a DataTree: every node, every session, and last_zxid.
//!
//! ```text
//!   "CNCDSNAP" | format u8 | postcard(last_zxid) | postcard(sessions)
//!            | postcard(grants, seeded)           (formats 2 and 3)
//!            | (node record, null data bool (format 3 only))* (postcard, pre-order)
//!            | crc32 (LE) of all before it
//! ```
//!
//! Format 2 records each session's owner, with each remembered outcome the
//! fingerprint of its request, and the grant table (`security::acl`). Format 3 adds,
//! after each node record, whether the node's data is null (ZooKeeper's null data).
//! A tree with a null node is written in format 3, any other in format 2, which
//! servers from before null data read (a SNAP during a rolling upgrade). Format 1
//! (still read) has no owners, fingerprints or grants: its sessions decode with no
//! owner (admins only) and fingerprint 0 (unknown), and its grant table is empty
//! (the next seed fills it).
//!
//! Nodes are written in pre-order from the root, siblings sorted, each as (depth,
//! name, data, stat, mode, ttl_ms): a name instead of a full path keeps deep trees
//! small, and the order makes the bytes the same on every server. Records run to the
//! crc, so no count is needed. The sessions' ephemeral sets and the reap index are
//! not written: decoding rebuilds them from the records, and checks that everything
//! agrees (paths valid, no duplicates, each num_children equal to the records under
//! it, every ephemeral owned by a live session, no child under an ephemeral).
//!
//! `encode_snapshot_chunks` writes the same bytes in chunks, hashing as it goes, so
//! `Cluster/Snapshot` streams a snapshot holding one chunk at a time (sessions are
//! written one by one: postcard's sequence is its length, then its elements).
//!
//! A session's remembered outcomes are written through a flat mirror of `TreeError`
//! (the chain of Multi op indexes, then the leaf error), so a hostile input cannot
//! nest errors deep enough to overflow the stack while decoding.
//!
//! What it must not do: panic or allocate without bound on garbage input.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::ops::is_reap_candidate;
use super::path;
use super::stored::StoredOutcome;
use super::{DataTree, Node, Nodes, Recent, SessionEntry, Stat, SESSION_OWNER_BYTES_MAX};
use crate::security::{Grant, Grantee, Grants, Perms, GRANTS_MAX};
use crate::txn::{CreateMode, Zxid};

/// First bytes of every snapshot.
const MAGIC: &[u8; 8] = b"CNCDSNAP";
/// The format of snapshots from before sessions had owners and the tree had grants
/// (read, never written).
const FORMAT_V1: u8 = 1;
/// Sessions with owners and fingerprints, then the grant table: the format written
/// for a tree without null data.
const FORMAT_V2: u8 = 2;
/// Format 2 with each node's null data flag: written for a tree with null data.
const FORMAT_V3: u8 = 3;
/// Magic, format byte.
const HEADER_BYTES: usize = MAGIC.len() + 1;
/// The crc32 trailer.
const CRC_BYTES: usize = 4;

/// A snapshot could not be decoded, or a tree could not be encoded whole.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("malformed snapshot: {0}")]
    Malformed(String),
    /// The tree breaks an invariant (or the encoder failed): a snapshot of it would
    /// not hold the whole state, so none is written.
    #[error("cannot encode a snapshot: {0}")]
    Encode(String),
    /// The receiver of a chunked encoding went away (`encode_snapshot_chunks`).
    #[error("snapshot stream stopped: {0}")]
    Stopped(String),
}

fn encode_failed(e: postcard::Error) -> SnapshotError {
    SnapshotError::Encode(e.to_string())
}

fn malformed(what: impl Into<String>) -> SnapshotError {
    SnapshotError::Malformed(what.into())
}

impl From<postcard::Error> for SnapshotError {
    fn from(e: postcard::Error) -> Self {
        malformed(e.to_string())
    }
}

/// A session as format 2 writes it (its ephemerals are rebuilt from the nodes).
#[derive(Serialize, Deserialize)]
struct SessionRecord {
    id: u64,
    ttl_ms: i64,
    owner: String,
    /// (request id, fingerprint, outcome), oldest first.
    recent: Vec<(u64, u64, StoredOutcome)>,
}

impl SessionRecord {
    /// Session `id` as format 2 writes it.
    fn of(id: u64, s: &SessionEntry) -> SessionRecord {
        SessionRecord {
            id,
            ttl_ms: s.ttl_ms,
            owner: s.owner.clone(),
            recent: s
                .recent
                .iter()
                .map(|r| (r.request_id, r.fingerprint, StoredOutcome::from(&r.result)))
                .collect(),
        }
    }
}

/// A session as format 1 wrote it.
#[derive(Deserialize)]
struct SessionRecordV1 {
    id: u64,
    ttl_ms: i64,
    recent: Vec<(u64, StoredOutcome)>,
}

impl From<SessionRecordV1> for SessionRecord {
    fn from(v1: SessionRecordV1) -> Self {
        SessionRecord {
            id: v1.id,
            ttl_ms: v1.ttl_ms,
            owner: String::new(),
            recent: v1
                .recent
                .into_iter()
                .map(|(request_id, outcome)| (request_id, 0, outcome))
                .collect(),
        }
    }
}

/// A node as written: its depth below the root and its name locate it.
#[derive(Serialize, Deserialize)]
struct NodeRecord<'a> {
    depth: u32,
    name: &'a str,
    #[serde(with = "serde_bytes_compat")]
    data: Bytes,
    stat: Stat,
    mode: CreateMode,
    ttl_ms: i64,
}

/// `Bytes` as postcard bytes (length then raw bytes), decoded by copy.
mod serde_bytes_compat {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(data: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(data)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let raw: &'de [u8] = Deserialize::deserialize(d)?;
        Ok(Bytes::copy_from_slice(raw))
    }
}

/// Lets postcard append to a borrowed Vec, so an error does not lose the buffer.
struct Sink<'a>(&'a mut Vec<u8>);

impl Extend<u8> for Sink<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), postcard::Error> {
    postcard::to_extend(value, Sink(out)).map(|_| ())
}

/// Where an encoding goes: records accumulate in `buf`, and once it holds
/// `chunk_bytes` they are hashed and handed to `emit` as one chunk. The last chunk
/// ends with the crc32 of every byte before it, so the chunks put together are
/// exactly `encode_snapshot`'s bytes.
struct Chunks<'e> {
    buf: Vec<u8>,
    chunk_bytes: usize,
    crc: crc32fast::Hasher,
    emit: &'e mut dyn FnMut(Vec<u8>) -> Result<(), SnapshotError>,
}

impl Chunks<'_> {
    /// Appends one value; hands the buffer over once it is a chunk's worth.
    fn put<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SnapshotError> {
        put(&mut self.buf, value).map_err(encode_failed)?;
        if self.buf.len() >= self.chunk_bytes {
            let full = std::mem::replace(&mut self.buf, Vec::with_capacity(self.chunk_bytes));
            self.crc.update(&full);
            (self.emit)(full)?;
        }
        Ok(())
    }

    /// Hands over what is left, with the crc trailer.
    fn finish(mut self) -> Result<(), SnapshotError> {
        self.crc.update(&self.buf);
        let crc = self.crc.finalize();
        self.buf.extend_from_slice(&crc.to_le_bytes());
        (self.emit)(self.buf)
    }
}

impl DataTree {
    /// Encodes the whole replicated state. Deterministic: equal trees give equal bytes.
    /// Fails, rather than write a partial snapshot, when a node is not reachable from
    /// the root (a broken invariant) or the encoder fails.
    pub fn encode_snapshot(&self) -> Result<Vec<u8>, SnapshotError> {
        let mut out = Vec::new();
        let mut whole = |bytes: Vec<u8>| {
            if out.is_empty() {
                out = bytes;
            } else {
                out.extend_from_slice(&bytes);
            }
            Ok(())
        };
        let capacity = 64 * self.nodes.len() + 64;
        self.encode_snapshot_chunked(usize::MAX, capacity, &mut whole)?;
        Ok(out)
    }

    /// Encodes the same bytes as `encode_snapshot`, handing them to `emit` in chunks
    /// of about `chunk_bytes` (each at most one record more), so a caller can stream
    /// a snapshot holding only a chunk at a time. An error from `emit` stops the
    /// encoding and is returned. A tree that cannot be encoded whole fails after
    /// some chunks went out: the receiver must not use what it got (the crc is in
    /// the last chunk only).
    pub fn encode_snapshot_chunks(
        &self,
        chunk_bytes: usize,
        emit: &mut dyn FnMut(Vec<u8>) -> Result<(), SnapshotError>,
    ) -> Result<(), SnapshotError> {
        let chunk_bytes = chunk_bytes.max(1);
        self.encode_snapshot_chunked(chunk_bytes, chunk_bytes.saturating_add(1024), emit)
    }

    fn encode_snapshot_chunked(
        &self,
        chunk_bytes: usize,
        capacity: usize,
        emit: &mut dyn FnMut(Vec<u8>) -> Result<(), SnapshotError>,
    ) -> Result<(), SnapshotError> {
        let mut out = Chunks {
            buf: Vec::with_capacity(capacity),
            chunk_bytes,
            crc: crc32fast::Hasher::new(),
            emit,
        };
        let format = self.snapshot_format();
        let null_data = format == FORMAT_V3;
        out.buf.extend_from_slice(MAGIC);
        out.buf.push(format);
        out.put(&self.last_zxid)?;
        // A sequence is its length then its elements (postcard), written one by one.
        out.put(&self.sessions.len())?;
        for (id, s) in self.sessions.iter() {
            out.put(&SessionRecord::of(*id, s))?;
        }
        let grants: Vec<Grant> = self.grants.all().collect();
        let seeded: Vec<&(String, Grantee)> = self.grants.seeded().collect();
        out.put(&(grants, seeded))?;
        let written = self.encode_nodes(&mut out, null_data)?;
        if written != self.nodes.len() {
            return Err(SnapshotError::Encode(format!(
                "{written} of {} nodes are reachable from the root",
                self.nodes.len()
            )));
        }
        out.finish()
    }

    /// Writes every node reachable from the root in pre-order, each with its null
    /// data flag if `null_data` (format 3); returns how many.
    fn encode_nodes(&self, out: &mut Chunks<'_>, null_data: bool) -> Result<usize, SnapshotError> {
        let Some(root) = self.nodes.get("/") else {
            return Ok(0);
        };
        let put = |out: &mut Chunks<'_>, record: NodeRecord, node: &Node| {
            out.put(&record)?;
            if null_data {
                out.put(&node.null_data)?;
            }
            Ok::<_, SnapshotError>(())
        };
        put(out, record(0, "", root, 0), root)?;
        let mut written = 1;
        let mut stack = vec![("/".to_string(), self.nodes.children("/", ""))];
        loop {
            let depth = u32::try_from(stack.len()).unwrap_or(u32::MAX);
            let Some((dir, children)) = stack.last_mut() else {
                break;
            };
            let Some((name, child)) = children.next() else {
                stack.pop();
                continue;
            };
            // Its path only where it is needed: for the TTL, or to go down.
            let child_path =
                (child.mode.is_ttl() || child.has_children()).then(|| path::join(dir, name));
            let ttl_ms = child_path.as_deref().map_or(0, |p| self.ttl_of(p, child));
            put(out, record(depth, name, child, ttl_ms), child)?;
            written += 1;
            if let Some(child_path) = child_path.filter(|_| child.has_children()) {
                let grandchildren = self.nodes.children(&child_path, "");
                stack.push((child_path, grandchildren));
            }
        }
        Ok(written)
    }

    /// The format byte `encode_snapshot` writes for this tree: 3 if a node has null
    /// data, else 2. A pass that stops at the first null node: cheap beside the
    /// encoding itself.
    pub fn snapshot_format(&self) -> u8 {
        if self.nodes.values().any(|n| n.null_data) {
            FORMAT_V3
        } else {
            FORMAT_V2
        }
    }

    /// Decodes what `encode_snapshot` wrote, checking it thoroughly.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<DataTree, SnapshotError> {
        let (format, body) = checked_body(bytes)?;
        let (last_zxid, rest): (Zxid, _) = postcard::take_from_bytes(body)?;
        let (sessions, grants, rest) = if format == FORMAT_V1 {
            let (v1, rest): (Vec<SessionRecordV1>, _) = postcard::take_from_bytes(rest)?;
            let sessions = v1.into_iter().map(SessionRecord::from).collect();
            (sessions, Grants::new(), rest)
        } else {
            let (sessions, rest) = postcard::take_from_bytes::<Vec<SessionRecord>>(rest)?;
            let (table, rest): (GrantsRecord, _) = postcard::take_from_bytes(rest)?;
            (sessions, decode_grants(table)?, rest)
        };
        let mut tree = DataTree {
            nodes: Nodes::default(),
            sessions: decode_sessions(sessions)?,
            last_zxid,
            reap_candidates: imbl::OrdMap::new(),
            grants,
            grants_zxid: last_zxid,
            usage: imbl::OrdMap::new(),
            data_bytes: 0,
        };
        tree.decode_nodes(rest, format == FORMAT_V3)?;
        tree.check_decoded()?;
        tree.data_bytes = tree.nodes.values().map(|n| n.data.len() as u64).sum();
        Ok(tree)
    }

    /// Reads node records (each with its null data flag if `null_data`) up to the end
    /// of `input`, rebuilding the indexes and checking each node's count of children
    /// against the records under it.
    fn decode_nodes(&mut self, mut input: &[u8], null_data: bool) -> Result<(), SnapshotError> {
        // `stack[d]` is the last node read at depth d.
        let mut stack: Vec<OpenNode> = Vec::new();
        while !input.is_empty() {
            let (rec, rest): (NodeRecord, _) = postcard::take_from_bytes(input)?;
            input = rest;
            let null = if null_data {
                let (null, rest): (bool, _) = postcard::take_from_bytes(input)?;
                input = rest;
                null
            } else {
                false
            };
            let depth = usize::try_from(rec.depth).unwrap_or(usize::MAX);
            let path = if stack.is_empty() {
                if depth != 0 || !rec.name.is_empty() {
                    return Err(malformed("the first node is not the root"));
                }
                "/".to_string()
            } else {
                if depth == 0 || depth > stack.len() {
                    return Err(malformed(format!("node {:?} at bad depth", rec.name)));
                }
                stack.drain(depth..).try_for_each(OpenNode::close)?;
                let parent = &mut stack[depth - 1];
                if parent.ephemeral {
                    return Err(malformed(format!(
                        "ephemeral {:?} has children",
                        parent.path
                    )));
                }
                parent.children_read = parent.children_read.saturating_add(1);
                let path = path::join(&parent.path, rec.name);
                path::validate(&path).map_err(|r| malformed(format!("{path:?}: {r}")))?;
                path
            };
            let ephemeral = rec.mode.is_ephemeral();
            let num_children = rec.stat.num_children;
            self.insert_decoded(&path, rec, null)?;
            stack.push(OpenNode {
                path,
                ephemeral,
                num_children,
                children_read: 0,
            });
        }
        stack.into_iter().try_for_each(OpenNode::close)
    }

    /// Stores one decoded node and indexes it (owner session, reap candidates).
    fn insert_decoded(
        &mut self,
        path: &str,
        rec: NodeRecord,
        null_data: bool,
    ) -> Result<(), SnapshotError> {
        let owner = rec.stat.ephemeral_owner;
        if rec.mode.is_ephemeral() != (owner != 0) {
            return Err(malformed(format!("{path:?}: owner disagrees with mode")));
        }
        if owner != 0 {
            let session = self
                .sessions
                .get_mut(&owner)
                .ok_or_else(|| malformed(format!("{path:?}: owner {owner} not a session")))?;
            session.ephemerals.insert(path.to_string());
        }
        if !rec.mode.is_ttl() && rec.ttl_ms != 0 {
            return Err(malformed(format!(
                "{path:?}: a TTL on a {:?} node",
                rec.mode
            )));
        }
        if null_data && !rec.data.is_empty() {
            return Err(malformed(format!("{path:?}: null data with bytes")));
        }
        if is_reap_candidate(rec.mode) {
            self.reap_candidates.insert(path.to_string(), rec.ttl_ms);
        }
        let node = Node {
            data: rec.data,
            stat: rec.stat,
            mode: rec.mode,
            null_data,
        };
        if self.nodes.insert(path, Arc::new(node)).is_some() {
            return Err(malformed(format!("{path:?} appears twice")));
        }
        Ok(())
    }

    /// Whole-tree checks once every node is in.
    fn check_decoded(&self) -> Result<(), SnapshotError> {
        if !self.nodes.contains("/") {
            return Err(malformed("no root"));
        }
        Ok(())
    }
}

/// A decoded node whose children may still follow (snapshots are in pre-order).
struct OpenNode {
    path: String,
    ephemeral: bool,
    /// What its stat says.
    num_children: u32,
    children_read: u32,
}

impl OpenNode {
    /// Checks, once all its children are read, that its stat counted them right.
    fn close(self) -> Result<(), SnapshotError> {
        if self.children_read != self.num_children {
            return Err(malformed(format!("{:?}: num_children is wrong", self.path)));
        }
        Ok(())
    }
}

fn record<'a>(depth: u32, name: &'a str, node: &Node, ttl_ms: i64) -> NodeRecord<'a> {
    NodeRecord {
        depth,
        name,
        data: node.data.clone(),
        stat: node.stat,
        mode: node.mode,
        ttl_ms,
    }
}

/// The grant table as written: every grant, and every seeded (path, grantee).
type GrantsRecord = (Vec<Grant>, Vec<(String, Grantee)>);

/// Rebuilds the grant table, checking paths and the bound.
fn decode_grants((grants, seeded): GrantsRecord) -> Result<Grants, SnapshotError> {
    if grants.len() > GRANTS_MAX || seeded.len() > GRANTS_MAX.saturating_mul(2) {
        return Err(malformed("too many grants"));
    }
    for p in grants
        .iter()
        .map(|g| &g.path)
        .chain(seeded.iter().map(|s| &s.0))
    {
        path::validate(p).map_err(|r| malformed(format!("grant on {p:?}: {r}")))?;
    }
    let grants = grants.into_iter().map(|g| Grant {
        perms: Perms::from_bits(g.perms.bits()),
        ..g
    });
    Ok(Grants::from_parts(grants, seeded))
}

/// The format byte and the bytes between the header and the crc, once both check out.
fn checked_body(bytes: &[u8]) -> Result<(u8, &[u8]), SnapshotError> {
    if bytes.len() < HEADER_BYTES + CRC_BYTES {
        return Err(malformed(format!("only {} bytes", bytes.len())));
    }
    if !bytes.starts_with(MAGIC) {
        return Err(malformed("bad magic"));
    }
    let format = bytes[MAGIC.len()];
    if !(FORMAT_V1..=FORMAT_V3).contains(&format) {
        return Err(malformed(format!(
            "unknown format {format} (this server reads formats {FORMAT_V1} to {FORMAT_V3})"
        )));
    }
    let (covered, trailer) = bytes.split_at(bytes.len() - CRC_BYTES);
    let mut crc = [0u8; CRC_BYTES];
    crc.copy_from_slice(trailer);
    if crc32fast::hash(covered) != u32::from_le_bytes(crc) {
        return Err(malformed("crc mismatch"));
    }
    Ok((format, &covered[HEADER_BYTES..]))
}

/// Rebuilds the session table (ephemerals are filled in from the nodes).
fn decode_sessions(
    records: Vec<SessionRecord>,
) -> Result<imbl::OrdMap<u64, SessionEntry>, SnapshotError> {
    let mut sessions = imbl::OrdMap::new();
    for rec in records {
        if rec.id == 0 {
            return Err(malformed("session id 0"));
        }
        if rec.owner.len() > SESSION_OWNER_BYTES_MAX {
            return Err(malformed(format!("session {}: owner too long", rec.id)));
        }
        let mut recent = imbl::Vector::new();
        for (request_id, fingerprint, outcome) in rec.recent {
            recent.push_back(Recent {
                request_id,
                fingerprint,
                result: outcome.into_result()?,
            });
        }
        let entry = SessionEntry {
            ttl_ms: rec.ttl_ms,
            owner: rec.owner,
            ephemerals: imbl::OrdSet::new(),
            recent,
        };
        if sessions.insert(rec.id, entry).is_some() {
            return Err(malformed(format!("session {} appears twice", rec.id)));
        }
    }
    Ok(sessions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{CreateOp, Txn, TxnOp};

    /// A snapshot in format 1, as servers wrote it before sessions had owners.
    fn encode_v1(tree: &DataTree) -> Vec<u8> {
        #[derive(Serialize)]
        struct V1 {
            id: u64,
            ttl_ms: i64,
            recent: Vec<(u64, StoredOutcome)>,
        }
        let mut out = MAGIC.to_vec();
        out.push(FORMAT_V1);
        put(&mut out, &tree.last_zxid).unwrap();
        let sessions: Vec<V1> = tree
            .sessions
            .iter()
            .map(|(id, s)| V1 {
                id: *id,
                ttl_ms: s.ttl_ms,
                recent: s
                    .recent
                    .iter()
                    .map(|r| (r.request_id, StoredOutcome::from(&r.result)))
                    .collect(),
            })
            .collect();
        put(&mut out, &sessions).unwrap();
        // The node records are format 2's: cut them out of its encoding.
        let v2 = tree.encode_snapshot().unwrap();
        out.extend_from_slice(&v2[v2_nodes_start(tree)..v2.len() - CRC_BYTES]);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Where format 2's node records begin in `tree`'s encoding.
    fn v2_nodes_start(tree: &DataTree) -> usize {
        let mut head = MAGIC.to_vec();
        head.push(FORMAT_V2);
        put(&mut head, &tree.last_zxid).unwrap();
        put(&mut head, &v2_sessions(tree)).unwrap();
        let grants: Vec<Grant> = tree.grants.all().collect();
        let seeded: Vec<&(String, Grantee)> = tree.grants.seeded().collect();
        put(&mut head, &(grants, seeded)).unwrap();
        head.len()
    }

    /// The sessions as format 2 writes them, as one postcard sequence.
    fn v2_sessions(tree: &DataTree) -> Vec<SessionRecord> {
        tree.sessions
            .iter()
            .map(|(id, s)| SessionRecord::of(*id, s))
            .collect()
    }

    /// A tree with two sessions, remembered outcomes and an ephemeral.
    fn tree_with_sessions() -> DataTree {
        let mut tree = DataTree::new();
        for (zxid, owner) in [(1, "alice"), (2, "bob")] {
            let open = TxnOp::OpenOwnedSession {
                ttl_ms: 5_000,
                owner: owner.into(),
            };
            assert!(tree.apply(&txn(zxid, 0, 0, open)).result.is_ok());
        }
        assert!(tree
            .apply(&txn(3, 1, 9, create("/e", CreateMode::Ephemeral)))
            .result
            .is_ok());
        assert!(tree
            .apply(&txn(4, 2, 1, create("/p", CreateMode::Persistent)))
            .result
            .is_ok());
        tree
    }

    #[test]
    fn chunks_put_together_are_the_whole_encoding() {
        let mut tree = tree_with_sessions();
        for i in 0..200u64 {
            let op = TxnOp::Create(CreateOp {
                path: format!("/p/n{i}"),
                data: Bytes::from(vec![7u8; 100]),
                mode: CreateMode::Persistent,
                ttl_ms: 0,
                null_data: false,
            });
            assert!(tree.apply(&txn(10 + i, 0, 0, op)).result.is_ok());
        }
        let whole = tree.encode_snapshot().unwrap();
        for chunk_bytes in [1, 100, 4096, 1 << 20] {
            let mut chunks: Vec<Vec<u8>> = Vec::new();
            tree.encode_snapshot_chunks(chunk_bytes, &mut |c| {
                chunks.push(c);
                Ok(())
            })
            .unwrap();
            assert_eq!(chunks.concat(), whole, "chunks of {chunk_bytes}");
            if chunk_bytes == 4096 {
                assert!(chunks.len() > 3, "{} chunks", chunks.len());
                // Every chunk but the last is at most one record over the size.
                assert!(chunks.iter().all(|c| c.len() < chunk_bytes + 256));
            }
        }
        // The sessions written one by one are postcard's sequence of them.
        let mut seq = Vec::new();
        put(&mut seq, &v2_sessions(&tree)).unwrap();
        let mut head = MAGIC.to_vec();
        head.push(FORMAT_V2);
        put(&mut head, &tree.last_zxid).unwrap();
        assert_eq!(&whole[head.len()..head.len() + seq.len()], &seq[..]);
        let back = DataTree::decode_snapshot(&whole).unwrap();
        assert_eq!(back.digest(), tree.digest());
    }

    #[test]
    fn a_receiver_that_goes_away_stops_the_encoding() {
        let tree = tree_with_sessions();
        let mut sent = 0;
        let r = tree.encode_snapshot_chunks(1, &mut |_| {
            sent += 1;
            if sent == 2 {
                Err(SnapshotError::Stopped("gone".into()))
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(SnapshotError::Stopped(_))), "{r:?}");
        assert_eq!(sent, 2);
    }

    fn txn(zxid: Zxid, session_id: u64, request_id: u64, op: TxnOp) -> Txn {
        Txn {
            zxid,
            time_ms: 1,
            session_id,
            request_id,
            fence: None,
            op,
        }
    }

    fn create(path: &str, mode: CreateMode) -> TxnOp {
        TxnOp::Create(CreateOp {
            path: path.into(),
            data: Bytes::new(),
            mode,
            ttl_ms: 0,
            null_data: false,
        })
    }

    #[test]
    fn format_1_snapshots_still_decode_with_no_owners_or_fingerprints() {
        let mut tree = DataTree::new();
        let open = TxnOp::OpenOwnedSession {
            ttl_ms: 5_000,
            owner: "alice".into(),
        };
        assert!(tree.apply(&txn(1, 0, 0, open)).result.is_ok());
        let first = tree.apply(&txn(2, 1, 9, create("/e", CreateMode::Ephemeral)));
        assert!(first.result.is_ok());
        let back = DataTree::decode_snapshot(&encode_v1(&tree)).unwrap();
        let session = back.session(1).unwrap();
        assert_eq!(session.owner, "", "format 1 had no owners");
        assert_eq!(session.recent[0].fingerprint, 0);
        assert_eq!(session.recent[0].result, first.result);
        assert!(session.ephemerals.contains("/e"));
        assert_eq!(back.walk("/", true), tree.walk("/", true));
        // Written again, it is format 2, and keeps what it read.
        let v2 = back.encode_snapshot().unwrap();
        assert_eq!(v2[MAGIC.len()], FORMAT_V2);
        let again = DataTree::decode_snapshot(&v2).unwrap();
        assert_eq!(again.digest(), back.digest());
        // The format 2 round trip keeps owners and fingerprints.
        let v2 = DataTree::decode_snapshot(&tree.encode_snapshot().unwrap()).unwrap();
        assert_eq!(v2.session(1).unwrap().owner, "alice");
        assert_eq!(v2.session(1), tree.session(1));
        assert_eq!(v2.digest(), tree.digest());
    }

    #[test]
    fn an_unknown_format_is_refused_by_name() {
        let mut bytes = DataTree::new().encode_snapshot().unwrap();
        bytes[MAGIC.len()] = 4;
        let n = bytes.len() - CRC_BYTES;
        let crc = crc32fast::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
        match DataTree::decode_snapshot(&bytes) {
            Err(SnapshotError::Malformed(m)) => assert!(m.contains("unknown format 4"), "{m}"),
            other => panic!("decoded format 4: {other:?}"),
        }
    }

    /// A node's TTL is kept with the reap index, for TTL nodes only: a record that
    /// gives any other node one is refused rather than silently dropped.
    #[test]
    fn a_ttl_on_a_node_of_another_mode_is_malformed() {
        let record = |mode, ttl_ms| NodeRecord {
            depth: 1,
            name: "n",
            data: Bytes::new(),
            stat: Stat::default(),
            mode,
            ttl_ms,
        };
        let mut tree = DataTree::new();
        match tree.insert_decoded("/n", record(CreateMode::Persistent, 5), false) {
            Err(SnapshotError::Malformed(m)) => assert!(m.contains("a TTL on"), "{m}"),
            other => panic!("decoded a TTL on a persistent node: {other:?}"),
        }
        tree.insert_decoded("/n", record(CreateMode::PersistentWithTtl, 5), false)
            .unwrap();
        let node = tree.nodes.get("/n").unwrap().clone();
        assert_eq!(tree.ttl_of("/n", &node), 5);
    }
}
