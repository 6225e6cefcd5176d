//! The SDK's one error type, [`Error`], and what a caller may do after one.
//!
//! Every Concord failure arrives as a `tonic::Status`. The machine-readable
//! [`ErrorCode`] is read, in this order, from:
//! 1. the `concord-error-code` metadata entry the server sets on every failure;
//! 2. the message prefix (`"NO_NODE: /a does not exist"`);
//! 3. a mapping from the gRPC status code, for failures the server never answered
//!    (connection refused, reset stream, client-side timeout).
//!
//! The two questions a caller asks after a failure are answered by
//! [`Error::is_retry_safe`] and [`Error::is_indeterminate`]; see their docs for the exact
//! rules. This module only classifies: it never retries anything itself.

use concord_proto::v1::ErrorCode;
use tonic::Code;

/// The metadata key under which the server names the error code.
pub const ERROR_CODE_METADATA_KEY: &str = "concord-error-code";

/// The metadata key under which a NOT_LEADER failure names the leader's id, when the
/// server knows it (also in the ErrorInfo detail's metadata as `leader_id`).
pub const LEADER_ID_METADATA_KEY: &str = "concord-leader-id";
/// The metadata key under which a NOT_LEADER failure names the leader's client
/// address (also in the ErrorInfo detail's metadata as `leader_addr`).
pub const LEADER_ADDR_METADATA_KEY: &str = "concord-leader-addr";

/// The leader a NOT_LEADER failure points to: send the request there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderHint {
    /// The leader's server id.
    pub id: u64,
    /// Where the leader's clients connect (`host:port`), if the server knows it.
    pub client_addr: Option<String>,
}

/// What kind of call failed: it decides whether a retry can change anything on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A call that changes nothing (get, exists, children, sync, watch, status,
    /// session get/list, keep-alive).
    Read,
    /// A call that may change state (create, set, delete, multi, session open/close).
    Write,
}

/// Where the error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The server answered with a Concord error (code in metadata or message prefix).
    Server,
    /// The request never reached a server: no connection could be made. The server
    /// certainly did nothing.
    NotSent,
    /// The transport failed after the request may have been sent (reset stream,
    /// dropped connection, client-side timeout, non-Concord status).
    Transport,
    /// The SDK rejected the call before sending it (bad endpoint, bad argument).
    Client,
}

/// A failed Concord call. Displays as `CODE: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str_name())]
pub struct Error {
    /// The machine-readable code.
    code: ErrorCode,
    /// The human-readable message, without the `CODE: ` prefix.
    message: String,
    /// The gRPC status code that carried the error (`Unknown` for client-side errors).
    grpc_code: Code,
    /// Where the error came from; decides the retry classification.
    origin: Origin,
    /// What kind of call failed.
    call: CallKind,
    /// The leader a NOT_LEADER failure names, if any.
    leader: Option<LeaderHint>,
}

impl Error {
    /// Builds an error from a failed call's status. `call` says whether the call could
    /// have changed anything.
    pub fn from_status(status: &tonic::Status, call: CallKind) -> Error {
        let message = status.message();
        if let Some(code) = code_from_metadata(status) {
            let message = strip_code_prefix(message, code).to_string();
            let mut e = Error::new(code, message, status.code(), Origin::Server, call);
            e.leader = leader_from_metadata(status);
            return e;
        }
        if let Some((code, rest)) = code_from_message(message) {
            return Error::new(code, rest.to_string(), status.code(), Origin::Server, call);
        }
        if let Some((code, what)) = tls_mismatch(message) {
            // A retry meets the same mismatch: say what to change, and stop.
            let message = format!("{what} ({message})");
            return Error::new(code, message, status.code(), Origin::NotSent, call);
        }
        if concord_direct::was_never_sent(status) {
            // Whatever gRPC code carried it, no server was reached.
            let code = ErrorCode::Unavailable;
            return Error::new(
                code,
                message.to_string(),
                status.code(),
                Origin::NotSent,
                call,
            );
        }
        let code = code_from_grpc(status.code());
        Error::new(
            code,
            message.to_string(),
            status.code(),
            Origin::Transport,
            call,
        )
    }

    /// An error raised by the SDK itself before anything was sent.
    pub fn client(code: ErrorCode, message: impl Into<String>) -> Error {
        Error::new(
            code,
            message.into(),
            Code::Unknown,
            Origin::Client,
            CallKind::Read,
        )
    }

    /// A call that got no answer within its deadline: TIMEOUT, after it may have
    /// been sent (indeterminate for a write).
    pub(crate) fn deadline(call: CallKind, limit: std::time::Duration) -> Error {
        Error::new(
            ErrorCode::Timeout,
            format!(
                "no answer within the call's deadline of {} ms",
                limit.as_millis()
            ),
            Code::DeadlineExceeded,
            Origin::Transport,
            call,
        )
    }

    fn new(
        code: ErrorCode,
        message: String,
        grpc_code: Code,
        origin: Origin,
        call: CallKind,
    ) -> Error {
        Error {
            code,
            message,
            grpc_code,
            origin,
            call,
            leader: None,
        }
    }

    /// The leader a NOT_LEADER failure names (id and client address), if the server
    /// knew it: retry the call there.
    pub fn leader_hint(&self) -> Option<&LeaderHint> {
        self.leader.as_ref()
    }

    /// The machine-readable code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The message without the `CODE: ` prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// For a failed Multi: the index (from 0) of the op that failed. The server names
    /// it the same way whether it refused the op before proposing the Multi or the op
    /// failed when applied: `CODE: op N: ...` (and under `op` in the ErrorInfo).
    pub fn op_index(&self) -> Option<usize> {
        let (index, _) = self.message.strip_prefix("op ")?.split_once(": ")?;
        index.parse().ok()
    }

    /// The gRPC status code that carried the error.
    pub fn grpc_code(&self) -> Code {
        self.grpc_code
    }

    /// Where the error came from.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The kind of call that failed.
    pub fn call(&self) -> CallKind {
        self.call
    }

    /// True when sending the same request again is safe and may succeed.
    ///
    /// Only transient failures qualify (NOT_LEADER, UNAVAILABLE, TIMEOUT, INTERNAL,
    /// SLOW_CONSUMER): errors about the request itself (BAD_*, NODE_EXISTS, NO_NODE,
    /// SESSION_EXPIRED, FENCED, PERMISSION_DENIED, QUOTA_EXCEEDED, UNIMPLEMENTED,
    /// ZXID_COMPACTED, ...) would fail the same way again. A transient failure is safe
    /// to retry when either
    /// - the call was a read (a read changes nothing), or
    /// - the server certainly did nothing: the request was never sent (no connection
    ///   could be made), or the server refused it with NOT_LEADER.
    ///
    /// A write that fails transiently after it may have reached the server is not
    /// retry-safe: see [`Error::is_indeterminate`].
    pub fn is_retry_safe(&self) -> bool {
        if !is_transient(self.code) {
            return false;
        }
        self.call == CallKind::Read || self.server_did_nothing()
    }

    /// True when a write's outcome is unknown: it may or may not have been applied.
    ///
    /// That is a write whose failure came after the request may have reached the server
    /// and says nothing about the outcome: a timeout (TIMEOUT / DEADLINE_EXCEEDED /
    /// cancelled), a lost connection or reset stream, an INTERNAL fault, or UNAVAILABLE
    /// from the server (it may have proposed the write before losing its quorum), or
    /// OUTCOME_UNKNOWN (a follower handed the write to a leader and no outcome came
    /// back).
    /// Reads are never indeterminate. Check with a read before retrying, or retry with
    /// the same `(session_id, request_id)`: the server applies such a write at most once
    /// and answers the retry with the first outcome.
    pub fn is_indeterminate(&self) -> bool {
        self.call == CallKind::Write && is_transient(self.code) && !self.server_did_nothing()
    }

    /// True when the server itself answered that it cannot serve now: NOT_LEADER (no
    /// leader within its wait) or UNAVAILABLE (stopping, say). Another server may.
    pub(crate) fn server_cannot_serve(&self) -> bool {
        self.origin == Origin::Server
            && matches!(self.code, ErrorCode::NotLeader | ErrorCode::Unavailable)
    }

    /// True when the failure is known to have changed nothing on the server for
    /// transient reasons (never sent, or refused with NOT_LEADER).
    fn server_did_nothing(&self) -> bool {
        match self.origin {
            Origin::NotSent | Origin::Client => true,
            Origin::Server => self.code == ErrorCode::NotLeader,
            Origin::Transport => false,
        }
    }
}

/// What the client must change, when a connection failed for a TLS mismatch that
/// no retry mends (rustls's and h2's words, as the transport reports them): the
/// code (BAD_ARGUMENTS for the client's own endpoint or TLS options,
/// PERMISSION_DENIED for a client certificate the server refused) and the words.
fn tls_mismatch(message: &str) -> Option<(ErrorCode, &'static str)> {
    const MISMATCHES: [(&str, ErrorCode, &str); 10] = [
        // A TLS server's first bytes (an alert record) read as an HTTP/2 frame.
        (
            "frame with invalid size",
            ErrorCode::BadArguments,
            "the server did not answer in plain-text HTTP/2: it expects TLS; use an \
             https:// endpoint with the CA that signed its certificate",
        ),
        (
            "InvalidContentType",
            ErrorCode::BadArguments,
            "the server does not speak TLS: use an http:// endpoint, or give it a certificate",
        ),
        (
            "CertificateRequired",
            ErrorCode::BadArguments,
            "the server requires a client certificate: give one (and its key) with the \
             TLS options",
        ),
        (
            "alert: CertificateExpired",
            ErrorCode::PermissionDenied,
            "the server refused the client certificate as expired: renew it",
        ),
        (
            "alert: BadCertificate",
            ErrorCode::PermissionDenied,
            "the server refused the client certificate: is it signed by a CA the server trusts?",
        ),
        // A certificate from another CA of the same name: its signature fails.
        (
            "alert: DecryptError",
            ErrorCode::PermissionDenied,
            "the server refused the client certificate: it is not signed by the CA the \
             server trusts",
        ),
        (
            "alert: UnknownCA",
            ErrorCode::PermissionDenied,
            "the server does not trust the CA that signed the client certificate",
        ),
        (
            "UnknownIssuer",
            ErrorCode::BadArguments,
            "the server's certificate is not signed by the CA the client trusts",
        ),
        // Another CA of the same name.
        (
            "invalid peer certificate: BadSignature",
            ErrorCode::BadArguments,
            "the server's certificate is not signed by the CA the client trusts",
        ),
        (
            "NotValidForName",
            ErrorCode::BadArguments,
            "the server's certificate does not name the endpoint's host",
        ),
    ];
    if message.contains("certificate") && message.contains("Expired") && !message.contains("alert")
    {
        return Some((
            ErrorCode::BadArguments,
            "the server's certificate has expired (or is not valid yet)",
        ));
    }
    MISMATCHES
        .iter()
        .find(|(words, _, _)| message.contains(words))
        .map(|&(_, code, what)| (code, what))
}

/// Codes that describe the moment rather than the request: trying again may work.
/// OUTCOME_UNKNOWN is one: for a write it is indeterminate, never retry-safe.
fn is_transient(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotLeader
            | ErrorCode::OutcomeUnknown
            | ErrorCode::Unavailable
            | ErrorCode::Timeout
            | ErrorCode::Internal
            | ErrorCode::SlowConsumer
    )
}

/// The code named by the `concord-error-code` metadata entry, if any.
fn code_from_metadata(status: &tonic::Status) -> Option<ErrorCode> {
    let value = status.metadata().get(ERROR_CODE_METADATA_KEY)?;
    parse_code_name(value.to_str().ok()?)
}

/// The leader named by `concord-leader-id` / `concord-leader-addr`, if any.
fn leader_from_metadata(status: &tonic::Status) -> Option<LeaderHint> {
    let get = |key: &str| status.metadata().get(key)?.to_str().ok();
    let id = get(LEADER_ID_METADATA_KEY)?.parse().ok()?;
    let client_addr = get(LEADER_ADDR_METADATA_KEY).map(str::to_owned);
    Some(LeaderHint { id, client_addr })
}

/// The code named by a `CODE: rest` message prefix, and the rest of the message.
fn code_from_message(message: &str) -> Option<(ErrorCode, &str)> {
    let (name, rest) = match message.split_once(':') {
        Some((name, rest)) => (name, rest.strip_prefix(' ').unwrap_or(rest)),
        None => (message, ""),
    };
    parse_code_name(name).map(|code| (code, rest))
}

/// Removes a leading `CODE: ` from a message when it names `code`.
fn strip_code_prefix(message: &str, code: ErrorCode) -> &str {
    match code_from_message(message) {
        Some((found, rest)) if found == code => rest,
        _ => message,
    }
}

/// Parses an `ErrorCode` name; the unspecified code is not a real code.
fn parse_code_name(name: &str) -> Option<ErrorCode> {
    ErrorCode::from_str_name(name.trim()).filter(|code| *code != ErrorCode::Unspecified)
}

/// Maps a gRPC code to the closest Concord code, for statuses without one.
pub fn code_from_grpc(code: Code) -> ErrorCode {
    match code {
        Code::Ok => ErrorCode::Unspecified,
        Code::AlreadyExists => ErrorCode::NodeExists,
        Code::NotFound => ErrorCode::NoNode,
        Code::FailedPrecondition => ErrorCode::BadState,
        Code::InvalidArgument => ErrorCode::BadArguments,
        Code::OutOfRange => ErrorCode::ZxidCompacted,
        Code::ResourceExhausted => ErrorCode::QuotaExceeded,
        Code::PermissionDenied | Code::Unauthenticated => ErrorCode::PermissionDenied,
        Code::DeadlineExceeded | Code::Cancelled => ErrorCode::Timeout,
        Code::Unavailable | Code::Aborted => ErrorCode::Unavailable,
        Code::Unimplemented => ErrorCode::Unimplemented,
        Code::Internal | Code::Unknown | Code::DataLoss => ErrorCode::Internal,
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
