//! The ZooKeeper-protocol door (docs/zookeeper.md): ZooKeeper 3.9's client protocol,
//! jute records over TCP, served beside the gRPC port, so that ZooKeeper's own
//! clients (Curator, kazoo, zkCli, ...) work unchanged.
//!
//! It only decodes and encodes ZooKeeper's wire format (`jute`, `proto`) and keeps
//! what ZooKeeper keeps per connection (its watches, `watches`); everything else is
//! the shared layer the gRPC services call too (`api::shared`): identity and
//! namespace, grants, quotas, validation, sessions, submitting writes, reads at a
//! zxid. A ZooKeeper session is a Concord session; zxids are Concord's.
//!
//! ```text
//!   TCP (TLS) ─▶ listen::incoming ─▶ conn: handshake (session open / reattach)
//!       ─▶ frame ─▶ RequestHeader + record ─▶ ops ─▶ api::shared ─▶ replica
//!       ◀─ reply (in request order) ◀── notifications of its watches, each sent
//!          before any reply that reflects its change (one hub feed per connection)
//! ```
//!
//! What it must not do: decide a rule of the tree (paths, versions, grants,
//! quotas) itself, or answer a connection's requests out of order.

mod conn;
mod door;
pub mod jute;
mod ops;
pub mod proto;
mod session;
mod track;
pub mod watches;
pub mod words;

pub use door::{serve, Door};
