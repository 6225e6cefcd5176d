//! The Concord server: a replicated tree of small nodes with sessions, watches,
//! locks and elections. See DESIGN.md (in the team's shared folder) and docs/.

pub mod storage;
pub mod tree;
pub mod txn;
pub mod watch;
