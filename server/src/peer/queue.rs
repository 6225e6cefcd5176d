//! The bounded queue in front of each outbound peer stream.
//!
//! `push` never blocks: when the queue is full the **oldest** message is dropped to
//! make room. Zab re-sends what matters (notifications, FollowerInfo, heartbeats) and
//! treats a gap in a logical stream as a reason to re-register, so the newest
//! messages are the ones worth keeping: after an outage the peer gets the current
//! vote and heartbeat, not a backlog of stale ones.
//!
//! The bound is in messages and in bytes (each message weighed by its encoded
//! size); the newest message is always kept, even if it alone is over the bytes.
//!
//! What it must not do: block, or grow past its bound.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::zab::Message;

/// A bounded FIFO of messages for one destination; full means drop-oldest.
#[derive(Debug)]
pub struct DropOldest {
    /// The waiting messages, oldest first, with their weights.
    items: Mutex<Items>,
    /// Most messages held at once.
    len_max: usize,
    /// Most bytes held at once (but the newest message is always kept).
    bytes_max: usize,
    /// Wakes the one consumer when a message arrives.
    ready: Notify,
}

/// The queue's contents.
#[derive(Debug, Default)]
struct Items {
    /// Messages oldest first, each with its encoded size.
    queue: VecDeque<(Message, usize)>,
    /// The sum of the sizes.
    bytes: usize,
}

impl DropOldest {
    /// An empty queue holding at most `len_max` messages (at least 1) and about
    /// `bytes_max` bytes.
    pub fn new(len_max: usize, bytes_max: usize) -> DropOldest {
        DropOldest {
            items: Mutex::new(Items::default()),
            len_max: len_max.max(1),
            bytes_max,
            ready: Notify::new(),
        }
    }

    /// Adds `msg`; returns how many older messages were dropped to make room.
    pub fn push(&self, msg: Message) -> u64 {
        let size = super::codec::encoded_len(&msg);
        let dropped = {
            let mut items = self.lock();
            let mut dropped = 0;
            while !items.queue.is_empty()
                && (items.queue.len() >= self.len_max
                    || items.bytes.saturating_add(size) > self.bytes_max)
            {
                if let Some((_, old)) = items.queue.pop_front() {
                    items.bytes -= old;
                }
                dropped += 1;
            }
            items.queue.push_back((msg, size));
            items.bytes += size;
            dropped
        };
        self.ready.notify_one();
        dropped
    }

    /// Takes every waiting message, oldest first, waiting until there is one.
    pub async fn pop_all(&self) -> Vec<Message> {
        loop {
            let taken: Vec<Message> = {
                let mut items = self.lock();
                items.bytes = 0;
                items.queue.drain(..).map(|(m, _)| m).collect()
            };
            if !taken.is_empty() {
                return taken;
            }
            // `notify_one` stores a permit if nobody waits, so a push between the
            // drain and this await is not missed.
            self.ready.notified().await;
        }
    }

    /// Messages waiting now.
    pub fn waiting(&self) -> usize {
        self.lock().queue.len()
    }

    /// Bytes waiting now.
    pub fn waiting_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// A poisoned lock only means another thread panicked mid-push; the deque
    /// itself is still consistent, so keep using it.
    fn lock(&self) -> std::sync::MutexGuard<'_, Items> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reset(session: u64) -> Message {
        Message::Reset { session }
    }

    #[tokio::test]
    async fn full_queue_drops_the_oldest() {
        let q = DropOldest::new(3, 1 << 20);
        let dropped: u64 = (1..=5).map(|s| q.push(reset(s))).sum();
        assert_eq!(dropped, 2);
        assert_eq!(q.waiting(), 3);
        assert_eq!(q.pop_all().await, vec![reset(3), reset(4), reset(5)]);
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn pop_waits_for_a_push() {
        let q = std::sync::Arc::new(DropOldest::new(2, 1 << 20));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.pop_all().await }
        });
        tokio::task::yield_now().await;
        q.push(reset(1));
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, vec![reset(1)]);
    }
}

#[cfg(test)]
mod bytes_tests {
    use super::*;

    fn bulky(session: u64) -> Message {
        Message::ToLearner {
            session,
            epoch: 1,
            seq: 1,
            body: crate::zab::LeaderMsg::Sync(crate::zab::SyncKind::Snap {
                zxid: 1,
                data: bytes::Bytes::from(vec![0u8; 1000]),
            }),
        }
    }

    #[tokio::test]
    async fn the_bytes_bound_drops_the_oldest_but_keeps_the_newest() {
        let q = DropOldest::new(100, 2500);
        let dropped: u64 = (1..=5).map(|s| q.push(bulky(s))).sum();
        assert_eq!(dropped, 3, "two of about 1000 bytes fit in 2500");
        assert!(q.waiting_bytes() <= 2500, "{}", q.waiting_bytes());
        assert_eq!(q.pop_all().await, vec![bulky(4), bulky(5)]);
        assert_eq!(q.waiting_bytes(), 0);
        // One message over the whole bound is still kept, alone.
        let q = DropOldest::new(100, 10);
        assert_eq!(q.push(bulky(1)) + q.push(bulky(2)), 1);
        assert_eq!(q.pop_all().await, vec![bulky(2)]);
    }
}
