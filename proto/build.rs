//! Compiles `concord/v1/*.proto` and `concord/peer/v1/*.proto` with the protoc shipped
//! by `protoc-bin-vendored`, so a fresh machine needs nothing but cargo. Also writes the
//! file descriptor set that the server's gRPC reflection serves (client API only).

use std::path::PathBuf;

/// The client API; its descriptor set is served by gRPC reflection on the client port.
const PROTOS: &[&str] = &[
    "concord/v1/common.proto",
    "concord/v1/tree.proto",
    "concord/v1/session.proto",
    "concord/v1/watch.proto",
    "concord/v1/cluster.proto",
    "concord/v1/lock.proto",
    "concord/v1/election.proto",
    "concord/v1/access.proto",
    "google/rpc/error_info.proto",
];

/// The server-to-server transport: compiled separately and left out of the descriptor
/// set, so reflection on the client port never advertises it.
const PEER_PROTOS: &[&str] = &["concord/peer/v1/peer.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // prost-build finds protoc through this variable (build scripts are single threaded).
    std::env::set_var("PROTOC", protoc);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .bytes(".")
        .file_descriptor_set_path(out_dir.join("concord_descriptor.bin"))
        .compile_protos(PROTOS, &["."])?;
    tonic_prost_build::configure()
        .bytes(".")
        .compile_protos(PEER_PROTOS, &["."])?;
    for proto in PROTOS.iter().chain(PEER_PROTOS) {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
