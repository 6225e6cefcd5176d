//! One unary call as a [`Client`] sends it: a deadline on each attempt, and retries
//! of retry-safe failures within the client's policy, with jittered back-off.
//!
//! ```text
//!   method ─▶ Client::unary(Call, request, send) ─▶ attempt ─▶ answer
//!                         ▲ back-off (jitter)        │ failure
//!                         └── retry-safe, or a deduplicated write, within the policy
//! ```
//!
//! A server that answers NOT_LEADER or UNAVAILABLE itself (no leader within its
//! wait, or stopping) is given up: the next attempt dials the next server.
//!
//! What may be retried: any failure [`Error::is_retry_safe`] says is; and, for a
//! write carrying a session and request id (the server applies it at most once and
//! answers a retry with the first outcome), also one whose outcome is unknown.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{CallKind, Error};
use crate::Link;

/// How long a call asks the server to wait before it answers (locks, elections).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The server answers at once.
    No,
    /// The server may wait this long first.
    For(Duration),
    /// The server may wait until the call is cancelled: no deadline applies.
    Forever,
}

impl Wait {
    /// The wait of a request's `timeout_ms` (0: forever).
    pub(crate) fn of_timeout_ms(timeout_ms: i64) -> Wait {
        match u64::try_from(timeout_ms) {
            Ok(0) | Err(_) => Wait::Forever,
            Ok(ms) => Wait::For(Duration::from_millis(ms)),
        }
    }
}

/// What kind of call is sent, for its deadline and its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call {
    kind: CallKind,
    /// A write the server deduplicates (session and request id set): retried also
    /// when its outcome is unknown.
    deduplicated: bool,
    wait: Wait,
}

impl Call {
    /// A call that changes nothing.
    pub(crate) const READ: Call = Call {
        kind: CallKind::Read,
        deduplicated: false,
        wait: Wait::No,
    };

    /// A call that may change state; `deduplicated` when the server applies a retry
    /// of it at most once.
    pub(crate) fn write(deduplicated: bool) -> Call {
        Call {
            kind: CallKind::Write,
            deduplicated,
            wait: Wait::No,
        }
    }

    /// This call, asking the server to wait up to `wait` before answering.
    pub(crate) fn waiting(self, wait: Wait) -> Call {
        Call { wait, ..self }
    }

    /// The deadline of one attempt, given the client's call timeout.
    fn deadline(self, call_timeout: Option<Duration>) -> Option<Duration> {
        match (call_timeout, self.wait) {
            (None, _) | (_, Wait::Forever) => None,
            (Some(t), Wait::No) => Some(t),
            (Some(t), Wait::For(w)) => Some(t.saturating_add(w)),
        }
    }

    fn may_retry(self, err: &Error) -> bool {
        err.is_retry_safe() || (self.deduplicated && err.is_indeterminate())
    }
}

impl Client {
    /// Sends `request` with `send` (one attempt per call of it), under the client's
    /// deadline and retry policy; returns the answer's message.
    pub(crate) async fn unary<Req, Resp, F, Fut>(
        &self,
        call: Call,
        request: Req,
        send: F,
    ) -> Result<Resp, Error>
    where
        Req: Clone,
        F: Fn(Link, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let settings = self.settings();
        let deadline = call.deadline(settings.call_timeout);
        let mut first_failure: Option<Instant> = None;
        let mut retry: u32 = 0;
        loop {
            let generation = self.link().generation();
            let sent = send(self.link().clone(), traced(request.clone()));
            let outcome = match deadline {
                None => sent.await.map_err(|s| Error::from_status(&s, call.kind)),
                Some(limit) => match tokio::time::timeout(limit, sent).await {
                    Ok(outcome) => outcome.map_err(|s| Error::from_status(&s, call.kind)),
                    Err(_) => Err(Error::deadline(call.kind, limit)),
                },
            };
            let err = match outcome {
                Ok(answer) => return Ok(answer.into_inner()),
                Err(err) => err,
            };
            self.leave_if_cannot_serve(generation, &err);
            let Some(policy) = settings.retry.as_ref() else {
                return Err(err);
            };
            let since = *first_failure.get_or_insert_with(Instant::now);
            retry = retry.saturating_add(1);
            if !call.may_retry(&err) || !policy.allows(retry, since.elapsed()) {
                return Err(err);
            }
            tokio::time::sleep(policy.jittered_delay(retry)).await;
        }
    }

    /// After `err` from a call on connection `generation` (`Link::generation`): a
    /// server that said it cannot serve (no leader for a while, or stopping) is
    /// given up, so the next attempt, and the next call, go to another server, as a
    /// ZooKeeper client moves when its server loses its quorum: to the leader it
    /// named, if that is one of the list (`aim_at_named_leader`), else the next.
    pub(crate) fn leave_if_cannot_serve(&self, generation: u64, err: &Error) {
        if err.server_cannot_serve() {
            self.aim_at_named_leader(err);
            self.link().give_up(generation);
        }
    }

    /// Makes the next dial start at the leader a NOT_LEADER `err` names, when its
    /// client address is in this client's list exactly as written there (no name
    /// resolution); otherwise the next dial goes on down the list.
    pub(crate) fn aim_at_named_leader(&self, err: &Error) {
        if let Some(addr) = err.leader_hint().and_then(|h| h.client_addr.as_deref()) {
            self.servers().prefer(addr);
        }
    }

    /// A stream's failure, from a call on connection `generation`, as a read's
    /// error; a server that cannot serve is given up (`leave_if_cannot_serve`).
    pub(crate) fn stream_err(&self, generation: u64, status: tonic::Status) -> Error {
        let err = crate::client::read_err(status);
        self.leave_if_cannot_serve(generation, &err);
        err
    }
}

/// A request carrying the caller's trace context: the W3C `traceparent` (and
/// `tracestate`) of the current OpenTelemetry span, if it has a valid one. The
/// server's spans of the call go under it (docs/operations.md, "Traces").
fn traced<Req>(message: Req) -> tonic::Request<Req> {
    use opentelemetry::trace::TraceContextExt;
    let mut request = tonic::Request::new(message);
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    let parent = span.span_context();
    if !parent.is_valid() {
        return request;
    }
    let traceparent = format!(
        "00-{:032x}-{:016x}-{:02x}",
        parent.trace_id(),
        parent.span_id(),
        parent.trace_flags().to_u8()
    );
    let metadata = request.metadata_mut();
    if let Ok(v) = traceparent.parse() {
        metadata.insert("traceparent", v);
    }
    let state = parent.trace_state().header();
    if !state.is_empty() {
        if let Ok(v) = state.parse() {
            metadata.insert("tracestate", v);
        }
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_the_current_span_as_its_traceparent() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        assert!(
            traced(()).metadata().get("traceparent").is_none(),
            "no span, none sent"
        );
        let parent = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_key_value([("vendor", "x")]).unwrap(),
        );
        let _guard = opentelemetry::Context::new()
            .with_remote_span_context(parent)
            .attach();
        let request = traced(());
        assert_eq!(
            request.metadata().get("traceparent").unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(request.metadata().get("tracestate").unwrap(), "vendor=x");
    }

    #[test]
    fn deadlines_add_the_server_wait_and_vanish_when_it_is_forever() {
        let t = Some(Duration::from_secs(2));
        assert_eq!(Call::READ.deadline(None), None);
        assert_eq!(Call::READ.deadline(t), t);
        let acquire = Call::write(true).waiting(Wait::of_timeout_ms(500));
        assert_eq!(acquire.deadline(t), Some(Duration::from_millis(2_500)));
        let forever = Call::write(true).waiting(Wait::of_timeout_ms(0));
        assert_eq!(forever.deadline(t), None);
        assert_eq!(Wait::of_timeout_ms(-3), Wait::Forever);
    }

    #[test]
    fn only_deduplicated_writes_retry_an_unknown_outcome() {
        let lost = Error::deadline(CallKind::Write, Duration::from_secs(1));
        assert!(lost.is_indeterminate());
        assert!(!Call::write(false).may_retry(&lost));
        assert!(Call::write(true).may_retry(&lost));
        let read = Error::deadline(CallKind::Read, Duration::from_secs(1));
        assert!(Call::READ.may_retry(&read));
    }
}
