//! Builders for the operations of a [`Client::multi`](crate::Client::multi) call.
//!
//! Each function spells one kind of op in one call; they only build values.

use concord_proto::v1::{self as proto, op, CheckOp, CreateMode, CreateOp, DeleteOp, SetOp};

/// One operation of a multi: build it with [`create`], [`set`], [`delete`] or [`check`].
#[derive(Debug, Clone, PartialEq)]
pub struct Op(pub(crate) proto::Op);

/// Create `path` with `data` in `mode` (ephemerals belong to the multi's session).
pub fn create(path: impl Into<String>, data: impl Into<Vec<u8>>, mode: CreateMode) -> Op {
    create_with_ttl(path, data, mode, 0)
}

/// Create `path` in a TTL `mode` that is deleted after `ttl_ms` idle milliseconds.
pub fn create_with_ttl(
    path: impl Into<String>,
    data: impl Into<Vec<u8>>,
    mode: CreateMode,
    ttl_ms: i64,
) -> Op {
    wrap(op::Op::Create(CreateOp {
        path: path.into(),
        data: bytes(data),
        mode: mode as i32,
        ttl_ms,
    }))
}

/// Replace the data of `path` if its version is `version` (-1: any).
pub fn set(path: impl Into<String>, data: impl Into<Vec<u8>>, version: i32) -> Op {
    wrap(op::Op::Set(SetOp {
        path: path.into(),
        data: bytes(data),
        version,
    }))
}

/// Delete `path` if its version is `version` (-1: any).
pub fn delete(path: impl Into<String>, version: i32) -> Op {
    wrap(op::Op::Delete(DeleteOp {
        path: path.into(),
        version,
    }))
}

/// Succeed only if `path` exists with version `version` (-1: any).
pub fn check(path: impl Into<String>, version: i32) -> Op {
    wrap(op::Op::Check(CheckOp {
        path: path.into(),
        version,
    }))
}

impl Op {
    /// Whether this op creates an ephemeral node (owned by the multi's session).
    pub(crate) fn is_ephemeral_create(&self) -> bool {
        let ephemeral = [CreateMode::Ephemeral, CreateMode::EphemeralSequential];
        matches!(&self.0.op, Some(op::Op::Create(c)) if ephemeral.iter().any(|m| *m as i32 == c.mode))
    }
}

fn wrap(op: op::Op) -> Op {
    Op(proto::Op { op: Some(op) })
}

/// Node data in the form the generated messages hold.
fn bytes(data: impl Into<Vec<u8>>) -> tonic::codegen::Bytes {
    let data: Vec<u8> = data.into();
    data.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_fill_the_oneof() {
        let op = create("/a", "x", CreateMode::EphemeralSequential);
        match op.0.op {
            Some(op::Op::Create(c)) => {
                assert_eq!(c.path, "/a");
                assert_eq!(&c.data[..], b"x");
                assert_eq!(c.mode, CreateMode::EphemeralSequential as i32);
                assert_eq!(c.ttl_ms, 0);
            }
            other => panic!("not a create: {other:?}"),
        }
        match set("/b", vec![1u8], 3).0.op {
            Some(op::Op::Set(s)) => assert_eq!((s.path.as_str(), s.version), ("/b", 3)),
            other => panic!("not a set: {other:?}"),
        }
        match delete("/c", -1).0.op {
            Some(op::Op::Delete(d)) => assert_eq!((d.path.as_str(), d.version), ("/c", -1)),
            other => panic!("not a delete: {other:?}"),
        }
        match check("/d", 7).0.op {
            Some(op::Op::Check(c)) => assert_eq!((c.path.as_str(), c.version), ("/d", 7)),
            other => panic!("not a check: {other:?}"),
        }
        let ttl = create_with_ttl("/t", "", CreateMode::PersistentWithTtl, 500);
        match ttl.0.op {
            Some(op::Op::Create(c)) => assert_eq!(c.ttl_ms, 500),
            other => panic!("not a create: {other:?}"),
        }
    }
}
