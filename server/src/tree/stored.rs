//! A flat, non-recursive mirror of a remembered outcome, for snapshots.
//!
//! `TreeError::MultiOp` boxes another `TreeError`, so decoding it with serde recurses
//! once per level: hostile bytes could nest it deep enough to overflow the stack. Here
//! the chain of Multi op indexes is a list and the leaf error cannot nest, and decoding
//! refuses chains longer than `MULTI_NESTING_MAX` (apply only ever makes one level).
//!
//! What it must not do: recurse.

use serde::{Deserialize, Serialize};

use super::snapshot::SnapshotError;
use super::{TreeError, TxnResult};

/// Longest chain of Multi op indexes accepted when decoding.
const MULTI_NESTING_MAX: usize = 4;

/// A remembered outcome as a snapshot stores it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum StoredOutcome {
    Ok(TxnResult),
    Err {
        /// Outermost first: `MultiOp { index: multi[0], source: MultiOp { .. } }`.
        multi: Vec<u64>,
        error: LeafError,
    },
}

/// Every `TreeError` but `MultiOp`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum LeafError {
    NodeExists {
        path: String,
    },
    NoNode {
        path: String,
    },
    BadVersion {
        path: String,
        expected: i32,
        actual: i32,
    },
    NotEmpty {
        path: String,
    },
    NoChildrenForEphemerals {
        path: String,
    },
    BadPath {
        path: String,
        reason: String,
    },
    SessionExpired {
        session_id: u64,
    },
    BadArguments(String),
    NotReapable {
        path: String,
    },
    Fenced {
        key: String,
        token: u64,
    },
    Reserved {
        path: String,
    },
    LockHeld {
        queue: String,
    },
}

impl From<&Result<TxnResult, TreeError>> for StoredOutcome {
    fn from(result: &Result<TxnResult, TreeError>) -> Self {
        let mut error = match result {
            Ok(r) => return StoredOutcome::Ok(r.clone()),
            Err(e) => e,
        };
        let mut multi = Vec::new();
        while let TreeError::MultiOp { index, source } = error {
            multi.push(*index as u64);
            error = source;
        }
        StoredOutcome::Err {
            multi,
            error: LeafError::from_tree(error),
        }
    }
}

impl StoredOutcome {
    /// The outcome back, or an error if the chain is implausibly deep.
    pub(crate) fn into_result(self) -> Result<Result<TxnResult, TreeError>, SnapshotError> {
        let (multi, leaf) = match self {
            StoredOutcome::Ok(r) => return Ok(Ok(r)),
            StoredOutcome::Err { multi, error } => (multi, error),
        };
        if multi.len() > MULTI_NESTING_MAX {
            return Err(SnapshotError::Malformed(format!(
                "{} nested multi errors",
                multi.len()
            )));
        }
        let mut error = leaf.into_tree();
        for index in multi.into_iter().rev() {
            let index = usize::try_from(index)
                .map_err(|_| SnapshotError::Malformed(format!("multi index {index}")))?;
            error = TreeError::MultiOp {
                index,
                source: Box::new(error),
            };
        }
        Ok(Err(error))
    }
}

impl LeafError {
    fn from_tree(error: &TreeError) -> LeafError {
        match error.clone() {
            TreeError::NodeExists { path } => LeafError::NodeExists { path },
            TreeError::NoNode { path } => LeafError::NoNode { path },
            TreeError::BadVersion {
                path,
                expected,
                actual,
            } => LeafError::BadVersion {
                path,
                expected,
                actual,
            },
            TreeError::NotEmpty { path } => LeafError::NotEmpty { path },
            TreeError::NoChildrenForEphemerals { path } => {
                LeafError::NoChildrenForEphemerals { path }
            }
            TreeError::BadPath { path, reason } => LeafError::BadPath { path, reason },
            TreeError::SessionExpired { session_id } => LeafError::SessionExpired { session_id },
            TreeError::BadArguments(msg) => LeafError::BadArguments(msg),
            TreeError::NotReapable { path } => LeafError::NotReapable { path },
            TreeError::Fenced { key, token } => LeafError::Fenced { key, token },
            TreeError::Reserved { path } => LeafError::Reserved { path },
            TreeError::LockHeld { queue } => LeafError::LockHeld { queue },
            // Unwrapped by the caller; kept total without recursing.
            TreeError::MultiOp { .. } => LeafError::BadArguments("nested multi error".into()),
            // Never the outcome of an applied txn, so never stored; kept total.
            e @ (TreeError::QuotaExceeded { .. } | TreeError::GrantsChanged { .. }) => {
                LeafError::BadArguments(e.to_string())
            }
        }
    }

    fn into_tree(self) -> TreeError {
        match self {
            LeafError::NodeExists { path } => TreeError::NodeExists { path },
            LeafError::NoNode { path } => TreeError::NoNode { path },
            LeafError::BadVersion {
                path,
                expected,
                actual,
            } => TreeError::BadVersion {
                path,
                expected,
                actual,
            },
            LeafError::NotEmpty { path } => TreeError::NotEmpty { path },
            LeafError::NoChildrenForEphemerals { path } => {
                TreeError::NoChildrenForEphemerals { path }
            }
            LeafError::BadPath { path, reason } => TreeError::BadPath { path, reason },
            LeafError::SessionExpired { session_id } => TreeError::SessionExpired { session_id },
            LeafError::BadArguments(msg) => TreeError::BadArguments(msg),
            LeafError::NotReapable { path } => TreeError::NotReapable { path },
            LeafError::Fenced { key, token } => TreeError::Fenced { key, token },
            LeafError::Reserved { path } => TreeError::Reserved { path },
            LeafError::LockHeld { queue } => TreeError::LockHeld { queue },
        }
    }
}
