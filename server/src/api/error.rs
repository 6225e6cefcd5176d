//! Client-visible failures: a gRPC status whose message starts with the machine code
//! ("NO_NODE: /a does not exist"), with the code also in the `concord-error-code`
//! metadata and in a google.rpc.ErrorInfo detail (reason = code, domain = "concord").
//!
//! This is the only place that maps internal errors (and, through `framework_status`,
//! the statuses tonic raises itself) to statuses.
//!
//! Size: the message travels twice, in `grpc-message` (percent-encoded) and inside
//! the google.rpc.Status of `grpc-status-details-bin` (base64), and gRPC C-core
//! clients drop a call whose metadata passes 8 KiB. Client-given text is clipped
//! where messages are built (`tree::path::clip`), and `error` cuts any message to
//! `MESSAGE_BYTES_MAX`, so the trailers of any failure stay under `TRAILER_BYTES_MAX`.
//!
//! A failed op of a Multi reads `CODE: op N: ...` whether validation or apply refused
//! it, and its ErrorInfo carries N under `op` (`at_op`).

use concord_proto::v1::ErrorCode;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::recipes::RecipeError;
use crate::replica::ReplicaError;
use crate::tree::TreeError;

/// Metadata key holding the machine-readable code.
pub const ERROR_CODE_HEADER: &str = "concord-error-code";
/// ErrorInfo domain of Concord's codes.
pub const ERROR_DOMAIN: &str = "concord";
/// ErrorInfo metadata key naming the failed op of a Multi (its index, from 0).
pub const OP_KEY: &str = "op";
/// Longest status message, in bytes ("CODE: ..."); a longer one is cut (`cap`).
pub const MESSAGE_BYTES_MAX: usize = 512;
/// Bound on the trailers of any failure (grpc-status, grpc-message,
/// grpc-status-details-bin, concord-error-code), in bytes as HTTP/2 counts them
/// (name + value + 32 per entry): what `MESSAGE_BYTES_MAX` guarantees, with room.
pub const TRAILER_BYTES_MAX: usize = 3072;

/// The gRPC code that carries each machine code (as documented in common.proto).
fn grpc_code(code: ErrorCode) -> Code {
    use ErrorCode as E;
    match code {
        E::NodeExists => Code::AlreadyExists,
        E::NoNode | E::SessionExpired => Code::NotFound,
        E::BadVersion
        | E::NotEmpty
        | E::NoChildrenForEphemerals
        | E::Fenced
        | E::LockHeld
        | E::BadState => Code::FailedPrecondition,
        E::BadPath | E::DataTooLarge | E::BadArguments | E::BadMessage => Code::InvalidArgument,
        E::NotLeader | E::Unavailable | E::OutcomeUnknown => Code::Unavailable,
        E::QuotaExceeded | E::SlowConsumer | E::MessageTooLarge | E::ResponseTooLarge => {
            Code::ResourceExhausted
        }
        E::PermissionDenied => Code::PermissionDenied,
        E::ZxidCompacted => Code::OutOfRange,
        E::Timeout => Code::DeadlineExceeded,
        E::Unimplemented => Code::Unimplemented,
        E::Internal | E::Unspecified => Code::Internal,
    }
}

/// Builds the status for a machine code and a human message.
pub fn error(code: ErrorCode, message: impl std::fmt::Display) -> Status {
    coded(code, [], format!("{}: {message}", code.as_str_name()))
}

/// The status of op `index` of a Multi: `CODE: op N: message`, N also in the
/// ErrorInfo under `op`.
pub fn at_op(code: ErrorCode, index: usize, message: impl std::fmt::Display) -> Status {
    let name = code.as_str_name();
    let op = (OP_KEY.to_string(), index.to_string());
    coded(code, [op], format!("{name}: op {index}: {message}"))
}

/// A Multi's validation failure of op `index`: the op's status, re-shaped by `at_op`.
pub fn in_op(index: usize, status: &Status) -> Status {
    let code = code_of(status).unwrap_or(ErrorCode::Internal);
    let message = status.message();
    let message = message
        .strip_prefix(code.as_str_name())
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(message);
    at_op(code, index, message)
}

/// The Concord code a status carries in its `concord-error-code` metadata.
pub fn code_of(status: &Status) -> Option<ErrorCode> {
    let value = status.metadata().get(ERROR_CODE_HEADER)?.to_str().ok()?;
    ErrorCode::from_str_name(value)
}

/// The status with `message` (already prefixed with the code) in all three carriers.
fn coded(
    code: ErrorCode,
    info: impl IntoIterator<Item = (String, String)>,
    message: String,
) -> Status {
    let name = code.as_str_name();
    let message = cap(message);
    let metadata: std::collections::HashMap<String, String> = info.into_iter().collect();
    let details = ErrorDetails::with_error_info(name, ERROR_DOMAIN, metadata);
    let mut status = Status::with_error_details(grpc_code(code), message, details);
    if let Ok(value) = name.parse() {
        status.metadata_mut().insert(ERROR_CODE_HEADER, value);
    }
    status
}

/// `message` cut to `MESSAGE_BYTES_MAX` bytes on a character boundary, ending in its
/// length when cut.
fn cap(mut message: String) -> String {
    if message.len() <= MESSAGE_BYTES_MAX {
        return message;
    }
    let total = message.len();
    // Room for "…(NNNNNNNNNN bytes)".
    let mut end = MESSAGE_BYTES_MAX - 32;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(&format!("…({total} bytes)"));
    message
}

/// Metadata keys naming the leader in NOT_LEADER (also ErrorInfo metadata
/// `leader_id` and `leader_addr`).
pub const LEADER_ID_HEADER: &str = "concord-leader-id";
pub const LEADER_ADDR_HEADER: &str = "concord-leader-addr";

/// NOT_LEADER with the leader hint, if known, in the ErrorInfo metadata and in
/// `concord-leader-id` / `concord-leader-addr`.
fn not_leader(
    e: &ReplicaError,
    leader: Option<u64>,
    addr: Option<&crate::address::Address>,
) -> Status {
    let code = ErrorCode::NotLeader;
    let mut hint = Vec::new();
    if let Some(id) = leader {
        hint.push(("leader_id", LEADER_ID_HEADER, id.to_string()));
    }
    if let Some(addr) = addr {
        hint.push(("leader_addr", LEADER_ADDR_HEADER, addr.to_string()));
    }
    let info = hint.iter().map(|(k, _, v)| (k.to_string(), v.clone()));
    let mut status = coded(code, info, format!("{}: {e}", code.as_str_name()));
    for (_, header, value) in hint {
        if let Ok(value) = value.parse() {
            status.metadata_mut().insert(header, value);
        }
    }
    status
}

/// BAD_ARGUMENTS with a message.
pub fn bad_arguments(message: impl std::fmt::Display) -> Status {
    error(ErrorCode::BadArguments, message)
}

/// The machine code of a tree error.
pub fn tree_code(e: &TreeError) -> ErrorCode {
    match e {
        TreeError::NodeExists { .. } => ErrorCode::NodeExists,
        TreeError::NoNode { .. } => ErrorCode::NoNode,
        TreeError::BadVersion { .. } => ErrorCode::BadVersion,
        TreeError::NotEmpty { .. } => ErrorCode::NotEmpty,
        TreeError::NoChildrenForEphemerals { .. } => ErrorCode::NoChildrenForEphemerals,
        TreeError::BadPath { .. } => ErrorCode::BadPath,
        TreeError::SessionExpired { .. } => ErrorCode::SessionExpired,
        TreeError::BadArguments(_) => ErrorCode::BadArguments,
        TreeError::NotReapable { .. } => ErrorCode::BadState,
        TreeError::Fenced { .. } => ErrorCode::Fenced,
        TreeError::Reserved { .. } => ErrorCode::PermissionDenied,
        TreeError::LockHeld { .. } => ErrorCode::LockHeld,
        TreeError::MultiOp { source, .. } => tree_code(source),
        TreeError::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
        // Nothing was done and the client may send it again at once.
        TreeError::GrantsChanged { .. } => ErrorCode::NotLeader,
    }
}

impl From<TreeError> for Status {
    fn from(e: TreeError) -> Status {
        match e {
            TreeError::MultiOp { index, source } => at_op(tree_code(&source), index, source),
            e => error(tree_code(&e), e),
        }
    }
}

impl From<RecipeError> for Status {
    fn from(e: RecipeError) -> Status {
        match e {
            RecipeError::Tree(e) => e.into(),
            RecipeError::Replica(e) => e.into(),
            RecipeError::Watch(e) => super::watch::watch_status(e),
            RecipeError::Timeout { .. } => error(ErrorCode::Timeout, e),
            RecipeError::Lost { expired: true, .. } => error(ErrorCode::SessionExpired, e),
            RecipeError::Lost { .. } => error(ErrorCode::NoNode, e),
            RecipeError::Denied(_) => error(ErrorCode::PermissionDenied, e),
            RecipeError::Unexpected(_) => error(ErrorCode::Internal, e),
        }
    }
}

impl From<ReplicaError> for Status {
    fn from(e: ReplicaError) -> Status {
        match e {
            ReplicaError::Unavailable(_) => error(ErrorCode::Unavailable, e),
            ReplicaError::NotLeader {
                leader,
                ref client_addr,
                ..
            } => not_leader(&e, leader, client_addr.as_ref()),
            ReplicaError::Indeterminate(_) => error(ErrorCode::OutcomeUnknown, e),
            ReplicaError::Timeout { .. } => error(ErrorCode::Timeout, e),
        }
    }
}

/// A status tonic raised itself (decoding, size limits, routing), with the Concord
/// code it stands for in all three carriers; `method` is the call's path. A status
/// that already has a Concord code is returned as it is.
pub fn framework_status(status: &Status, method: &str) -> Status {
    if code_of(status).is_some() {
        return status.clone();
    }
    let original = status.message();
    let code = framework_code(status.code(), original);
    let method = crate::tree::path::clip(method);
    match code {
        ErrorCode::BadMessage => error(
            code,
            format_args!("{method}: cannot decode the request ({original})"),
        ),
        ErrorCode::MessageTooLarge => error(
            code,
            format_args!("{method}: request too large ({original})"),
        ),
        ErrorCode::ResponseTooLarge => error(
            code,
            format_args!(
                "{method}: response too large ({original}); ask for less, e.g. with a page_size"
            ),
        ),
        ErrorCode::Unimplemented if original.is_empty() => error(
            code,
            format_args!("{method} is not a method of this server"),
        ),
        _ => error(code, format_args!("{method}: {original}")),
    }
}

/// The Concord code of a status tonic raised, from its gRPC code and message (tonic
/// has no other way to tell its failures apart).
fn framework_code(code: Code, message: &str) -> ErrorCode {
    use ErrorCode as E;
    let too_large = matches!(code, Code::OutOfRange | Code::ResourceExhausted);
    match code {
        _ if too_large && message.contains("encoded message length too large") => {
            E::ResponseTooLarge
        }
        _ if too_large && message.starts_with("Cannot return body") => E::ResponseTooLarge,
        _ if too_large && message.contains("decoded message length too large") => {
            E::MessageTooLarge
        }
        _ if too_large && message.contains("size limit") => E::MessageTooLarge,
        Code::Internal if message.starts_with("Error encoding") => E::Internal,
        Code::Internal if message.starts_with("Error compressing") => E::Internal,
        // Every other INTERNAL a server's codec raises is about the request: not
        // protobuf, a bad compression flag, a truncated body, no message at all.
        Code::Internal => E::BadMessage,
        Code::Unimplemented => E::Unimplemented,
        Code::Cancelled | Code::DeadlineExceeded => E::Timeout,
        Code::InvalidArgument | Code::OutOfRange => E::BadArguments,
        Code::ResourceExhausted => E::QuotaExceeded,
        Code::Unavailable | Code::Aborted => E::Unavailable,
        Code::PermissionDenied | Code::Unauthenticated => E::PermissionDenied,
        Code::NotFound => E::NoNode,
        Code::AlreadyExists => E::NodeExists,
        Code::FailedPrecondition => E::BadState,
        Code::Ok | Code::Unknown | Code::DataLoss => E::Internal,
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
