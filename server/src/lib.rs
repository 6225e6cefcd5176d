//! The Concord server: a replicated tree of small nodes with sessions, watches,
//! locks and elections. See DESIGN.md (in the team's shared folder) and docs/.
//!
//! ```text
//!   api/ (gRPC) ──▶ replica/ (sequence, group commit, apply) ──▶ storage/ (redb)
//!        │                 │                    │
//!        └── reads ──▶ tree/ (pure)   session/ (deadlines)   watch/ (fan-out, resume)
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod address;
pub mod api;
pub mod config;
pub mod listen;
pub mod peer;
pub mod recipes;
pub mod replica;
pub mod security;
pub mod server;
pub mod session;
#[cfg(test)]
pub mod sim;
pub mod storage;
pub mod telemetry;
#[cfg(test)]
mod test_env;
pub mod tree;
pub mod txn;
pub mod watch;
pub mod zab;
pub mod zk;

pub use config::Config;
pub use server::{run, runtime, RunError, Serving};
