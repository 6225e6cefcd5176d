//! The codec's records against hand-written frames, round trips and hostile input.

use super::*;
use crate::zk::jute::{decode_all, encode_to_vec, FrameDecoder};
use bytes::BytesMut;

/// Bytes from hex digits, spaces and newlines ignored: the vectors below are
/// written by hand from zookeeper.jute, not by the Writer under test.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert_eq!(digits.len() % 2, 0, "odd hex: {s}");
    digits
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).unwrap();
            u8::from_str_radix(text, 16).unwrap()
        })
        .collect()
}

/// Splits `bytes` into frames as the server will, asserting there is exactly one.
fn one_frame(bytes: &[u8]) -> Bytes {
    let mut buf = BytesMut::from(bytes);
    let frame = FrameDecoder::new(1024 * 1024)
        .decode(&mut buf)
        .unwrap()
        .unwrap();
    assert!(buf.is_empty(), "bytes after the frame");
    frame
}

fn open_acl_hex() -> &'static str {
    // vector of 1 ACL: perms 31, Id("world", "anyone")
    "00000001 0000001f 00000005 776f726c64 00000006 616e796f6e65"
}

fn sample_stat() -> Stat {
    Stat {
        czxid: 1,
        mzxid: 2,
        ctime_ms: 3,
        mtime_ms: 4,
        version: 5,
        cversion: 6,
        aversion: 7,
        ephemeral_owner: 8,
        data_length: 9,
        num_children: 2,
        pzxid: 0x1_0000_0003,
    }
}

fn assert_round_trip<T: Jute + PartialEq + std::fmt::Debug>(value: T) {
    let bytes = encode_to_vec(&value);
    assert!(
        bytes.len() >= T::MIN_BYTES,
        "{value:?} shorter than MIN_BYTES"
    );
    assert_eq!(decode_all::<T>(&bytes, "t"), Ok(value));
    // Every strict prefix is an error, never a panic or a wrong value.
    for cut in 0..bytes.len() {
        let mut r = Reader::new(&bytes[..cut]);
        if let Ok(v) = T::decode(&mut r) {
            // Only a trailing optional field (connect's readOnly) may be cut off.
            assert_eq!(cut + 1, bytes.len(), "prefix {cut} of {v:?} decoded");
        }
    }
}

#[test]
fn a_connect_request_as_kazoo_sends_it() {
    // kazoo 2.11's first Connect: protocol 0, last zxid 0, timeout 10000 ms,
    // session 0, 16 zero bytes of password, readOnly false.
    let bytes = hex(
        "0000002d 00000000 0000000000000000 00002710 0000000000000000
         00000010 00000000000000000000000000000000 00",
    );
    let body = one_frame(&bytes);
    let req = decode_all::<ConnectRequest>(&body, "connect").unwrap();
    assert_eq!(
        req,
        ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0,
            timeout_ms: 10_000,
            session_id: 0,
            passwd: Bytes::from(vec![0u8; 16]),
            read_only: Some(false),
        }
    );
    let mut w = Writer::framed();
    req.encode(&mut w);
    assert_eq!(w.into_frame(), bytes);
}

#[test]
fn the_read_only_byte_is_optional_both_ways() {
    // A client before 3.4 sends no readOnly byte (44-byte body).
    let old = hex("00000000 0000000000000010 00001388 0000000000000abc
         00000010 0102030405060708090a0b0c0d0e0f10");
    let req = decode_all::<ConnectRequest>(&old, "connect").unwrap();
    assert_eq!(req.read_only, None);
    assert_eq!(req.last_zxid_seen, 0x10);
    assert_eq!(req.session_id, 0xabc);
    assert_eq!(encode_to_vec(&req), old);
    let mut new = old.clone();
    new.push(7);
    let req = decode_all::<ConnectRequest>(&new, "connect").unwrap();
    assert_eq!(req.read_only, Some(true), "any non-zero byte is true");
    new.push(0);
    assert!(matches!(
        decode_all::<ConnectRequest>(&new, "connect"),
        Err(JuteError::LeftOver { left: 1, .. })
    ));

    // The answer carries the byte exactly when the request did.
    let mut rsp = ConnectResponse {
        protocol_version: 0,
        timeout_ms: 6000,
        session_id: 0x0100_0000_0000_0001,
        passwd: Bytes::from(vec![0xaa; 16]),
        read_only: None,
    };
    let without = hex("00000000 00001770 0100000000000001
         00000010 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    assert_eq!(encode_to_vec(&rsp), without);
    assert_eq!(
        decode_all::<ConnectResponse>(&without, "c"),
        Ok(rsp.clone())
    );
    rsp.read_only = Some(false);
    let mut with = without.clone();
    with.push(0);
    assert_eq!(encode_to_vec(&rsp), with);
    assert_eq!(decode_all::<ConnectResponse>(&with, "c"), Ok(rsp));
}

#[test]
fn a_create_frame_as_kazoo_sends_it() {
    // kazoo: client.create("/a", b"x", makepath=False) as request xid 1.
    let bytes = hex(&format!(
        "00000032 00000001 00000001 00000002 2f61 00000001 78 {} 00000000",
        open_acl_hex()
    ));
    let body = one_frame(&bytes);
    let (header, request) = decode_request(&body, 16).unwrap();
    assert_eq!(header, RequestHeader { xid: 1, op: 1 });
    let expected = CreateRequest {
        path: "/a".to_owned(),
        data: Some(Bytes::from_static(b"x")),
        acl: vec![Acl::open_unsafe()],
        flags: 0,
    };
    assert_eq!(request, Ok(Request::Create(expected.clone())));
    assert_eq!(
        CreateMode::try_from(expected.flags),
        Ok(CreateMode::Persistent)
    );
    let mut w = Writer::framed();
    header.encode(&mut w);
    Request::Create(expected).encode(&mut w);
    assert_eq!(w.into_frame(), bytes);

    // kazoo: client.create("/n", None, ephemeral=True) as xid 2: null data.
    let bytes = hex(&format!(
        "00000031 00000002 00000001 00000002 2f6e ffffffff {} 00000001",
        open_acl_hex()
    ));
    let (_, request) = decode_request(&one_frame(&bytes), 16).unwrap();
    assert_eq!(
        request,
        Ok(Request::Create(CreateRequest {
            path: "/n".to_owned(),
            data: None,
            acl: vec![Acl::open_unsafe()],
            flags: CreateMode::Ephemeral.into(),
        }))
    );
}

#[test]
fn a_get_children2_answer_is_written_as_the_format_says() {
    let expected = hex("00000063
         00000005 0000000100000003 00000000
         00000002 00000001 61 00000002 6263
         0000000000000001 0000000000000002 0000000000000003 0000000000000004
         00000005 00000006 00000007 0000000000000008 00000009 00000002
         0000000100000003");
    let header = ReplyHeader {
        xid: 5,
        zxid: 0x1_0000_0003,
        err: 0,
    };
    let body = GetChildren2Response {
        children: vec!["a".to_owned(), "bc".to_owned()],
        stat: sample_stat(),
    };
    assert_eq!(reply_frame(&header, &body), expected);
    let frame = one_frame(&expected);
    let mut r = Reader::new(&frame);
    assert_eq!(ReplyHeader::decode(&mut r), Ok(header));
    assert_eq!(GetChildren2Response::decode(&mut r), Ok(body));
    assert!(r.is_empty());
}

#[test]
fn a_multi_request_as_kazoo_sends_it() {
    // kazoo transaction as xid 9: create("/t", b""), check("/t", 0),
    // delete("/u"), set_data("/t", b"v", 3).
    let bytes = hex(&format!(
        "00000081 00000009 0000000e
         00000001 00 ffffffff  00000002 2f74 00000000 {} 00000000
         0000000d 00 ffffffff  00000002 2f74 00000000
         00000002 00 ffffffff  00000002 2f75 ffffffff
         00000005 00 ffffffff  00000002 2f74 00000001 76 00000003
         ffffffff 01 ffffffff",
        open_acl_hex()
    ));
    let body = one_frame(&bytes);
    let (header, request) = decode_request(&body, 4).unwrap();
    assert_eq!(header, RequestHeader { xid: 9, op: 14 });
    let ops = vec![
        MultiOp::Create(CreateRequest {
            path: "/t".to_owned(),
            data: Some(Bytes::new()),
            acl: vec![Acl::open_unsafe()],
            flags: 0,
        }),
        MultiOp::Check(CheckVersionRequest {
            path: "/t".to_owned(),
            version: 0,
        }),
        MultiOp::Delete(DeleteRequest {
            path: "/u".to_owned(),
            version: -1,
        }),
        MultiOp::SetData(SetDataRequest {
            path: "/t".to_owned(),
            data: Some(Bytes::from_static(b"v")),
            version: 3,
        }),
    ];
    assert_eq!(request, Ok(Request::Multi(MultiRequest { ops })));
    // One op fewer allowed: the same frame is refused by the bound.
    let (_, refused) = decode_request(&body, 3).unwrap();
    assert_eq!(
        refused,
        Err(RequestError::Malformed {
            op: OpCode::Multi,
            source: JuteError::TooMany {
                what: "ops in one multi",
                max: 3
            }
        })
    );
    assert_eq!(refused.unwrap_err().code(), Code::MarshallingError);
}

#[test]
fn multi_answers_are_written_as_multi_response_serialize_does() {
    // A failed multi: every result an error, OK before the failure (header err
    // is the result's code, type -1, then ErrorResponse), then the end header.
    let failed = MultiResponse {
        results: vec![
            MultiResult::Error { err: 0 },
            MultiResult::Error {
                err: Code::NoNode.into(),
            },
        ],
    };
    let expected = hex("ffffffff 00 00000000 00000000
         ffffffff 00 ffffff9b ffffff9b
         ffffffff 01 ffffffff");
    assert_eq!(encode_to_vec(&failed), expected);
    assert_eq!(decode_all::<MultiResponse>(&expected, "m"), Ok(failed));

    let ok = MultiResponse {
        results: vec![
            MultiResult::Create {
                path: "/t".to_owned(),
            },
            MultiResult::Create2 {
                path: "/s0000000001".to_owned(),
                stat: sample_stat(),
            },
            MultiResult::Check,
            MultiResult::Delete,
            MultiResult::SetData {
                stat: sample_stat(),
            },
        ],
    };
    let stat_hex = "0000000000000001 0000000000000002 0000000000000003 0000000000000004
         00000005 00000006 00000007 0000000000000008 00000009 00000002
         0000000100000003";
    let expected = hex(&format!(
        "00000001 00 00000000 00000002 2f74
         0000000f 00 00000000 0000000c 2f73303030303030303030 31 {stat_hex}
         0000000d 00 00000000
         00000002 00 00000000
         00000005 00 00000000 {stat_hex}
         ffffffff 01 ffffffff"
    ));
    assert_eq!(encode_to_vec(&ok), expected);
    assert_eq!(decode_all::<MultiResponse>(&expected, "m"), Ok(ok));

    let read = MultiResponse {
        results: vec![
            MultiResult::GetData {
                data: Some(Bytes::from_static(b"hi")),
                stat: sample_stat(),
            },
            MultiResult::GetChildren {
                children: vec!["c".to_owned()],
            },
            MultiResult::Error {
                err: Code::NoNode.into(),
            },
        ],
    };
    let expected = hex(&format!(
        "00000004 00 00000000 00000002 6869 {stat_hex}
         00000008 00 00000000 00000001 00000001 63
         ffffffff 00 ffffff9b ffffff9b
         ffffffff 01 ffffffff"
    ));
    assert_eq!(encode_to_vec(&read), expected);
    assert_round_trip(read);
}

#[test]
fn multi_refuses_ops_of_the_other_kind_and_unknown_ones() {
    let get = MultiOp::GetData(GetDataRequest {
        path: "/a".to_owned(),
        watch: false,
    });
    let del = MultiOp::Delete(DeleteRequest {
        path: "/a".to_owned(),
        version: -1,
    });
    for (kind, op) in [(MultiKind::Write, get), (MultiKind::Read, del)] {
        let value = i32::from(op.op_code());
        let mut w = Writer::new();
        MultiRequest { ops: vec![op] }.encode(&mut w);
        let bytes = w.into_bytes();
        assert_eq!(
            MultiRequest::decode(&mut Reader::new(&bytes), kind, 10),
            Err(JuteError::BadValue {
                what: "multi op type",
                value
            })
        );
    }
    for op in [OpCode::Sync as i32, 99, OpCode::Multi as i32] {
        let bytes = hex(&format!("{op:08x} 00 ffffffff 00000002 2f61"));
        assert!(matches!(
            MultiRequest::decode(&mut Reader::new(&bytes), MultiKind::Write, 10),
            Err(JuteError::BadValue { .. })
        ));
    }
    // An empty multi is allowed; a multi without its end header is not.
    let end = hex("ffffffff 01 ffffffff");
    assert_eq!(
        MultiRequest::decode(&mut Reader::new(&end), MultiKind::Read, 0),
        Ok(MultiRequest::default())
    );
    let unended = hex("00000002 00 ffffffff 00000002 2f61 ffffffff");
    assert!(matches!(
        MultiRequest::decode(&mut Reader::new(&unended), MultiKind::Write, 10),
        Err(JuteError::Truncated { .. })
    ));
}

/// One value of every request, with no field left at its default.
fn every_request() -> Vec<Request> {
    let p = |s: &str| s.to_owned();
    let create = CreateRequest {
        path: p("/c"),
        data: Some(Bytes::from_static(b"d\x00")),
        acl: vec![
            Acl::open_unsafe(),
            Acl {
                perms: perms::READ | perms::ADMIN,
                id: Id {
                    scheme: p("x509"),
                    id: p("CN=team-a"),
                },
            },
        ],
        flags: CreateMode::EphemeralSequential.into(),
    };
    let strings = |n: &str| vec![format!("/{n}1"), format!("/{n}2")];
    vec![
        Request::Ping,
        Request::CloseSession,
        Request::WhoAmI,
        Request::Create(create.clone()),
        Request::Create2(create.clone()),
        Request::CreateContainer(CreateRequest {
            flags: CreateMode::Container.into(),
            ..create.clone()
        }),
        Request::CreateTtl(CreateTtlRequest {
            path: p("/ttl"),
            data: Some(Bytes::from_static(b"t")),
            acl: vec![Acl::open_unsafe()],
            flags: CreateMode::PersistentWithTtl.into(),
            ttl_ms: 60_000,
        }),
        Request::Delete(DeleteRequest {
            path: p("/d"),
            version: 4,
        }),
        Request::DeleteContainer(DeleteContainerRequest { path: p("/dc") }),
        Request::Exists(ExistsRequest {
            path: p("/e"),
            watch: true,
        }),
        Request::GetData(GetDataRequest {
            path: p("/zookeeper/config"),
            watch: true,
        }),
        Request::SetData(SetDataRequest {
            path: p("/s"),
            data: Some(Bytes::from_static(b"new")),
            version: -1,
        }),
        Request::GetAcl(GetAclRequest { path: p("/acl") }),
        Request::SetAcl(SetAclRequest {
            path: p("/acl"),
            acl: vec![Acl::open_unsafe()],
            version: 2,
        }),
        Request::GetChildren(GetChildrenRequest {
            path: p("/"),
            watch: true,
        }),
        Request::GetChildren2(GetChildren2Request {
            path: p("/x"),
            watch: true,
        }),
        Request::Sync(SyncRequest { path: p("/y") }),
        Request::Multi(MultiRequest {
            ops: vec![
                MultiOp::Create(create.clone()),
                MultiOp::Create2(create.clone()),
                MultiOp::CreateContainer(create),
                MultiOp::CreateTtl(CreateTtlRequest {
                    path: p("/t"),
                    ttl_ms: 1,
                    flags: 6,
                    ..Default::default()
                }),
                MultiOp::Delete(DeleteRequest {
                    path: p("/d"),
                    version: 1,
                }),
                MultiOp::SetData(SetDataRequest {
                    path: p("/s"),
                    data: Some(Bytes::from_static(b"1")),
                    version: 1,
                }),
                MultiOp::Check(CheckVersionRequest {
                    path: p("/c"),
                    version: 7,
                }),
            ],
        }),
        Request::MultiRead(MultiRequest {
            ops: vec![
                MultiOp::GetData(GetDataRequest {
                    path: p("/a"),
                    watch: false,
                }),
                MultiOp::GetChildren(GetChildrenRequest {
                    path: p("/b"),
                    watch: true,
                }),
            ],
        }),
        Request::Reconfig(ReconfigRequest {
            joining_servers: Some(p("server.4=h:2888:3888;2181")),
            leaving_servers: None,
            new_members: Some(String::new()),
            cur_config_id: -1,
        }),
        Request::CheckWatches(CheckWatchesRequest {
            path: p("/w"),
            watcher_type: WatcherType::Data.into(),
        }),
        Request::RemoveWatches(RemoveWatchesRequest {
            path: p("/w"),
            watcher_type: WatcherType::PersistentRecursive.into(),
        }),
        Request::Auth(AuthPacket {
            auth_type: 0,
            scheme: p("digest"),
            auth: Bytes::from_static(b"user:pw"),
        }),
        Request::SetWatches(SetWatches {
            relative_zxid: 0x2_0000_0001,
            data_watches: strings("d"),
            exist_watches: strings("e"),
            child_watches: strings("c"),
        }),
        Request::SetWatches2(SetWatches2 {
            relative_zxid: 7,
            data_watches: strings("d"),
            exist_watches: vec![],
            child_watches: strings("c"),
            persistent_watches: strings("p"),
            persistent_recursive_watches: strings("r"),
        }),
        Request::Sasl(GetSaslRequest {
            token: Bytes::from_static(b"\x01\x02"),
        }),
        Request::GetEphemerals(GetEphemeralsRequest {
            prefix_path: p("/app"),
        }),
        Request::GetAllChildrenNumber(GetAllChildrenNumberRequest { path: p("/n") }),
        Request::AddWatch(AddWatchRequest {
            path: p("/aw"),
            mode: AddWatchMode::PersistentRecursive.into(),
        }),
    ]
}

fn request_frame(xid: i32, request: &Request) -> Vec<u8> {
    let mut w = Writer::new();
    RequestHeader {
        xid,
        op: request.op_code().into(),
    }
    .encode(&mut w);
    request.encode(&mut w);
    w.into_bytes()
}

#[test]
fn every_request_round_trips_and_every_prefix_is_refused() {
    let all = every_request();
    let client_ops: Vec<OpCode> = all.iter().map(Request::op_code).collect();
    for op in OpCode::ALL {
        let refused = matches!(
            op,
            OpCode::Notification | OpCode::Check | OpCode::Error | OpCode::CreateSession
        );
        assert_eq!(client_ops.contains(op), !refused, "{op:?}");
    }
    for (xid, request) in all.into_iter().enumerate() {
        let xid = i32::try_from(xid).unwrap();
        let frame = request_frame(xid, &request);
        let (header, decoded) = decode_request(&frame, 16).unwrap();
        assert_eq!(header.xid, xid);
        assert_eq!(decoded.as_ref(), Ok(&request));
        for cut in 0..frame.len() {
            match decode_request(&frame[..cut], 16) {
                Err(_) => assert!(cut < 8, "{request:?} cut at {cut}"),
                Ok((_, Err(RequestError::Malformed { .. }))) => {}
                Ok((_, other)) => {
                    // Bodiless requests are whole once the header is.
                    assert!(
                        cut == 8 && frame.len() == 8,
                        "{request:?} cut at {cut}: {other:?}"
                    );
                }
            }
        }
        let mut longer = frame.clone();
        longer.push(0);
        let (_, decoded) = decode_request(&longer, 16).unwrap();
        assert!(
            matches!(
                decoded,
                Err(RequestError::Malformed {
                    source: JuteError::LeftOver { left: 1, .. },
                    ..
                })
            ),
            "{request:?} with a byte more: {decoded:?}"
        );
    }
}

#[test]
fn every_response_record_round_trips() {
    let s = |x: &str| x.to_owned();
    assert_round_trip(sample_stat());
    assert_round_trip(ReplyHeader {
        xid: -1,
        zxid: 0x7fff_0000_0000_0001,
        err: Code::SessionExpired.into(),
    });
    assert_round_trip(MultiHeader {
        op: 5,
        done: false,
        err: -1,
    });
    assert_round_trip(CreateResponse { path: s("/a") });
    assert_round_trip(Create2Response {
        path: s("/a0000000007"),
        stat: sample_stat(),
    });
    assert_round_trip(ExistsResponse {
        stat: sample_stat(),
    });
    assert_round_trip(GetDataResponse {
        data: Some(Bytes::from_static(b"\xff\x00data")),
        stat: sample_stat(),
    });
    assert_round_trip(GetDataResponse {
        data: None,
        stat: sample_stat(),
    });
    assert_round_trip(SetDataResponse {
        stat: sample_stat(),
    });
    assert_round_trip(GetAclResponse {
        acl: vec![Acl::open_unsafe(), Acl::default()],
        stat: sample_stat(),
    });
    assert_round_trip(SetAclResponse {
        stat: sample_stat(),
    });
    assert_round_trip(GetChildrenResponse {
        children: vec![s("a"), s("é")],
    });
    assert_round_trip(GetChildren2Response {
        children: vec![],
        stat: sample_stat(),
    });
    assert_round_trip(SyncResponse { path: s("/s") });
    assert_round_trip(GetEphemeralsResponse {
        ephemerals: vec![s("/e/1"), s("/e/2")],
    });
    assert_round_trip(GetAllChildrenNumberResponse { total_number: 12 });
    assert_round_trip(WhoAmIResponse {
        client_info: vec![
            ClientInfo {
                auth_scheme: s("x509"),
                user: s("CN=team-a"),
            },
            ClientInfo {
                auth_scheme: s("ip"),
                user: s("127.0.0.1"),
            },
        ],
    });
    assert_round_trip(ErrorResponse {
        err: Code::NodeExists.into(),
    });
    assert_round_trip(WatcherEvent {
        event_type: EventType::NodeChildrenChanged.into(),
        state: KeeperState::SyncConnected.into(),
        path: s("/p"),
    });
    assert_round_trip(SetSaslResponse {
        token: Bytes::from_static(b"tok"),
    });
    assert_round_trip(ConnectResponse {
        protocol_version: 0,
        timeout_ms: 4000,
        session_id: 1,
        passwd: Bytes::from(vec![1; 16]),
        read_only: Some(true),
    });
    assert_round_trip(ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: 9,
        timeout_ms: 4000,
        session_id: 1,
        passwd: Bytes::from(vec![1; 16]),
        read_only: Some(false),
    });
}

#[test]
fn a_notification_frame_is_written_as_the_format_says() {
    let header = ReplyHeader {
        xid: NOTIFICATION_XID,
        zxid: 0x42,
        err: 0,
    };
    let event = WatcherEvent {
        event_type: EventType::NodeDeleted.into(),
        state: KeeperState::SyncConnected.into(),
        path: "/n".to_owned(),
    };
    let expected = hex("0000001e ffffffff 0000000000000042 00000000
         00000002 00000003 00000002 2f6e");
    assert_eq!(reply_frame(&header, &event), expected);
    // A ping's answer: the header alone.
    let pong = ReplyHeader {
        xid: PING_XID,
        zxid: 0x42,
        err: 0,
    };
    assert_eq!(
        reply_frame(&pong, &()),
        hex("00000010 fffffffe 0000000000000042 00000000")
    );
}

#[test]
fn opcodes_clients_may_not_send_are_unimplemented_not_malformed() {
    for op in [0, 13, -1, -10, 10, 23, 99, 108, i32::MIN, i32::MAX] {
        let frame = hex(&format!("00000003 {op:08x} 00000002 2f61"));
        let (header, request) = decode_request(&frame, 16).unwrap();
        assert_eq!(header, RequestHeader { xid: 3, op });
        assert_eq!(request, Err(RequestError::Unimplemented { op }));
        assert_eq!(request.unwrap_err().code(), Code::Unimplemented);
    }
    // Fewer than 8 bytes: no header, no xid to answer.
    assert!(decode_request(&[0, 0, 0, 1, 0, 0, 0], 16).is_err());
}

#[test]
fn huge_claimed_lengths_fail_fast_inside_requests() {
    // A create whose ACL vector claims i32::MAX entries in a 30-byte frame.
    let frame = hex("00000001 00000001 00000002 2f61 ffffffff 7fffffff 00000000");
    let (_, request) = decode_request(&frame, 16).unwrap();
    assert_eq!(
        request,
        Err(RequestError::Malformed {
            op: OpCode::Create,
            source: JuteError::BadLength {
                what: "vector",
                len: i32::MAX,
                left: 4
            }
        })
    );
    // setWatches claiming 2^31-1 paths; a path claiming 2^31-1 bytes; a -2 length.
    for body in [
        "0000000000000000 7fffffff",
        "0000000000000000 00000001 7fffffff 2f",
        "0000000000000000 fffffffe",
    ] {
        let frame = hex(&format!("fffffff8 00000065 {body}"));
        let (_, request) = decode_request(&frame, 16).unwrap();
        assert!(
            matches!(
                request,
                Err(RequestError::Malformed {
                    op: OpCode::SetWatches,
                    source: JuteError::BadLength { .. }
                })
            ),
            "{body}: {request:?}"
        );
    }
}

#[test]
fn arbitrary_bytes_never_panic_and_what_decodes_re_encodes_to_itself() {
    // A fixed xorshift stream: mutations of valid frames and pure noise.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let frames: Vec<Vec<u8>> = every_request()
        .iter()
        .map(|r| request_frame(1, r))
        .collect();
    let (mut decoded, mut refused) = (0, 0);
    for round in 0..20_000 {
        let mut bytes = frames[round % frames.len()].clone();
        if round % 4 == 0 {
            let len = usize::try_from(next() % 64).unwrap();
            bytes = (0..len).map(|_| next().to_le_bytes()[0]).collect();
        } else {
            for _ in 0..1 + next() % 3 {
                let at = usize::try_from(next()).unwrap() % bytes.len();
                bytes[at] = next().to_le_bytes()[0];
            }
        }
        match decode_request(&bytes, 8) {
            Ok((header, Ok(request))) => {
                decoded += 1;
                assert_eq!(header.op, i32::from(request.op_code()));
                // Whatever was accepted means the same when written back.
                let again = request_frame(header.xid, &request);
                let (_, request_again) = decode_request(&again, 8).unwrap();
                assert_eq!(request_again, Ok(request), "from {bytes:02x?}");
            }
            Ok((_, Err(_))) | Err(_) => refused += 1,
        }
        if let Ok(connect) = decode_all::<ConnectRequest>(&bytes, "connect") {
            let again = encode_to_vec(&connect);
            assert_eq!(decode_all::<ConnectRequest>(&again, "c"), Ok(connect));
        }
        if let Ok(multi) = decode_all::<MultiResponse>(&bytes, "multi") {
            let again = encode_to_vec(&multi);
            assert_eq!(decode_all::<MultiResponse>(&again, "m"), Ok(multi));
        }
    }
    assert!(
        decoded > 1_000 && refused > 1_000,
        "{decoded} decoded, {refused} refused"
    );
}

#[test]
fn wire_values_match_zookeeper() {
    let ops: Vec<(i32, &str)> = OpCode::ALL.iter().map(|o| (*o as i32, o.name())).collect();
    assert_eq!(
        ops,
        [
            (0, "notification"),
            (1, "create"),
            (2, "delete"),
            (3, "exists"),
            (4, "getData"),
            (5, "setData"),
            (6, "getACL"),
            (7, "setACL"),
            (8, "getChildren"),
            (9, "sync"),
            (11, "ping"),
            (12, "getChildren2"),
            (13, "check"),
            (14, "multi"),
            (15, "create2"),
            (16, "reconfig"),
            (17, "checkWatches"),
            (18, "removeWatches"),
            (19, "createContainer"),
            (20, "deleteContainer"),
            (21, "createTTL"),
            (22, "multiRead"),
            (100, "auth"),
            (101, "setWatches"),
            (102, "sasl"),
            (103, "getEphemerals"),
            (104, "getAllChildrenNumber"),
            (105, "setWatches2"),
            (106, "addWatch"),
            (107, "whoAmI"),
            (-10, "createSession"),
            (-11, "closeSession"),
            (-1, "error"),
        ]
    );
    let codes: Vec<(i32, &str)> = Code::ALL.iter().map(|c| (*c as i32, c.name())).collect();
    assert_eq!(
        codes,
        [
            (0, "OK"),
            (-1, "SYSTEMERROR"),
            (-2, "RUNTIMEINCONSISTENCY"),
            (-3, "DATAINCONSISTENCY"),
            (-4, "CONNECTIONLOSS"),
            (-5, "MARSHALLINGERROR"),
            (-6, "UNIMPLEMENTED"),
            (-7, "OPERATIONTIMEOUT"),
            (-8, "BADARGUMENTS"),
            (-12, "UNKNOWNSESSION"),
            (-13, "NEWCONFIGNOQUORUM"),
            (-14, "RECONFIGINPROGRESS"),
            (-100, "APIERROR"),
            (-101, "NONODE"),
            (-102, "NOAUTH"),
            (-103, "BADVERSION"),
            (-108, "NOCHILDRENFOREPHEMERALS"),
            (-110, "NODEEXISTS"),
            (-111, "NOTEMPTY"),
            (-112, "SESSIONEXPIRED"),
            (-113, "INVALIDCALLBACK"),
            (-114, "INVALIDACL"),
            (-115, "AUTHFAILED"),
            (-118, "SESSIONMOVED"),
            (-119, "NOTREADONLY"),
            (-120, "EPHEMERALONLOCALSESSION"),
            (-121, "NOWATCHER"),
            (-122, "REQUESTTIMEOUT"),
            (-123, "RECONFIGDISABLED"),
            (-124, "SESSIONCLOSEDREQUIRESASLAUTH"),
            (-125, "QUOTAEXCEEDED"),
            (-127, "THROTTLEDOP"),
        ]
    );
    for (all, values) in [
        (
            EventType::ALL.iter().map(|v| *v as i32).collect::<Vec<_>>(),
            vec![-1, 1, 2, 3, 4, 5, 6, 7],
        ),
        (
            KeeperState::ALL.iter().map(|v| *v as i32).collect(),
            vec![-1, 0, 1, 3, 4, 5, 6, -112, 7],
        ),
        (
            CreateMode::ALL.iter().map(|v| *v as i32).collect(),
            vec![0, 1, 2, 3, 4, 5, 6],
        ),
        (
            AddWatchMode::ALL.iter().map(|v| *v as i32).collect(),
            vec![0, 1],
        ),
        (
            WatcherType::ALL.iter().map(|v| *v as i32).collect(),
            vec![1, 2, 3, 4, 5],
        ),
    ] {
        assert_eq!(all, values);
    }
    assert_eq!(CreateMode::try_from(7), Err(7));
    assert_eq!(Code::try_from(-101), Ok(Code::NoNode));
    assert_eq!(OpCode::try_from(10), Err(10));
    assert_eq!(perms::ALL, 31);
    assert!(CreateMode::EphemeralSequential.is_ephemeral());
    assert!(CreateMode::EphemeralSequential.is_sequential());
    assert!(CreateMode::PersistentSequentialWithTtl.is_ttl());
    assert!(CreateMode::Container.is_container());
    assert!(!CreateMode::Persistent.is_ephemeral());
}
