//! Concord's client API (`concord.v1`), generated from `proto/concord/v1/*.proto`, and
//! the server-to-server transport (`concord.peer.v1`, `proto/concord/peer/v1/*.proto`).
//!
//! The generated code is not committed: `build.rs` compiles the protos on every build
//! with a vendored protoc, so the code can never drift from the .proto files.

#![allow(clippy::all)]

/// The `concord.v1` package: messages, clients (`*_client`) and servers (`*_server`).
pub mod v1 {
    tonic::include_proto!("concord.v1");
}

/// `concord.peer.v1`: the transport between the servers of an ensemble. Served only
/// on the peer address, never on the client address.
pub mod peer {
    /// The `concord.peer.v1` package: `Frame`, `peer_transport_client`, `peer_transport_server`.
    pub mod v1 {
        tonic::include_proto!("concord.peer.v1");
    }
}

pub mod backup;

/// Encoded `FileDescriptorSet` of every Concord proto, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("concord_descriptor");

/// `google.rpc.ErrorInfo`, the error detail every Concord failure carries.
pub mod google_rpc {
    tonic::include_proto!("google.rpc");
}
