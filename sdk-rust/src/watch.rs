//! [`Watch`]: a watch stream, optionally resumed across broken connections.
//!
//! ```text
//!  server stream ──► Cursor (drops replayed duplicates, remembers last zxid) ──► next()
//!        ▲                                                   │ stream breaks (transport,
//!        └──── Watch RPC again with start_zxid = resume point ◄┘ restart, SLOW_CONSUMER)
//! ```
//!
//! Exactly once across resumes: several events may share one zxid (a multi, or a
//! session close), and a stream can break between them. The cursor counts the events
//! delivered at the newest zxid `z`; if that count is not known to be complete (no
//! newer event or Progress came after them), the watch resumes from `z - 1` and drops
//! the first `count` replayed events at `z`, which the server replays in the same
//! order. Otherwise it resumes from `z`. Progress and SnapshotDone advance `z`.
//!
//! A watch that breaks during its initial snapshot is not resumed (the snapshot would
//! be delivered twice): it ends with an error. This module never changes what the
//! caller asked for except `start_zxid` and `initial_snapshot` on resumed streams.

use concord_proto::v1::{
    watch_client::WatchClient, watch_response::Msg, ErrorCode, WatchRequest, WatchResponse,
};
use futures::Stream;
use tokio::time::Instant;
use tonic::codec::Streaming;

use crate::client::{read_err, Client};
use crate::error::{Error, Origin};
use crate::options::{watch_request, RetryPolicy, WatchOptions};
use crate::types::{Event, WatchMessage};

/// An open watch. Read it with [`Watch::next`] (or [`Watch::next_event`]); dropping it
/// cancels the stream.
#[derive(Debug)]
pub struct Watch {
    /// The client used to reopen the stream.
    client: Client,
    /// The request of the first stream; resumed streams change only the start.
    request: WatchRequest,
    /// How long to keep reconnecting; `None`: the first error ends the watch.
    resume: Option<RetryPolicy>,
    /// The current stream, and the client's connection (`Link::generation`) it
    /// went out on; `None` between a break and the reconnect.
    stream: Option<(Streaming<WatchResponse>, u64)>,
    /// What was delivered so far, to resume without loss or duplicates.
    cursor: Cursor,
    /// Failures in a row since the last message arrived, and when the first was.
    failures: Option<(Instant, u32)>,
    /// Set once the watch has ended for good (error, `once` fired, or stream end).
    done: bool,
    /// Number of successful reconnects.
    resumes: u64,
    /// The error that broke the stream (or the latest failed reconnect), to report
    /// when the resume policy runs out.
    last_error: Option<Error>,
}

impl Client {
    /// Opens a watch. Fails at once if the server refuses it (BAD_PATH, ZXID_COMPACTED,
    /// ...); later failures come out of [`Watch::next`]. With `options.resume` set, the
    /// watch reconnects after a broken stream and the caller sees each event once,
    /// and a first stream that fails for a reason a retry may fix (no server
    /// reached, or one without a leader) is opened again within the same policy.
    pub async fn watch(&self, options: WatchOptions) -> Result<Watch, Error> {
        let request = watch_request(&options);
        let mut watch = Watch {
            client: self.clone(),
            cursor: Cursor::new(request.start_zxid, request.initial_snapshot),
            request,
            resume: options.resume,
            stream: None,
            failures: None,
            done: false,
            resumes: 0,
            last_error: None,
        };
        match open(self, watch.request.clone()).await {
            Ok(stream) => watch.stream = Some(stream),
            Err(err) if watch.resume.is_some() && err.is_retry_safe() => {
                watch.last_error = Some(err);
                watch.reconnect().await?;
                watch.resumes = 0;
            }
            Err(err) => return Err(err),
        }
        Ok(watch)
    }
}

/// Opens a stream, on the connection it returns the generation of.
async fn open(
    client: &Client,
    request: WatchRequest,
) -> Result<(Streaming<WatchResponse>, u64), Error> {
    let generation = client.link().generation();
    let mut watch = WatchClient::new(client.link().clone());
    let resp = watch
        .watch(request)
        .await
        .map_err(|status| client.stream_err(generation, status))?;
    Ok((resp.into_inner(), generation))
}

impl Watch {
    /// The next message; `None` once the watch has ended (after a `once` event, or when
    /// a non-resuming stream ends). An error is yielded once, then `None`.
    ///
    /// Cancel-safe: dropping the future (in a `select!`) loses no message; a reconnect
    /// in progress starts over on the next call.
    pub async fn next(&mut self) -> Option<Result<WatchMessage, Error>> {
        loop {
            if self.done {
                return None;
            }
            let Some((stream, _)) = self.stream.as_mut() else {
                if let Err(err) = self.reconnect().await {
                    self.done = true;
                    return Some(Err(err));
                }
                continue;
            };
            let outcome = stream.message().await;
            match outcome {
                Ok(Some(WatchResponse { msg: Some(msg) })) => {
                    self.failures = None;
                    if self.cursor.accept(&msg) {
                        if let Some(z) = self.cursor.last_zxid {
                            self.client.saw_zxid(z);
                        }
                        return Some(Ok(WatchMessage::from(msg)));
                    }
                }
                Ok(Some(WatchResponse { msg: None })) => {}
                Ok(None) => {
                    let end = Error::client(ErrorCode::Unavailable, "the watch stream ended");
                    if let Some(err) = self.on_break(end) {
                        return err;
                    }
                }
                Err(status) => {
                    if let Some(err) = self.on_break(read_err(status)) {
                        return err;
                    }
                }
            }
        }
    }

    /// The next event, skipping the other messages.
    pub async fn next_event(&mut self) -> Option<Result<Event, Error>> {
        loop {
            match self.next().await? {
                Ok(WatchMessage::Event(event)) => return Some(Ok(event)),
                Ok(_) => {}
                Err(err) => return Some(Err(err)),
            }
        }
    }

    /// The newest zxid the watch has delivered or learned complete (from Progress or
    /// SnapshotDone): where it would resume from.
    pub fn last_zxid(&self) -> Option<u64> {
        self.cursor.last_zxid
    }

    /// How many times the watch has reconnected.
    pub fn resumes(&self) -> u64 {
        self.resumes
    }

    /// The watch as a `Stream` of messages.
    pub fn into_stream(self) -> impl Stream<Item = Result<WatchMessage, Error>> + Send {
        futures::stream::unfold(self, |mut watch| async move {
            let item = watch.next().await?;
            Some((item, watch))
        })
    }

    /// Handles a broken or ended stream: `None` to go on (a reconnect follows), or the
    /// item to yield (the error, or the end of the watch).
    fn on_break(&mut self, err: Error) -> Option<Option<Result<WatchMessage, Error>>> {
        if let Some((_, generation)) = self.stream.take() {
            self.client.leave_if_cannot_serve(generation, &err);
        }
        // A stream that ends without a status: the server finished it (or restarted).
        let ended_cleanly = err.origin() == Origin::Client;
        if self.request.once && self.cursor.events_delivered > 0 {
            self.done = true;
            return Some(None);
        }
        if self.resume.is_none() || !(ended_cleanly || err.is_retry_safe()) {
            self.done = true;
            return Some(if ended_cleanly && self.resume.is_none() {
                None
            } else {
                Some(Err(err))
            });
        }
        self.last_error = Some(err);
        None
    }

    /// Opens a new stream from the cursor's resume point, retrying with back-off within
    /// the resume policy. Fails with the last error when the policy runs out, or at
    /// once on an error a retry cannot fix (ZXID_COMPACTED, BAD_*).
    async fn reconnect(&mut self) -> Result<(), Error> {
        let policy = self.resume.unwrap_or_default();
        let from = self.cursor.resume_from()?;
        let mut request = self.request.clone();
        if from.is_some() {
            request.start_zxid = from;
            request.initial_snapshot = false;
        }
        loop {
            let (since, count) = *self.failures.get_or_insert((Instant::now(), 0));
            let attempt = count.saturating_add(1);
            if !policy.allows(attempt, since.elapsed()) {
                return Err(self.give_up());
            }
            tokio::time::sleep(policy.delay(attempt)).await;
            self.failures = Some((since, attempt));
            match open(&self.client, request.clone()).await {
                Ok(stream) => {
                    self.stream = Some(stream);
                    self.resumes += 1;
                    return Ok(());
                }
                Err(err) if err.is_retry_safe() => self.last_error = Some(err),
                Err(err) => return Err(err),
            }
        }
    }

    /// The error to end with when the resume policy runs out.
    fn give_up(&mut self) -> Error {
        self.last_error.take().unwrap_or_else(|| {
            Error::client(ErrorCode::Unavailable, "the watch could not be resumed")
        })
    }
}

/// What a watch has delivered, so that a resumed stream neither loses nor repeats
/// anything. Pure bookkeeping: no IO.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// The newest zxid delivered or known complete; the resume point.
    last_zxid: Option<u64>,
    /// Events delivered at `last_zxid`; while non-zero, its txn may have more events.
    delivered_at_last: u32,
    /// Replayed events at `last_zxid` still to drop after a resume from `last_zxid - 1`.
    skip: u32,
    /// An initial snapshot was asked for and is not done yet.
    snapshot_pending: bool,
    /// Events delivered in all (for `once`).
    events_delivered: u64,
}

impl Cursor {
    pub(crate) fn new(start_zxid: Option<u64>, initial_snapshot: bool) -> Cursor {
        Cursor {
            last_zxid: start_zxid,
            snapshot_pending: initial_snapshot,
            ..Cursor::default()
        }
    }

    /// Records `msg`; false when it must not be delivered (a replayed duplicate).
    pub(crate) fn accept(&mut self, msg: &Msg) -> bool {
        match msg {
            Msg::Started(started) => {
                if self.last_zxid.is_none() && !self.snapshot_pending {
                    self.last_zxid = Some(started.zxid);
                }
                true
            }
            Msg::Event(event) => self.accept_event(event.zxid),
            Msg::Progress(progress) => {
                if !self.snapshot_pending && self.last_zxid.is_none_or(|z| progress.zxid >= z) {
                    self.complete_at(progress.zxid);
                }
                true
            }
            Msg::SnapshotNode(_) => true,
            Msg::SnapshotDone(done) => {
                self.snapshot_pending = false;
                self.complete_at(done.zxid);
                true
            }
        }
    }

    fn accept_event(&mut self, zxid: u64) -> bool {
        match self.last_zxid {
            // Older, or at a zxid known complete: a replayed duplicate.
            Some(last) if zxid < last || (zxid == last && self.delivered_at_last == 0) => {
                return false
            }
            Some(last) if zxid == last => {
                if self.skip > 0 {
                    self.skip -= 1;
                    return false;
                }
                self.delivered_at_last = self.delivered_at_last.saturating_add(1);
            }
            _ => {
                self.last_zxid = Some(zxid);
                self.delivered_at_last = 1;
                self.skip = 0;
            }
        }
        self.events_delivered += 1;
        true
    }

    /// Everything up to `zxid` has been delivered.
    fn complete_at(&mut self, zxid: u64) {
        self.last_zxid = Some(zxid);
        self.delivered_at_last = 0;
        self.skip = 0;
    }

    /// The `start_zxid` for a resumed stream (`None`: as first asked), arming the skip
    /// of events at the newest zxid that were already delivered.
    pub(crate) fn resume_from(&mut self) -> Result<Option<u64>, Error> {
        if self.snapshot_pending {
            return Err(Error::client(
                ErrorCode::Unavailable,
                "the watch broke during its initial snapshot; start a new watch",
            ));
        }
        Ok(match self.last_zxid {
            Some(last) if self.delivered_at_last > 0 && last > 0 => {
                self.skip = self.delivered_at_last;
                Some(last - 1)
            }
            other => {
                self.skip = 0;
                other
            }
        })
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
