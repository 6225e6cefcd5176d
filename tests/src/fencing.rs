//! The checker of fenced writes: the writes fenced by one lock's tokens, taken in
//! the order they were applied, never overlap. Its input is what the server applied,
//! in zxid order, as a watch delivers it: each node joining the lock's queue (its
//! token is the zxid that created it), each node leaving it, and each write that
//! carried a fence of the lock. A fenced write must be applied while its token's
//! node heads the queue (a mutex has one holder: the lowest sequence number): a
//! write of a holder that lost the lock (released by someone else, or its session
//! ended) applied after that would overlap the next holder's writes.

use std::collections::{BTreeMap, BTreeSet};

/// One applied change that matters to the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceEvent {
    /// A node joined the queue: its name (a zero-padded sequence number).
    Queued(String),
    /// A node left the queue.
    Left(String),
    /// A write fenced by this token was applied.
    Write(u64),
}

/// What a passing history held.
#[derive(Debug, PartialEq, Eq)]
pub struct FenceStats {
    /// Holders that wrote at least once.
    pub holds: usize,
    /// Fenced writes applied.
    pub writes: usize,
}

/// Checks `events` (zxid, event), in the order the server applied them.
pub fn check_fenced(events: &[(u64, FenceEvent)]) -> Result<FenceStats, String> {
    // Queue nodes by name (sequence order), with their tokens.
    let mut queue: BTreeMap<&str, u64> = BTreeMap::new();
    let mut written = BTreeSet::new();
    let mut writes = 0;
    let mut last = 0;
    for (zxid, event) in events {
        // One txn may change several nodes: equal zxids follow each other.
        if *zxid < last {
            return Err(format!("zxid {zxid:#x} comes after {last:#x}"));
        }
        last = *zxid;
        match event {
            FenceEvent::Queued(name) => {
                if queue.insert(name, *zxid).is_some() {
                    return Err(format!("{name} queued twice, again at {zxid:#x}"));
                }
            }
            FenceEvent::Left(name) => {
                if queue.remove(name.as_str()).is_none() {
                    return Err(format!("{name} left at {zxid:#x} but was not queued"));
                }
            }
            FenceEvent::Write(token) => {
                let holder = queue.iter().next().map(|(name, token)| (*name, *token));
                match holder {
                    Some((_, held)) if held == *token => {
                        written.insert(*token);
                        writes += 1;
                    }
                    Some((name, held)) => {
                        return Err(format!(
                            "a write fenced by token {token:#x} was applied at {zxid:#x} \
                             while {name} (token {held:#x}) held the lock"
                        ))
                    }
                    None => {
                        return Err(format!(
                            "a write fenced by token {token:#x} was applied at {zxid:#x} \
                             while nobody held the lock"
                        ))
                    }
                }
            }
        }
    }
    Ok(FenceStats {
        holds: written.len(),
        writes,
    })
}

#[cfg(test)]
mod tests {
    use super::FenceEvent::{Left, Queued, Write};
    use super::*;

    fn q(name: &str) -> FenceEvent {
        Queued(name.into())
    }

    fn l(name: &str) -> FenceEvent {
        Left(name.into())
    }

    #[test]
    fn holders_writing_in_turn_pass() {
        let events = [
            (1, q("01")),
            (2, q("02")),
            (3, Write(1)),
            (4, Write(1)),
            (5, l("01")),
            (6, Write(2)),
            (7, l("02")),
        ];
        let stats = check_fenced(&events).unwrap();
        assert_eq!(
            stats,
            FenceStats {
                holds: 2,
                writes: 3
            }
        );
    }

    #[test]
    fn a_write_of_a_holder_that_lost_the_lock_fails() {
        // 01 was released by someone else at 4; its write at 5 overlaps 02's hold.
        let events = [
            (1, q("01")),
            (2, q("02")),
            (3, Write(1)),
            (4, l("01")),
            (5, Write(1)),
        ];
        let err = check_fenced(&events).unwrap_err();
        assert!(err.contains("while 02 (token 0x2) held the lock"), "{err}");
    }

    #[test]
    fn a_waiters_write_fails() {
        let events = [(1, q("01")), (2, q("02")), (3, Write(2))];
        assert!(check_fenced(&events).is_err());
    }

    #[test]
    fn a_write_after_the_queue_emptied_fails() {
        let events = [(1, q("01")), (2, l("01")), (3, Write(1))];
        let err = check_fenced(&events).unwrap_err();
        assert!(err.contains("nobody held"), "{err}");
    }

    #[test]
    fn events_out_of_order_or_unknown_nodes_fail() {
        assert!(check_fenced(&[(2, q("01")), (1, l("01"))]).is_err());
        assert!(check_fenced(&[(1, q("01")), (1, l("01"))]).is_ok());
        assert!(check_fenced(&[(1, l("01"))]).is_err());
        assert!(check_fenced(&[(1, q("01")), (2, q("01"))]).is_err());
    }
}
