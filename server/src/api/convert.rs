//! Conversions between `concord.v1` messages and the server's own types, and the
//! input checks every request passes before it can change anything.

use bytes::Bytes;
use concord_proto::v1 as pb;
use tonic::Status;

use super::error::{bad_arguments, error};
use crate::tree::{path, Stat};
use crate::txn::{CreateMode, CreateOp, Fence, Zxid};
use concord_proto::v1::ErrorCode;

/// Limits applied to client input.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub node_data_bytes_max: usize,
}

pub fn stat(s: &Stat) -> pb::Stat {
    pb::Stat {
        czxid: s.czxid,
        mzxid: s.mzxid,
        pzxid: s.pzxid,
        ctime_ms: s.ctime_ms,
        mtime_ms: s.mtime_ms,
        version: s.version,
        cversion: s.cversion,
        aversion: s.aversion,
        ephemeral_owner: s.ephemeral_owner,
        data_length: s.data_length,
        num_children: s.num_children,
    }
}

pub fn header(server_id: u64, zxid: Zxid) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { zxid, server_id })
}

/// Checks a path against the rules: BAD_PATH if it breaks them.
pub fn check_path(p: &str) -> Result<(), Status> {
    path::validate(p).map_err(|reason| {
        error(
            ErrorCode::BadPath,
            format!("\"{}\": {}", path::clip(p), path::clip(&reason)),
        )
    })
}

/// Checks node data against the size limit (DATA_TOO_LARGE if over) and returns a
/// right-sized copy. Decoded request fields are slices of the whole receive buffer:
/// keeping one in the tree or the watch history would pin that buffer, so nothing
/// from a request is stored without this copy.
pub fn owned_data(data: &Bytes, limits: Limits) -> Result<Bytes, Status> {
    check_data(data, limits)?;
    Ok(Bytes::copy_from_slice(data))
}

/// Checks node data against the size limit: DATA_TOO_LARGE if over.
pub fn check_data(data: &[u8], limits: Limits) -> Result<(), Status> {
    if data.len() > limits.node_data_bytes_max {
        return Err(error(
            ErrorCode::DataTooLarge,
            format!(
                "{} bytes is more than the limit of {} bytes",
                data.len(),
                limits.node_data_bytes_max
            ),
        ));
    }
    Ok(())
}

/// Checks an expected version: -1 (any) or a real version.
pub fn check_version(version: i32) -> Result<(), Status> {
    if version < -1 {
        return Err(bad_arguments(format!(
            "version {version} is invalid: use -1 for any version, or a version >= 0"
        )));
    }
    Ok(())
}

pub fn create_mode(mode: i32) -> Result<CreateMode, Status> {
    let mode = pb::CreateMode::try_from(mode)
        .map_err(|_| bad_arguments(format!("unknown create mode {mode}")))?;
    Ok(match mode {
        pb::CreateMode::Persistent => CreateMode::Persistent,
        pb::CreateMode::Ephemeral => CreateMode::Ephemeral,
        pb::CreateMode::PersistentSequential => CreateMode::PersistentSequential,
        pb::CreateMode::EphemeralSequential => CreateMode::EphemeralSequential,
        pb::CreateMode::Container => CreateMode::Container,
        pb::CreateMode::PersistentWithTtl => CreateMode::PersistentWithTtl,
        pb::CreateMode::PersistentSequentialWithTtl => CreateMode::PersistentSequentialWithTtl,
    })
}

/// Validates and converts one create (top-level or inside a Multi).
pub fn create_op(
    path: String,
    data: Bytes,
    mode: i32,
    ttl_ms: i64,
    session_id: u64,
    limits: Limits,
) -> Result<CreateOp, Status> {
    let op = CreateOp {
        path,
        data,
        mode: create_mode(mode)?,
        ttl_ms,
        null_data: false,
    };
    check_create(op, session_id, limits)
}

/// Validates one create of any door, made under `session_id` (0: none), and
/// returns it with its data copied (`owned_data`).
pub fn check_create(op: CreateOp, session_id: u64, limits: Limits) -> Result<CreateOp, Status> {
    let CreateOp {
        path,
        data,
        mode,
        ttl_ms,
        null_data,
    } = op;
    // A sequential name may end in "/" (the suffix becomes the last segment).
    if mode.is_sequential() {
        check_path(&format!("{path}0"))?;
    } else {
        check_path(&path)?;
    }
    let data = owned_data(&data, limits)?;
    if mode.is_ttl() && ttl_ms <= 0 {
        return Err(bad_arguments("TTL modes need ttl_ms > 0"));
    }
    if !mode.is_ttl() && ttl_ms != 0 {
        return Err(bad_arguments("ttl_ms is only for the TTL create modes"));
    }
    if mode.is_ephemeral() && session_id == 0 {
        return Err(bad_arguments(
            "ephemeral nodes need a session_id (open one with Session.Open)",
        ));
    }
    Ok(CreateOp {
        path,
        data,
        mode,
        ttl_ms,
        null_data,
    })
}

/// A write's fence, checked for shape; the tree checks that it holds at apply time.
pub fn fence(fence: Option<pb::Fence>) -> Result<Option<Fence>, Status> {
    let Some(f) = fence else {
        return Ok(None);
    };
    check_path(&f.key)?;
    if f.token == 0 {
        return Err(bad_arguments(
            "a fence needs the token Lock.Acquire or Election.Campaign returned",
        ));
    }
    Ok(Some(Fence {
        key: f.key,
        token: f.token,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        node_data_bytes_max: 8,
    };

    fn code(s: Status) -> String {
        s.metadata()
            .get(super::super::error::ERROR_CODE_HEADER)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn create_checks_each_field() {
        let ok = |p: &str, mode: i32, ttl: i64, sid: u64| {
            create_op(p.into(), Bytes::new(), mode, ttl, sid, LIMITS)
        };
        assert!(ok("/a", 0, 0, 0).is_ok());
        assert!(ok("/a/", 2, 0, 0).is_ok(), "sequential may end in /");
        assert_eq!(code(ok("/a/", 0, 0, 0).unwrap_err()), "BAD_PATH");
        assert_eq!(code(ok("/a", 1, 0, 0).unwrap_err()), "BAD_ARGUMENTS");
        assert_eq!(code(ok("/a", 5, 0, 0).unwrap_err()), "BAD_ARGUMENTS");
        assert!(ok("/a", 5, 1000, 0).is_ok());
        assert_eq!(code(ok("/a", 0, 5, 0).unwrap_err()), "BAD_ARGUMENTS");
        assert_eq!(code(ok("/a", 99, 0, 0).unwrap_err()), "BAD_ARGUMENTS");
        let big = create_op("/a".into(), Bytes::from(vec![0; 9]), 0, 0, 0, LIMITS);
        assert_eq!(code(big.unwrap_err()), "DATA_TOO_LARGE");
    }

    #[test]
    fn versions_and_fences() {
        assert!(check_version(-1).is_ok());
        assert!(check_version(0).is_ok());
        assert_eq!(code(check_version(-2).unwrap_err()), "BAD_ARGUMENTS");
        let f = |key: &str, token| {
            fence(Some(pb::Fence {
                key: key.into(),
                token,
            }))
        };
        assert_eq!(fence(None).unwrap(), None);
        assert_eq!(code(f("k", 1).unwrap_err()), "BAD_PATH");
        assert_eq!(code(f("/k", 0).unwrap_err()), "BAD_ARGUMENTS");
        assert_eq!(f("/k", 7).unwrap().unwrap().token, 7);
    }
}
