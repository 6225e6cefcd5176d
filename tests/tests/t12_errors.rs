//! Failures against a real server: every one carries a Concord code in all three
//! carriers (message prefix, `concord-error-code`, google.rpc.ErrorInfo), in one
//! shape, with trailers small enough for every gRPC client (C-core's limit is 8 KiB),
//! including the failures tonic raises below the services.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bytes::{Buf, BufMut};
use concord_proto::v1 as pb;
use concord_tests::{code_of, get_req, Server, ServerOptions};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// What the server promises for the trailers of any failure (docs/api.md).
const TRAILER_BYTES_MAX: usize = 3072;

/// The error trailers as the server sent them, in bytes as HTTP/2 and gRPC C-core
/// count them (name + value + 32 per entry): grpc-status, grpc-message
/// (percent-encoded), grpc-status-details-bin (base64) and concord-error-code.
fn trailer_bytes(s: &Status) -> usize {
    let mut headers = tonic::codegen::http::HeaderMap::new();
    Status::with_details(s.code(), s.message(), s.details().to_vec().into())
        .add_header(&mut headers)
        .unwrap();
    let code = code_of(s);
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum::<usize>()
        + "concord-error-code".len()
        + code.len()
        + 32
}

/// The code in all three carriers, the message the same in grpc-message and in the
/// google.rpc.Status, and the trailers small.
fn assert_coded(s: &Status, code: &str) {
    assert_eq!(code_of(s), code, "{s:?}");
    assert!(
        s.message().starts_with(&format!("{code}: ")),
        "{}",
        s.message()
    );
    let info = s.get_details_error_info().expect("an ErrorInfo detail");
    assert_eq!(
        (info.reason.as_str(), info.domain.as_str()),
        (code, "concord")
    );
    let rpc_status = tonic_types::pb::Status::decode(s.details()).unwrap();
    assert_eq!(rpc_status.message, s.message());
    assert_eq!(rpc_status.code, s.code() as i32);
    let bytes = trailer_bytes(s);
    assert!(
        bytes < TRAILER_BYTES_MAX,
        "{bytes} bytes of trailers: {}",
        s.message()
    );
}

fn create(path: &str) -> pb::CreateRequest {
    pb::CreateRequest {
        path: path.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn t12_long_paths_fail_with_their_code_and_small_trailers() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    let longest = format!("/{}", "a".repeat(4095));
    let too_long = format!("/{}", "b".repeat(4096));
    let huge = format!("/{}", "c".repeat(65535));

    // A valid 4096-byte path: NO_NODE, the path cut to a prefix and its length.
    let err = tree.get(get_req(longest.as_str())).await.unwrap_err();
    assert_coded(&err, "NO_NODE");
    assert!(err.message().contains("…(4096 bytes)"), "{}", err.message());
    let err = tree
        .create(create(&format!("{longest}/x")))
        .await
        .unwrap_err();
    assert_coded(&err, "BAD_PATH");
    let err = tree
        .create(create(&format!("{}/x", &longest[..4000])))
        .await
        .unwrap_err();
    assert_coded(&err, "NO_NODE");

    // Too long, and far too long: BAD_PATH every time.
    for path in [&too_long, &huge] {
        for _ in 0..6 {
            let err = tree.get(get_req(path.as_str())).await.unwrap_err();
            assert_coded(&err, "BAD_PATH");
            assert!(
                err.message().contains(&format!("…({} bytes)", path.len())),
                "{}",
                err.message()
            );
        }
        let err = tree.create(create(path)).await.unwrap_err();
        assert_coded(&err, "BAD_PATH");
    }
}

#[tokio::test]
async fn t12_a_multi_names_its_op_the_same_way_from_validation_and_apply() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    let op = |op: pb::op::Op| pb::Op { op: Some(op) };
    let create_op = |path: &str| {
        op(pb::op::Op::Create(pb::CreateOp {
            path: path.into(),
            ..Default::default()
        }))
    };
    let long = format!("/{}", "d".repeat(5000));
    // Refused before it is proposed: op 2 breaks the path rules.
    let refused = pb::MultiRequest {
        ops: vec![create_op("/m"), create_op("/m/a"), create_op(&long)],
        ..Default::default()
    };
    let err = tree.multi(refused).await.unwrap_err();
    assert_coded(&err, "BAD_PATH");
    assert!(
        err.message().starts_with("BAD_PATH: op 2: \"/ddd"),
        "{}",
        err.message()
    );
    let info = err.get_details_error_info().unwrap();
    assert_eq!(info.metadata.get("op").map(String::as_str), Some("2"));

    // Failed when applied: op 1 expects a version /m does not have.
    let failed = pb::MultiRequest {
        ops: vec![
            create_op("/m"),
            op(pb::op::Op::Check(pb::CheckOp {
                path: "/m".into(),
                version: 5,
            })),
        ],
        ..Default::default()
    };
    let err = tree.multi(failed).await.unwrap_err();
    assert_coded(&err, "BAD_VERSION");
    assert!(
        err.message()
            .starts_with("BAD_VERSION: op 1: /m is at version 0"),
        "{}",
        err.message()
    );
    let info = err.get_details_error_info().unwrap();
    assert_eq!(info.metadata.get("op").map(String::as_str), Some("1"));

    // And the SDK reads the op back.
    let sdk = concord::Error::from_status(&err, concord::CallKind::Write);
    assert_eq!(sdk.op_index(), Some(1));
}

/// A codec that sends and receives raw bytes: a client that gets the message wrong.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let bytes = src.chunk().to_vec();
        src.advance(bytes.len());
        Ok(Some(bytes))
    }
}

/// Sends `body` as the request message of `method`.
async fn raw_call(server: &Server, method: &'static str, body: Vec<u8>) -> Status {
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.unwrap();
    grpc.unary(
        tonic::Request::new(body),
        PathAndQuery::from_static(method),
        Raw,
    )
    .await
    .unwrap_err()
}

#[tokio::test]
async fn t12_failures_below_the_services_carry_a_code() {
    let server = Server::start(ServerOptions::default());

    // Not protobuf at all (wire type 7 does not exist).
    let err = raw_call(&server, "/concord.v1.Tree/Get", vec![0xff; 8]).await;
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_coded(&err, "BAD_MESSAGE");
    assert!(
        err.message().contains("/concord.v1.Tree/Get"),
        "{}",
        err.message()
    );
    // A path that is not UTF-8 (field 1, length 2).
    let err = raw_call(
        &server,
        "/concord.v1.Tree/Create",
        vec![0x0a, 2, 0xff, 0xfe],
    )
    .await;
    assert_coded(&err, "BAD_MESSAGE");
    // On a streaming method too.
    let err = raw_call(&server, "/concord.v1.Watch/Watch", vec![0xff; 8]).await;
    assert_coded(&err, "BAD_MESSAGE");

    // Inside a request stream: the failure comes in the trailers, after the headers.
    let (err, bytes) = h2_call(&server, "/concord.v1.Session/KeepAlive", "10S", &[0xff; 8]).await;
    assert_coded(&err, "BAD_MESSAGE");
    assert!(bytes < TRAILER_BYTES_MAX, "{bytes}");

    // Over the request limit (4 MiB with the default 1 MiB node data).
    let err = raw_call(&server, "/concord.v1.Session/Open", vec![0; 5 << 20]).await;
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_coded(&err, "MESSAGE_TOO_LARGE");
    assert!(err.message().contains("4194304"), "{}", err.message());
    let mut tree = server.tree().await;
    let big = pb::CreateRequest {
        path: "/big".into(),
        data: vec![7; 5 << 20].into(),
        ..Default::default()
    };
    let err = tree.create(big).await.unwrap_err();
    assert_coded(&err, "MESSAGE_TOO_LARGE");
    assert!(!server.exists("/big").await);

    // No such method, no such service.
    let err = raw_call(&server, "/concord.v1.Tree/Nope", Vec::new()).await;
    assert_eq!(err.code(), Code::Unimplemented);
    assert_coded(&err, "UNIMPLEMENTED");
    let err = raw_call(&server, "/concord.v1.Nope/Get", Vec::new()).await;
    assert_coded(&err, "UNIMPLEMENTED");
    assert!(
        err.message().contains("/concord.v1.Nope/Get"),
        "{}",
        err.message()
    );
}

/// Sends one gRPC call by hand over HTTP/2, with `grpc-timeout` set but no deadline
/// of the client's own (tonic's client enforces the header itself, and whichever
/// timer fires first would decide the test), and returns the status the server
/// answered with and how many bytes its status headers or trailers took.
async fn h2_call(server: &Server, method: &str, timeout: &str, message: &[u8]) -> (Status, usize) {
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!("http://{}{method}", server.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", timeout)
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(message);
    send.send_data(framed.into(), true).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(20), response)
        .await
        .expect("the server answers")
        .unwrap();
    let (parts, mut body) = response.into_parts();
    let headers = if parts.headers.contains_key("grpc-status") {
        parts.headers
    } else {
        while body.data().await.is_some() {}
        body.trailers().await.unwrap().expect("trailers")
    };
    let bytes = headers
        .iter()
        .filter(|(name, _)| {
            name.as_str().starts_with("grpc-") || name.as_str().starts_with("concord-")
        })
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum();
    (Status::from_header_map(&headers).unwrap(), bytes)
}

#[tokio::test]
async fn t12_a_deadline_passing_in_the_server_answers_timeout() {
    let server = Server::start(ServerOptions::default());
    // A read waiting for a zxid the server will not reach within the call's deadline.
    let get = pb::GetRequest {
        path: "/".into(),
        min_zxid: 1 << 60,
        ..Default::default()
    };
    let (err, bytes) = h2_call(
        &server,
        "/concord.v1.Tree/Get",
        "300m",
        &get.encode_to_vec(),
    )
    .await;
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert_coded(&err, "TIMEOUT");
    assert!(bytes < TRAILER_BYTES_MAX, "{bytes}");
    assert!(err.message().contains("300 ms"), "{}", err.message());
    assert!(
        err.message().contains("/concord.v1.Tree/Get"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn t12_a_response_too_large_fails_with_its_code() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    tree.create(create("/big")).await.unwrap();
    // 1500 children with 4000-byte names: a 6 MB listing, over the 5 MiB response
    // limit, from requests well under the 4 MiB request limit.
    let name = |i: usize| format!("{i:04}{}", "n".repeat(3996));
    for chunk in 0..3 {
        let ops = (chunk * 500..(chunk + 1) * 500)
            .map(|i| pb::Op {
                op: Some(pb::op::Op::Create(pb::CreateOp {
                    path: format!("/big/{}", name(i)),
                    ..Default::default()
                })),
            })
            .collect();
        tree.multi(pb::MultiRequest {
            ops,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let mut tree = tree.max_decoding_message_size(64 << 20);
    let listed = tree
        .children(pb::ChildrenRequest {
            path: "/big".into(),
            page_size: 0,
            ..Default::default()
        })
        .await;
    match listed {
        Err(err) => {
            assert_eq!(err.code(), Code::ResourceExhausted);
            assert_coded(&err, "RESPONSE_TOO_LARGE");
            assert!(err.message().contains("page_size"), "{}", err.message());
        }
        // A server that caps pages by itself answers a first page instead.
        Ok(page) => {
            let page = page.into_inner();
            assert!(page.children.len() < 1500 && !page.next_page_token.is_empty());
        }
    }
}
