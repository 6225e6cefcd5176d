//! Tests of the status mapping: the code in three carriers, one Multi shape, short
//! trailers whatever the input, and codes for the statuses tonic raises.

use prost::Message;
use tonic::metadata::MetadataMap;

use super::*;
use crate::api::convert::check_path;
use crate::tree::path::PATH_BYTES_MAX;

/// The trailers a status becomes, in bytes as HTTP/2 (and gRPC C-core's 8 KiB limit)
/// counts them: name + value + 32 per entry.
pub(crate) fn trailer_bytes(s: &Status) -> usize {
    let mut headers = http::HeaderMap::new();
    s.add_header(&mut headers).unwrap();
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum::<usize>()
        + "grpc-status".len()
}

/// The message inside the google.rpc.Status of `grpc-status-details-bin`.
fn details_message(s: &Status) -> String {
    tonic_types::pb::Status::decode(s.details())
        .unwrap()
        .message
}

fn header_code(s: &Status) -> &str {
    s.metadata()
        .get(ERROR_CODE_HEADER)
        .unwrap()
        .to_str()
        .unwrap()
}

/// The code in all three carriers, and the same message in both places.
fn assert_carries(s: &Status, code: &str) {
    assert!(s.message().starts_with(&format!("{code}: ")), "{s:?}");
    assert_eq!(header_code(s), code);
    let info = s.get_details_error_info().unwrap();
    assert_eq!(info.reason, code);
    assert_eq!(info.domain, ERROR_DOMAIN);
    assert_eq!(details_message(s), s.message());
}

fn bad_version(path: &str) -> TreeError {
    TreeError::BadVersion {
        path: path.into(),
        expected: 1,
        actual: 3,
    }
}

#[test]
fn status_carries_the_code_three_ways() {
    let s = error(ErrorCode::NoNode, "/a does not exist");
    assert_eq!(s.code(), Code::NotFound);
    assert_eq!(s.message(), "NO_NODE: /a does not exist");
    assert_carries(&s, "NO_NODE");
    assert!(s.get_details_error_info().unwrap().metadata.is_empty());
}

#[test]
fn a_multi_op_has_one_shape_from_validation_and_from_apply() {
    // Apply: the tree names the op.
    let applied: Status = TreeError::MultiOp {
        index: 2,
        source: Box::new(bad_version("/a")),
    }
    .into();
    assert_eq!(applied.code(), Code::FailedPrecondition);
    assert_eq!(
        applied.message(),
        "BAD_VERSION: op 2: /a is at version 3, not 1"
    );
    assert_carries(&applied, "BAD_VERSION");
    let info = applied.get_details_error_info().unwrap();
    assert_eq!(info.metadata.get(OP_KEY).map(String::as_str), Some("2"));

    // Validation: the service re-shapes the op's own status.
    let validated = in_op(7, &check_path("a").unwrap_err());
    assert_eq!(validated.code(), Code::InvalidArgument);
    assert_eq!(
        validated.message(),
        "BAD_PATH: op 7: \"a\": path must start with /"
    );
    assert_carries(&validated, "BAD_PATH");
    let info = validated.get_details_error_info().unwrap();
    assert_eq!(info.metadata.get(OP_KEY).map(String::as_str), Some("7"));
    assert_eq!(
        validated.metadata().get(ERROR_CODE_HEADER).unwrap(),
        "BAD_PATH"
    );
}

#[test]
fn long_paths_are_clipped_and_trailers_stay_small() {
    let longest = format!("/{}", "a".repeat(PATH_BYTES_MAX - 1));
    let huge = format!("/{}", "b".repeat(65535));
    let multibyte = format!("/{}", "é".repeat(32768));
    let controls = format!("/{}", "\u{1}".repeat(65535));
    for path in [&longest, &huge, &multibyte, &controls] {
        let n = path.len();
        let statuses = [
            (Status::from(TreeError::NoNode { path: path.clone() }), n),
            (
                Status::from(TreeError::BadPath {
                    path: path.clone(),
                    reason: path.clone(),
                }),
                n,
            ),
            (
                Status::from(TreeError::MultiOp {
                    index: 1023,
                    source: Box::new(bad_version(path)),
                }),
                n,
            ),
            (check_path(&format!("{path}/")).unwrap_err(), n + 1),
            (
                in_op(1023, &check_path(&format!("x{path}")).unwrap_err()),
                n + 1,
            ),
            (
                Status::from(crate::recipes::RecipeError::Lost {
                    key: path.clone(),
                    session_id: 1,
                    expired: true,
                }),
                n,
            ),
        ];
        for (s, len) in statuses {
            assert!(s.code() != Code::Ok);
            assert!(
                trailer_bytes(&s) < TRAILER_BYTES_MAX,
                "{} bytes: {}",
                trailer_bytes(&s),
                s.message()
            );
            assert!(
                s.message().contains(&format!("…({len} bytes)")),
                "{}",
                s.message()
            );
        }
    }
    // A path that fits is shown whole.
    let s = Status::from(TreeError::NoNode {
        path: "/short/path".into(),
    });
    assert_eq!(s.message(), "NO_NODE: /short/path does not exist");
}

#[test]
fn any_message_is_capped() {
    for unit in ["x", "é", "中", "\u{1}", "%"] {
        let text = unit.repeat(1 << 20);
        let s = error(ErrorCode::Internal, &text);
        assert!(s.message().len() <= MESSAGE_BYTES_MAX, "{unit:?}");
        assert!(s.message().ends_with(" bytes)"), "{unit:?}");
        assert_eq!(details_message(&s), s.message());
        assert!(
            trailer_bytes(&s) < TRAILER_BYTES_MAX,
            "{unit:?}: {}",
            trailer_bytes(&s)
        );
        let s = at_op(ErrorCode::BadVersion, 1023, &text);
        assert!(s.message().starts_with("BAD_VERSION: op 1023: "));
        assert!(
            trailer_bytes(&s) < TRAILER_BYTES_MAX,
            "{unit:?}: {}",
            trailer_bytes(&s)
        );
    }
}

#[test]
fn every_code_maps_to_a_non_ok_status() {
    let mut v = 1;
    while let Ok(code) = ErrorCode::try_from(v) {
        assert_ne!(error(code, "x").code(), Code::Ok, "{code:?}");
        v += 1;
    }
    assert!(v > 25, "the codes end at {v}");
}

#[test]
fn framework_statuses_get_a_concord_code() {
    let m = "/concord.v1.Tree/Get";
    let cases = [
        (
            Status::internal("failed to decode Protobuf message: buffer underflow"),
            "BAD_MESSAGE",
            Code::InvalidArgument,
        ),
        (
            Status::internal("Unexpected EOF decoding stream."),
            "BAD_MESSAGE",
            Code::InvalidArgument,
        ),
        (
            Status::out_of_range(
                "Error, decoded message length too large: found 5 bytes, the limit is: 4 bytes",
            ),
            "MESSAGE_TOO_LARGE",
            Code::ResourceExhausted,
        ),
        (
            Status::resource_exhausted(
                "Error decompressing: size limit, of 4 bytes, exceeded while decompressing message",
            ),
            "MESSAGE_TOO_LARGE",
            Code::ResourceExhausted,
        ),
        (
            Status::out_of_range(
                "Error, encoded message length too large: found 5 bytes, the limit is: 4 bytes",
            ),
            "RESPONSE_TOO_LARGE",
            Code::ResourceExhausted,
        ),
        (
            Status::internal("Error encoding: oops"),
            "INTERNAL",
            Code::Internal,
        ),
        (
            Status::unimplemented(""),
            "UNIMPLEMENTED",
            Code::Unimplemented,
        ),
        (
            Status::cancelled("Timeout expired"),
            "TIMEOUT",
            Code::DeadlineExceeded,
        ),
        (Status::unknown("?"), "INTERNAL", Code::Internal),
    ];
    for (raised, code, grpc) in cases {
        let s = framework_status(&raised, m);
        assert_carries(&s, code);
        assert_eq!(s.code(), grpc, "{raised:?}");
        assert!(s.message().contains(m), "{s:?}");
    }
    // A coded status is left alone.
    let coded = error(ErrorCode::NoNode, "/a does not exist");
    assert_eq!(framework_status(&coded, m).message(), coded.message());
    // A status with the header but an odd value is not "coded".
    let mut metadata = MetadataMap::new();
    metadata.insert(ERROR_CODE_HEADER, "NOPE".parse().unwrap());
    let odd = Status::with_metadata(Code::Internal, "x", metadata);
    assert_eq!(code_of(&odd), None);
}

#[test]
fn not_leader_names_the_leader_in_the_message_metadata_and_error_info() {
    let s: Status = ReplicaError::NotLeader {
        leader: Some(3),
        client_addr: Some("127.0.0.1:7191".parse().unwrap()),
        why: "cannot reach leader 3".into(),
    }
    .into();
    assert_eq!(s.code(), Code::Unavailable);
    assert!(s.message().starts_with("NOT_LEADER: "), "{}", s.message());
    assert!(
        s.message().contains("server 3 at 127.0.0.1:7191"),
        "{}",
        s.message()
    );
    let header = |k: &str| s.metadata().get(k).unwrap().to_str().unwrap().to_owned();
    assert_eq!(header(ERROR_CODE_HEADER), "NOT_LEADER");
    assert_eq!(header(LEADER_ID_HEADER), "3");
    assert_eq!(header(LEADER_ADDR_HEADER), "127.0.0.1:7191");
    let info = s.get_details_error_info().unwrap();
    assert_eq!(
        info.metadata.get("leader_id").map(String::as_str),
        Some("3")
    );
    assert_eq!(
        info.metadata.get("leader_addr").map(String::as_str),
        Some("127.0.0.1:7191")
    );
    let unknown: Status = ReplicaError::Indeterminate("x".into()).into();
    assert_eq!(code_name(&unknown), "OUTCOME_UNKNOWN");
}

fn code_name(s: &Status) -> String {
    s.metadata()
        .get(ERROR_CODE_HEADER)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}
