//! Concord's client API (`concord.v1`), generated from `proto/concord/v1/*.proto`.
//!
//! The generated code is not committed: `build.rs` compiles the protos on every build
//! with a vendored protoc, so the code can never drift from the .proto files.

#![allow(clippy::all)]

/// The `concord.v1` package: messages, clients (`*_client`) and servers (`*_server`).
pub mod v1 {
    tonic::include_proto!("concord.v1");
}

/// Encoded `FileDescriptorSet` of every Concord proto, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("concord_descriptor");

/// `google.rpc.ErrorInfo`, the error detail every Concord failure carries.
pub mod google_rpc {
    tonic::include_proto!("google.rpc");
}
