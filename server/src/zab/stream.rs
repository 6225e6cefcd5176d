//! The receiving end of one logical stream: puts messages back in sequence order,
//! drops duplicates, and declares the stream broken when a gap is not filled
//! (too many messages held, or held for too long: the missing one was lost).
//!
//! What it must not do: deliver a message twice or out of order.

use std::collections::BTreeMap;

/// Messages held past a gap before the stream counts as broken.
pub(crate) const HELD_MAX: usize = 256;
/// Ticks a gap may stay open before the stream counts as broken.
pub(crate) const GAP_TICKS_MAX: u64 = 2;

/// The stream lost a message: both ends start over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Broken;

#[derive(Debug)]
pub(crate) struct Inbox<T> {
    /// The sequence number delivered next.
    next: u64,
    /// Messages that arrived ahead of a gap.
    held: BTreeMap<u64, T>,
    /// Tick at which the current gap was first seen.
    gap_since: Option<u64>,
}

impl<T> Inbox<T> {
    pub(crate) fn new() -> Inbox<T> {
        Inbox {
            next: 1,
            held: BTreeMap::new(),
            gap_since: None,
        }
    }

    /// Takes message `seq`; returns the messages now deliverable, in order.
    pub(crate) fn accept(&mut self, seq: u64, body: T, now: u64) -> Result<Vec<T>, Broken> {
        if seq < self.next || self.held.contains_key(&seq) {
            return Ok(Vec::new());
        }
        if seq > self.next {
            self.held.insert(seq, body);
            self.gap_since.get_or_insert(now);
            if self.held.len() > HELD_MAX {
                return Err(Broken);
            }
            return Ok(Vec::new());
        }
        let mut out = vec![body];
        self.next += 1;
        while let Some(b) = self.held.remove(&self.next) {
            out.push(b);
            self.next += 1;
        }
        self.gap_since = if self.held.is_empty() {
            None
        } else {
            Some(now)
        };
        Ok(out)
    }

    /// Err if a gap has stayed open too long.
    pub(crate) fn check(&self, now: u64) -> Result<(), Broken> {
        match self.gap_since {
            Some(t) if now.saturating_sub(t) > GAP_TICKS_MAX => Err(Broken),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorders_drops_duplicates_and_detects_loss() {
        let mut inbox = Inbox::new();
        assert_eq!(inbox.accept(2, "b", 0), Ok(vec![]));
        assert_eq!(inbox.accept(2, "b", 0), Ok(vec![]));
        assert_eq!(inbox.accept(1, "a", 0), Ok(vec!["a", "b"]));
        assert_eq!(inbox.accept(1, "a", 0), Ok(vec![]));
        assert_eq!(inbox.accept(4, "d", 1), Ok(vec![]));
        assert!(inbox.check(3).is_ok());
        assert_eq!(inbox.check(4), Err(Broken));
    }
}
