//! The bounded queue in front of each outbound peer stream.
//!
//! `push` never blocks: when the queue is full the **oldest** message is dropped to
//! make room. Zab re-sends what matters (notifications, FollowerInfo, heartbeats) and
//! treats a gap in a logical stream as a reason to re-register, so the newest
//! messages are the ones worth keeping: after an outage the peer gets the current
//! vote and heartbeat, not a backlog of stale ones.
//!
//! What it must not do: block, or grow past its bound.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::zab::Message;

/// A bounded FIFO of messages for one destination; full means drop-oldest.
#[derive(Debug)]
pub struct DropOldest {
    /// The waiting messages, oldest first.
    items: Mutex<VecDeque<Message>>,
    /// Most messages held at once.
    len_max: usize,
    /// Wakes the one consumer when a message arrives.
    ready: Notify,
}

impl DropOldest {
    /// An empty queue holding at most `len_max` messages (at least 1).
    pub fn new(len_max: usize) -> DropOldest {
        DropOldest {
            items: Mutex::new(VecDeque::new()),
            len_max: len_max.max(1),
            ready: Notify::new(),
        }
    }

    /// Adds `msg`; returns how many older messages were dropped to make room (0 or 1).
    pub fn push(&self, msg: Message) -> u64 {
        let dropped = {
            let mut items = self.lock();
            let dropped = if items.len() >= self.len_max {
                items.pop_front();
                1
            } else {
                0
            };
            items.push_back(msg);
            dropped
        };
        self.ready.notify_one();
        dropped
    }

    /// Takes every waiting message, oldest first, waiting until there is one.
    pub async fn pop_all(&self) -> Vec<Message> {
        loop {
            let taken: Vec<Message> = self.lock().drain(..).collect();
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
        self.lock().len()
    }

    /// A poisoned lock only means another thread panicked mid-push; the deque
    /// itself is still consistent, so keep using it.
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Message>> {
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
        let q = DropOldest::new(3);
        let dropped: u64 = (1..=5).map(|s| q.push(reset(s))).sum();
        assert_eq!(dropped, 2);
        assert_eq!(q.waiting(), 3);
        assert_eq!(q.pop_all().await, vec![reset(3), reset(4), reset(5)]);
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn pop_waits_for_a_push() {
        let q = std::sync::Arc::new(DropOldest::new(2));
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
