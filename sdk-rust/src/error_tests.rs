//! Tests of error-code parsing and of the retry / indeterminate classification.

use super::*;
use tonic::metadata::MetadataMap;
use tonic::Status;

fn with_metadata(code: Code, message: &str, name: &str) -> Status {
    let mut metadata = MetadataMap::new();
    metadata.insert(
        ERROR_CODE_METADATA_KEY,
        name.parse().expect("valid metadata value"),
    );
    Status::with_metadata(code, message, metadata)
}

#[test]
fn code_comes_from_metadata_first() {
    // The metadata wins even over a message that names another code.
    let status = with_metadata(Code::NotFound, "NO_NODE: /a does not exist", "NODE_EXISTS");
    let err = Error::from_status(&status, CallKind::Read);
    assert_eq!(err.code(), ErrorCode::NodeExists);
    assert_eq!(err.origin(), Origin::Server);
    // The prefix names another code, so it is kept.
    assert_eq!(err.message(), "NO_NODE: /a does not exist");
}

#[test]
fn metadata_code_strips_matching_prefix() {
    let status = with_metadata(Code::NotFound, "NO_NODE: /a does not exist", "NO_NODE");
    let err = Error::from_status(&status, CallKind::Read);
    assert_eq!(err.code(), ErrorCode::NoNode);
    assert_eq!(err.message(), "/a does not exist");
    assert_eq!(err.to_string(), "NO_NODE: /a does not exist");
    assert_eq!(err.grpc_code(), Code::NotFound);
}

#[test]
fn bad_metadata_falls_back_to_message_prefix() {
    let status = with_metadata(Code::FailedPrecondition, "BAD_VERSION: want 3", "NOPE");
    let err = Error::from_status(&status, CallKind::Write);
    assert_eq!(err.code(), ErrorCode::BadVersion);
    assert_eq!(err.message(), "want 3");
    assert_eq!(err.origin(), Origin::Server);
}

#[test]
fn code_comes_from_message_prefix() {
    let status = Status::new(Code::FailedPrecondition, "NOT_EMPTY: /a has 2 children");
    let err = Error::from_status(&status, CallKind::Write);
    assert_eq!(err.code(), ErrorCode::NotEmpty);
    assert_eq!(err.message(), "/a has 2 children");
    assert_eq!(err.origin(), Origin::Server);
}

#[test]
fn bare_code_message_parses() {
    let status = Status::new(Code::Unavailable, "NOT_LEADER");
    let err = Error::from_status(&status, CallKind::Write);
    assert_eq!(err.code(), ErrorCode::NotLeader);
    assert_eq!(err.message(), "");
}

#[test]
fn unknown_prefix_falls_back_to_grpc_code() {
    let status = Status::new(Code::AlreadyExists, "something: else");
    let err = Error::from_status(&status, CallKind::Write);
    assert_eq!(err.code(), ErrorCode::NodeExists);
    assert_eq!(err.message(), "something: else");
    assert_eq!(err.origin(), Origin::Transport);
}

#[test]
fn unspecified_is_never_parsed() {
    let status = Status::new(Code::Internal, "ERROR_CODE_UNSPECIFIED: odd");
    let err = Error::from_status(&status, CallKind::Read);
    assert_eq!(err.code(), ErrorCode::Internal);
    assert_eq!(err.origin(), Origin::Transport);
}

#[test]
fn grpc_code_mapping() {
    let cases = [
        (Code::AlreadyExists, ErrorCode::NodeExists),
        (Code::NotFound, ErrorCode::NoNode),
        (Code::FailedPrecondition, ErrorCode::BadState),
        (Code::InvalidArgument, ErrorCode::BadArguments),
        (Code::OutOfRange, ErrorCode::ZxidCompacted),
        (Code::ResourceExhausted, ErrorCode::QuotaExceeded),
        (Code::PermissionDenied, ErrorCode::PermissionDenied),
        (Code::Unauthenticated, ErrorCode::PermissionDenied),
        (Code::DeadlineExceeded, ErrorCode::Timeout),
        (Code::Cancelled, ErrorCode::Timeout),
        (Code::Unavailable, ErrorCode::Unavailable),
        (Code::Unimplemented, ErrorCode::Unimplemented),
        (Code::Internal, ErrorCode::Internal),
        (Code::Unknown, ErrorCode::Internal),
    ];
    for (grpc, want) in cases {
        assert_eq!(code_from_grpc(grpc), want, "{grpc:?}");
    }
}

#[test]
fn connect_error_in_source_chain_means_not_sent() {
    let connect = tonic::ConnectError(Box::new(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "refused",
    )));
    let status = Status::from_error(Box::new(connect));
    assert_eq!(status.code(), Code::Unavailable);
    let err = Error::from_status(&status, CallKind::Write);
    assert_eq!(err.origin(), Origin::NotSent);
    assert_eq!(err.code(), ErrorCode::Unavailable);
    assert!(err.is_retry_safe());
    assert!(!err.is_indeterminate());
}

fn server(code: &str, call: CallKind) -> Error {
    Error::from_status(&with_metadata(Code::Unknown, "x", code), call)
}

fn transport(code: Code, call: CallKind) -> Error {
    Error::from_status(&Status::new(code, "stream reset"), call)
}

#[test]
fn request_errors_are_neither_retryable_nor_indeterminate() {
    for name in [
        "NODE_EXISTS",
        "NO_NODE",
        "BAD_VERSION",
        "BAD_PATH",
        "BAD_ARGUMENTS",
        "DATA_TOO_LARGE",
        "SESSION_EXPIRED",
        "FENCED",
        "PERMISSION_DENIED",
        "QUOTA_EXCEEDED",
        "ZXID_COMPACTED",
        "UNIMPLEMENTED",
        "BAD_MESSAGE",
        "MESSAGE_TOO_LARGE",
        "RESPONSE_TOO_LARGE",
    ] {
        for call in [CallKind::Read, CallKind::Write] {
            let err = server(name, call);
            assert!(!err.is_retry_safe(), "{name} {call:?}");
            assert!(!err.is_indeterminate(), "{name} {call:?}");
        }
    }
}

#[test]
fn transient_read_errors_are_retry_safe() {
    for name in ["NOT_LEADER", "UNAVAILABLE", "TIMEOUT", "INTERNAL"] {
        let err = server(name, CallKind::Read);
        assert!(err.is_retry_safe(), "{name}");
        assert!(!err.is_indeterminate(), "{name}");
    }
    let err = transport(Code::DeadlineExceeded, CallKind::Read);
    assert!(err.is_retry_safe());
    assert!(!err.is_indeterminate());
}

#[test]
fn not_leader_write_is_retry_safe() {
    let err = server("NOT_LEADER", CallKind::Write);
    assert!(err.is_retry_safe());
    assert!(!err.is_indeterminate());
}

#[test]
fn write_that_may_have_been_sent_is_indeterminate() {
    for err in [
        server("TIMEOUT", CallKind::Write),
        server("UNAVAILABLE", CallKind::Write),
        server("INTERNAL", CallKind::Write),
        transport(Code::DeadlineExceeded, CallKind::Write),
        transport(Code::Cancelled, CallKind::Write),
        transport(Code::Unavailable, CallKind::Write),
        transport(Code::Unknown, CallKind::Write),
        transport(Code::Internal, CallKind::Write),
    ] {
        assert!(err.is_indeterminate(), "{err:?}");
        assert!(!err.is_retry_safe(), "{err:?}");
    }
}

#[test]
fn client_errors_are_not_retryable() {
    let err = Error::client(ErrorCode::BadArguments, "bad endpoint");
    assert_eq!(err.to_string(), "BAD_ARGUMENTS: bad endpoint");
    assert!(!err.is_retry_safe());
    assert!(!err.is_indeterminate());
}

#[test]
fn codes_for_failures_below_the_services_parse() {
    // As the server sends them: the code in the metadata and as the message prefix.
    for (grpc, name, code) in [
        (Code::InvalidArgument, "BAD_MESSAGE", ErrorCode::BadMessage),
        (
            Code::ResourceExhausted,
            "MESSAGE_TOO_LARGE",
            ErrorCode::MessageTooLarge,
        ),
        (
            Code::ResourceExhausted,
            "RESPONSE_TOO_LARGE",
            ErrorCode::ResponseTooLarge,
        ),
        (Code::DeadlineExceeded, "TIMEOUT", ErrorCode::Timeout),
    ] {
        let message = format!("{name}: /concord.v1.Tree/Get: something");
        let err = Error::from_status(&with_metadata(grpc, &message, name), CallKind::Read);
        assert_eq!(err.code(), code);
        assert_eq!(err.message(), "/concord.v1.Tree/Get: something");
        assert_eq!(err.origin(), Origin::Server);
        // Without the metadata, the prefix alone is enough.
        let err = Error::from_status(&Status::new(grpc, message), CallKind::Read);
        assert_eq!(err.code(), code);
    }
}

#[test]
fn a_clipped_path_in_a_message_parses() {
    let message = "BAD_PATH: \"/aaaa…(65536 bytes)\": path is 65536 bytes, more than 4096";
    let err = Error::from_status(
        &with_metadata(Code::InvalidArgument, message, "BAD_PATH"),
        CallKind::Write,
    );
    assert_eq!(err.code(), ErrorCode::BadPath);
    assert!(err.message().starts_with("\"/aaaa…(65536 bytes)\""));
}

#[test]
fn a_multi_names_its_failed_op() {
    let err = server_message(
        "BAD_VERSION",
        "BAD_VERSION: op 3: /a is at version 2, not 1",
    );
    assert_eq!(err.code(), ErrorCode::BadVersion);
    assert_eq!(err.op_index(), Some(3));
    assert_eq!(err.message(), "op 3: /a is at version 2, not 1");
    let err = server_message("BAD_PATH", "BAD_PATH: op 0: \"a\": path must start with /");
    assert_eq!(err.op_index(), Some(0));
    for other in ["NO_NODE: /op 3: x", "NO_NODE: op x: y", "NO_NODE: op 3"] {
        assert_eq!(server_message("NO_NODE", other).op_index(), None, "{other}");
    }
}

fn server_message(code: &str, message: &str) -> Error {
    Error::from_status(
        &with_metadata(Code::FailedPrecondition, message, code),
        CallKind::Write,
    )
}

#[test]
fn not_leader_carries_the_leader_hint() {
    let mut status = with_metadata(
        Code::Unavailable,
        "NOT_LEADER: this server does not lead; the leader is server 2 at 127.0.0.1:7191",
        "NOT_LEADER",
    );
    let metadata = status.metadata_mut();
    metadata.insert(LEADER_ID_METADATA_KEY, "2".parse().unwrap());
    metadata.insert(LEADER_ADDR_METADATA_KEY, "127.0.0.1:7191".parse().unwrap());
    let err = Error::from_status(&status, CallKind::Write);
    let hint = err.leader_hint().expect("a hint");
    assert_eq!(hint.id, 2);
    assert_eq!(hint.client_addr.as_deref(), Some("127.0.0.1:7191"));
    assert!(err.is_retry_safe());
    assert!(server("NOT_LEADER", CallKind::Write)
        .leader_hint()
        .is_none());
}

#[test]
fn outcome_unknown_is_indeterminate_for_a_write_and_retryable_for_a_read() {
    let write = server("OUTCOME_UNKNOWN", CallKind::Write);
    assert!(write.is_indeterminate());
    assert!(!write.is_retry_safe());
    let read = server("OUTCOME_UNKNOWN", CallKind::Read);
    assert!(read.is_retry_safe());
    assert!(!read.is_indeterminate());
}
