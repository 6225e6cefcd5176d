//! Client-visible failures: a gRPC status whose message starts with the machine code
//! ("NO_NODE: /a does not exist"), with the code also in the `concord-error-code`
//! metadata and in a google.rpc.ErrorInfo detail (reason = code, domain = "concord").
//!
//! This is the only place that maps internal errors to statuses.

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
        E::BadPath | E::DataTooLarge | E::BadArguments => Code::InvalidArgument,
        E::NotLeader | E::Unavailable | E::OutcomeUnknown => Code::Unavailable,
        E::QuotaExceeded | E::SlowConsumer => Code::ResourceExhausted,
        E::PermissionDenied => Code::PermissionDenied,
        E::ZxidCompacted => Code::OutOfRange,
        E::Timeout => Code::DeadlineExceeded,
        E::Unimplemented => Code::Unimplemented,
        E::Internal | E::Unspecified => Code::Internal,
    }
}

/// Builds the status for a machine code and a human message.
pub fn error(code: ErrorCode, message: impl std::fmt::Display) -> Status {
    let name = code.as_str_name();
    let details = ErrorDetails::with_error_info(name, ERROR_DOMAIN, []);
    let mut status =
        Status::with_error_details(grpc_code(code), format!("{name}: {message}"), details);
    if let Ok(value) = name.parse() {
        status.metadata_mut().insert(ERROR_CODE_HEADER, value);
    }
    status
}

/// Metadata keys naming the leader in NOT_LEADER (also ErrorInfo metadata
/// `leader_id` and `leader_addr`).
pub const LEADER_ID_HEADER: &str = "concord-leader-id";
pub const LEADER_ADDR_HEADER: &str = "concord-leader-addr";

/// NOT_LEADER with the leader hint, if known, in the ErrorInfo metadata and in
/// `concord-leader-id` / `concord-leader-addr`.
fn not_leader(e: &ReplicaError, leader: Option<u64>, addr: Option<std::net::SocketAddr>) -> Status {
    let code = ErrorCode::NotLeader;
    let name = code.as_str_name();
    let mut info = Vec::new();
    if let Some(id) = leader {
        info.push(("leader_id".to_owned(), id.to_string()));
    }
    if let Some(addr) = addr {
        info.push(("leader_addr".to_owned(), addr.to_string()));
    }
    let metadata: std::collections::HashMap<String, String> = info.iter().cloned().collect();
    let details = ErrorDetails::with_error_info(name, ERROR_DOMAIN, metadata);
    let mut status = Status::with_error_details(grpc_code(code), format!("{name}: {e}"), details);
    let metadata = status.metadata_mut();
    if let Ok(value) = name.parse() {
        metadata.insert(ERROR_CODE_HEADER, value);
    }
    for (key, value) in info {
        let header = if key == "leader_id" {
            LEADER_ID_HEADER
        } else {
            LEADER_ADDR_HEADER
        };
        if let Ok(value) = value.parse() {
            metadata.insert(header, value);
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
    }
}

impl From<TreeError> for Status {
    fn from(e: TreeError) -> Status {
        error(tree_code(&e), e)
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
                client_addr,
                ..
            } => not_leader(&e, leader, client_addr),
            ReplicaError::Indeterminate(_) => error(ErrorCode::OutcomeUnknown, e),
            ReplicaError::Timeout { .. } => error(ErrorCode::Timeout, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_carries_the_code_three_ways() {
        let s: Status = TreeError::MultiOp {
            index: 2,
            source: Box::new(TreeError::BadVersion {
                path: "/a".into(),
                expected: 1,
                actual: 3,
            }),
        }
        .into();
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert!(s
            .message()
            .starts_with("BAD_VERSION: op 2: /a is at version 3"));
        assert_eq!(
            s.metadata()
                .get(ERROR_CODE_HEADER)
                .unwrap()
                .to_str()
                .unwrap(),
            "BAD_VERSION"
        );
        let info = s.get_details_error_info().unwrap();
        assert_eq!(info.reason, "BAD_VERSION");
        assert_eq!(info.domain, ERROR_DOMAIN);
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

    #[test]
    fn every_code_maps_to_a_non_ok_status() {
        for v in 0..=22 {
            let code = ErrorCode::try_from(v).unwrap();
            assert_ne!(error(code, "x").code(), Code::Ok);
        }
    }
}
