//! A deterministic digest of the replicated state, to prove two servers agree.
//!
//! ```text
//!   digest = H(last_zxid, node count, Σ H(node), sessions in id order)
//! ```
//!
//! Each node is hashed on its own (path, data, stat, mode, ttl, and null data when
//! set) and the node hashes are added (wrapping): the sum does not depend on the
//! order of the node map (which has changed before: it was a hash map), costs O(n)
//! with no sort and no allocation. Who
//! is whose child is implied by the paths. Sessions are in an ordered map
//! and are hashed in id order, with their owners, ephemerals and remembered outcomes
//! (with the fingerprints of their requests).
//!
//! The hash is written here (not std's `DefaultHasher`, whose algorithm may change
//! between Rust releases; not `Hash` impls, whose byte feeding is unspecified): every
//! field goes in as little-endian 64-bit words, so every build on every platform
//! computes the same value. It detects divergence; it is not cryptographic.
//!
//! What it must not do: depend on hash-map order, pointer values or the platform.

use super::*;

/// Multiplier of the word mixer (odd, from the golden ratio).
const MIX_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
/// Initial state (FNV-1a's 64-bit offset basis).
const SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// A small fixed hasher over 64-bit words with a strong final mix.
pub(crate) struct DigestHasher {
    state: u64,
}

impl DigestHasher {
    pub(crate) fn new() -> Self {
        DigestHasher { state: SEED }
    }

    pub(crate) fn u64(&mut self, word: u64) {
        self.state = (self.state.rotate_left(23) ^ word).wrapping_mul(MIX_MUL);
    }

    pub(crate) fn i64(&mut self, value: i64) {
        self.u64(u64::from_le_bytes(value.to_le_bytes()));
    }

    /// Length-prefixed bytes, so ("ab", "c") and ("a", "bc") differ.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        self.u64(bytes.len() as u64);
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(word);
            self.u64(u64::from_le_bytes(buf));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.u64(u64::from_le_bytes(buf));
        }
    }

    /// The state after a full avalanche (MurmurHash3's fmix64).
    pub(crate) fn finish(&self) -> u64 {
        let mut h = self.state;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

impl DataTree {
    /// A deterministic digest of the whole replicated state (nodes, sessions,
    /// last_zxid): equal trees have equal digests on every server. O(n).
    pub fn digest(&self) -> u64 {
        let nodes_sum = self.nodes.iter().fold(0u64, |sum, (path, node)| {
            sum.wrapping_add(node_hash(path, node, self.ttl_of(path, node)))
        });
        let mut h = DigestHasher::new();
        h.u64(self.last_zxid);
        h.u64(self.nodes.len() as u64);
        h.u64(nodes_sum);
        h.u64(self.sessions.len() as u64);
        let mut buf = Vec::new();
        for (id, session) in self.sessions.iter() {
            h.u64(*id);
            h.i64(session.ttl_ms);
            h.u64(session.ephemerals.len() as u64);
            for path in session.ephemerals.iter() {
                h.bytes(path.as_bytes());
            }
            h.bytes(session.owner.as_bytes());
            h.u64(session.recent.len() as u64);
            for recent in session.recent.iter() {
                h.u64(recent.request_id);
                h.u64(recent.fingerprint);
                buf.clear();
                // Encoding plain data into a Vec cannot fail; if it did, the empty
                // buffer still hashes the same on every server.
                buf = postcard::to_extend(&recent.result, buf).unwrap_or_default();
                h.bytes(&buf);
            }
        }
        // The grant table, only once there is one (older digests stay as they were).
        if !self.grants.is_empty() {
            h.u64(self.grants.len() as u64);
            for g in self.grants.all() {
                h.bytes(g.path.as_bytes());
                grantee_words(&mut h, &g.to);
                h.u64(u64::from(g.perms.bits()));
            }
            for (path, to) in self.grants.seeded() {
                h.bytes(path.as_bytes());
                grantee_words(&mut h, to);
            }
        }
        h.finish()
    }
}

/// The fingerprint of a request remembered for retries: a hash of the postcard
/// encoding of its op and fence (not of its zxid, time or ids, which a retry
/// changes or shares). Never 0 (0 marks an unknown fingerprint).
pub(crate) fn fingerprint(txn: &crate::txn::Txn) -> u64 {
    let mut sink = HashSink {
        hasher: DigestHasher::new(),
        word: [0; 8],
        filled: 0,
        len: 0,
    };
    // Encoding into a sink that cannot fail does not fail; if it did, every server
    // would still hash the same prefix.
    let _ = postcard::to_extend(&(&txn.op, &txn.fence), &mut sink);
    sink.finish().max(1)
}

/// Hashes postcard's output as it is written, 8 bytes to a word, without a buffer.
struct HashSink {
    hasher: DigestHasher,
    word: [u8; 8],
    filled: usize,
    len: u64,
}

impl Extend<u8> for &mut HashSink {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        for byte in iter {
            self.word[self.filled] = byte;
            self.filled += 1;
            self.len += 1;
            if self.filled == self.word.len() {
                self.hasher.u64(u64::from_le_bytes(self.word));
                self.filled = 0;
            }
        }
    }
}

fn grantee_words(h: &mut DigestHasher, to: &crate::security::Grantee) {
    use crate::security::Grantee;
    match to {
        Grantee::Identity(name) => {
            h.u64(1);
            h.bytes(name.as_bytes());
        }
        Grantee::Team(name) => {
            h.u64(2);
            h.bytes(name.as_bytes());
        }
    }
}

impl HashSink {
    fn finish(mut self) -> u64 {
        if self.filled > 0 {
            self.word[self.filled..].fill(0);
            self.hasher.u64(u64::from_le_bytes(self.word));
        }
        self.hasher.u64(self.len);
        self.hasher.finish()
    }
}

/// The hash of one node, independent of every other node.
fn node_hash(path: &str, node: &Node, ttl_ms: i64) -> u64 {
    let mut h = DigestHasher::new();
    h.bytes(path.as_bytes());
    h.bytes(&node.data);
    stat_words(&mut h, &node.stat);
    h.u64(mode_code(node.mode));
    h.i64(ttl_ms);
    // Only for null data, so a node without it hashes as before null data existed.
    if node.null_data {
        h.u64(1);
    }
    h.finish()
}

fn stat_words(h: &mut DigestHasher, stat: &Stat) {
    h.u64(stat.czxid);
    h.u64(stat.mzxid);
    h.u64(stat.pzxid);
    h.i64(stat.ctime_ms);
    h.i64(stat.mtime_ms);
    h.i64(i64::from(stat.version));
    h.i64(stat.cversion);
    h.i64(i64::from(stat.aversion));
    h.u64(stat.ephemeral_owner);
    h.u64(u64::from(stat.data_length));
    h.u64(u64::from(stat.num_children));
}

/// A fixed number per mode (not the enum's memory layout).
fn mode_code(mode: CreateMode) -> u64 {
    match mode {
        CreateMode::Persistent => 1,
        CreateMode::Ephemeral => 2,
        CreateMode::PersistentSequential => 3,
        CreateMode::EphemeralSequential => 4,
        CreateMode::Container => 5,
        CreateMode::PersistentWithTtl => 6,
        CreateMode::PersistentSequentialWithTtl => 7,
    }
}
