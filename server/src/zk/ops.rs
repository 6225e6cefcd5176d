//! Each ZooKeeper request, answered through the shared layer (`api::shared`): its
//! record converted to the tree's ops, the outcome (or the failure's Concord code)
//! converted back to ZooKeeper's record and code.
//!
//! What Concord does not keep, it does not pretend to (docs/zookeeper.md, "What
//! differs"): per-node ACLs (only world:anyone with every permission is accepted, and
//! read back; Concord's grants apply instead), digest and SASL authentication
//! (AUTHFAILED: the certificate is the identity), reconfig (RECONFIGDISABLED, as a
//! ZooKeeper with reconfigEnabled=false).

use std::time::Duration;

use bytes::Bytes;
use tonic::Status;

use crate::api::shared::{self, code_of};
use crate::security::Perms;
use crate::tree::{OpResult, TxnResult};
use crate::txn::{
    CheckOp, CreateMode as TreeMode, CreateOp, DeleteOp, MultiOp, SetOp, TxnOp, Zxid,
};
use concord_proto::v1::ErrorCode;

use super::conn::{Conn, End};
use super::door::CONFIG_NODE;
use super::jute::{encode_to_vec, Jute};
use super::proto::{
    self, Acl, Code, CreateMode, CreateRequest, MultiResult, OpCode, ReplyHeader, Request,
    RequestError,
};
use super::watches::{WatchKind, WatcherType};

/// Most ops in one multi or multiRead (as the gRPC Multi).
pub(super) const MULTI_OPS_MAX: usize = 1024;

/// How long an auth or SASL request waits for its AUTHFAILED. kazoo's `start()` wakes
/// on CONNECTED and then reads whether it is still connected: a refusal that has
/// already arrived makes it raise a connection time-out instead of AuthFailedError
/// (kazoo 2.11; its test_invalid_sasl_auth failed so). ZooKeeper refuses a DIGEST-MD5
/// client only after a challenge round and the client's digest, about 10 ms after
/// CONNECTED; answered at once (well under 1 ms), a kazoo client whose process was
/// busy lost that race in 5 to 45% of its starts, and in none of 600 with this wait.
const AUTH_REFUSAL_WAIT: Duration = Duration::from_millis(200);

/// What became of one request.
pub(super) struct Answer {
    /// The opcode's name, for metrics.
    pub(super) op: &'static str,
    pub(super) code: Code,
    pub(super) outcome: Outcome,
}

pub(super) enum Outcome {
    /// Send `notes` (notifications the request set off), then the reply frame.
    Reply {
        notes: Vec<Vec<u8>>,
        frame: Vec<u8>,
        zxid: Zxid,
    },
    /// The same, then close the connection.
    ReplyThenEnd {
        frame: Vec<u8>,
        zxid: Zxid,
        end: End,
    },
    /// Close the connection without a reply.
    End(End),
}

/// Why a request failed.
pub(super) enum Failure {
    /// Answered with this code.
    Code(Code),
    /// Answered with this code, then the connection closes.
    CodeThenEnd(Code, End),
    /// No answer: the connection closes (the client reconnects, perhaps elsewhere).
    End(End),
}

impl From<Code> for Failure {
    fn from(code: Code) -> Failure {
        Failure::Code(code)
    }
}

/// A successful request's reply: the zxid it reflects, its body, and the
/// notifications to send before it.
struct Done {
    zxid: Zxid,
    body: Vec<u8>,
    notes: Vec<Vec<u8>>,
}

impl Done {
    fn new(zxid: Zxid, body: &impl Jute) -> Done {
        Done {
            zxid,
            body: encode_to_vec(body),
            notes: Vec::new(),
        }
    }

    fn empty(zxid: Zxid) -> Done {
        Done {
            zxid,
            body: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// Answers one decoded request (or a body that could not be decoded).
pub(super) async fn answer(
    conn: &mut Conn,
    xid: i32,
    op: i32,
    request: Result<Request, RequestError>,
) -> Answer {
    let op_name = OpCode::try_from(op).map_or("unknown", OpCode::name);
    let applied = conn.door.replica.applied_zxid();
    let failed = |code: Code| Answer {
        op: op_name,
        code,
        outcome: Outcome::Reply {
            notes: Vec::new(),
            frame: frame(xid, applied, code, &[]),
            zxid: applied,
        },
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => return failed(e.code()),
    };
    if let Some(limits) = &conn.limits {
        if !matches!(request, Request::Ping | Request::CloseSession) && limits.admit().is_err() {
            return failed(Code::ThrottledOp);
        }
    }
    match handle(conn, request).await {
        Ok(done) => Answer {
            op: op_name,
            code: Code::Ok,
            outcome: Outcome::Reply {
                notes: done.notes,
                frame: frame(xid, done.zxid, Code::Ok, &done.body),
                zxid: done.zxid,
            },
        },
        Err(Failure::Code(code)) => failed(code),
        Err(Failure::CodeThenEnd(code, end)) => Answer {
            op: op_name,
            code,
            outcome: Outcome::ReplyThenEnd {
                frame: frame(xid, applied, code, &[]),
                zxid: applied,
                end,
            },
        },
        Err(Failure::End(end)) => Answer {
            op: op_name,
            code: Code::ConnectionLoss,
            outcome: Outcome::End(end),
        },
    }
}

fn header(xid: i32, zxid: Zxid, code: Code) -> ReplyHeader {
    ReplyHeader {
        xid,
        zxid: zxid as i64,
        err: code.into(),
    }
}

/// A reply frame from an encoded body.
fn frame(xid: i32, zxid: Zxid, code: Code, body: &[u8]) -> Vec<u8> {
    let mut bytes = encode_to_vec(&header(xid, zxid, code));
    bytes.extend_from_slice(body);
    super::jute::frame(&bytes)
}

async fn handle(conn: &mut Conn, request: Request) -> Result<Done, Failure> {
    use Request as R;
    match request {
        R::Ping => Ok(Done::empty(conn.door.replica.applied_zxid())),
        R::CloseSession => close(conn).await,
        R::WhoAmI => Ok(who_am_i(conn)),
        R::Create(c) => create(conn, c, 0, OpCode::Create).await,
        R::Create2(c) => create(conn, c, 0, OpCode::Create2).await,
        R::CreateContainer(c) => create(conn, c, 0, OpCode::CreateContainer).await,
        R::CreateTtl(c) => {
            let (c, ttl_ms) = without_ttl(c);
            create(conn, c, ttl_ms, OpCode::CreateTtl).await
        }
        R::Delete(d) => delete(conn, d).await,
        R::SetData(s) => set_data(conn, s).await,
        R::Exists(e) => exists(conn, &e.path, e.watch).await,
        R::GetData(g) => get_data(conn, &g.path, g.watch).await,
        R::GetChildren(g) => children(conn, &g.path, g.watch, false).await,
        R::GetChildren2(g) => children(conn, &g.path, g.watch, true).await,
        R::GetAcl(g) => get_acl(conn, &g.path).await,
        R::SetAcl(s) => set_acl(conn, s).await,
        R::Sync(s) => {
            let zxid = conn
                .door
                .replica
                .linearize(shared::READ_WAIT_MAX)
                .await
                .map_err(|e| failure(&e.into()))?;
            Ok(Done::new(zxid, &proto::SyncResponse { path: s.path }))
        }
        R::Multi(m) => multi(conn, m.ops).await,
        R::MultiRead(m) => multi_read(conn, m.ops).await,
        R::Reconfig(_) => Err(Code::ReconfigDisabled.into()),
        R::CheckWatches(c) => remove_watches(conn, &c.path, c.watcher_type, false).await,
        R::RemoveWatches(c) => remove_watches(conn, &c.path, c.watcher_type, true).await,
        // The client certificate is the identity; ZooKeeper answers an auth it
        // cannot honour this way, and closes the connection.
        R::Auth(_) | R::Sasl(_) => Err(refuse_auth().await),
        R::SetWatches(s) => {
            let lists = [
                s.data_watches,
                s.exist_watches,
                s.child_watches,
                vec![],
                vec![],
            ];
            set_watches(conn, s.relative_zxid, lists).await
        }
        R::SetWatches2(s) => {
            let lists = [
                s.data_watches,
                s.exist_watches,
                s.child_watches,
                s.persistent_watches,
                s.persistent_recursive_watches,
            ];
            set_watches(conn, s.relative_zxid, lists).await
        }
        R::GetEphemerals(g) => Ok(ephemerals(conn, &g.prefix_path)),
        R::GetAllChildrenNumber(g) => all_children_number(conn, &g.path).await,
        R::AddWatch(a) => add_watch(conn, &a.path, a.mode).await,
        R::DeleteContainer(_) => Err(Code::Unimplemented.into()),
    }
}

/// The answer to an auth or SASL request: AUTHFAILED after AUTH_REFUSAL_WAIT, then
/// the connection closes. Only this connection waits (it answers in order anyway).
async fn refuse_auth() -> Failure {
    tokio::time::sleep(AUTH_REFUSAL_WAIT).await;
    Failure::CodeThenEnd(Code::AuthFailed, End::SessionOver)
}

/// The ZooKeeper answer to a failed shared-layer call.
fn failure(status: &Status) -> Failure {
    use ErrorCode as E;
    let Some(code) = code_of(status) else {
        return Failure::Code(Code::SystemError);
    };
    Failure::Code(match code {
        E::NodeExists => Code::NodeExists,
        E::NoNode => Code::NoNode,
        E::BadVersion => Code::BadVersion,
        E::NotEmpty => Code::NotEmpty,
        E::NoChildrenForEphemerals => Code::NoChildrenForEphemerals,
        E::SessionExpired => {
            return Failure::CodeThenEnd(Code::SessionExpired, End::SessionOver);
        }
        E::PermissionDenied => Code::NoAuth,
        E::QuotaExceeded => Code::QuotaExceeded,
        E::Unimplemented => Code::Unimplemented,
        E::BadPath
        | E::BadArguments
        | E::DataTooLarge
        | E::BadMessage
        | E::BadState
        | E::Fenced
        | E::LockHeld
        | E::ZxidCompacted => Code::BadArguments,
        // ZooKeeper's client fails to read a packet over jute.maxbuffer and drops
        // the connection: the same, from here, without building it.
        E::ResponseTooLarge | E::MessageTooLarge => {
            return Failure::End(End::BadFrame(status.message().to_string()));
        }
        // Not now, or not here: the client reconnects (perhaps to another server),
        // as from a ZooKeeper server that lost its quorum.
        E::NotLeader | E::Unavailable | E::Timeout | E::OutcomeUnknown | E::SlowConsumer => {
            return Failure::End(End::Unavailable(status.message().to_string()));
        }
        E::Internal | E::Unspecified => Code::SystemError,
    })
}

fn stat(s: &crate::tree::Stat) -> proto::Stat {
    proto::Stat {
        czxid: s.czxid as i64,
        mzxid: s.mzxid as i64,
        ctime_ms: s.ctime_ms,
        mtime_ms: s.mtime_ms,
        version: s.version,
        // ZooKeeper's cversion is an int: it wraps there too.
        cversion: s.cversion as i32,
        aversion: s.aversion,
        ephemeral_owner: s.ephemeral_owner as i64,
        data_length: i32::try_from(s.data_length).unwrap_or(i32::MAX),
        num_children: i32::try_from(s.num_children).unwrap_or(i32::MAX),
        pzxid: s.pzxid as i64,
    }
}

/// Only world:anyone with every permission (OPEN_ACL_UNSAFE) is accepted: Concord
/// keeps grants on subtrees instead of per-node ACLs (INVALIDACL otherwise, as
/// ZooKeeper answers an ACL it cannot apply; an empty list too).
fn check_acl(acl: &[Acl]) -> Result<(), Failure> {
    let open = Acl::open_unsafe();
    if acl.is_empty() || acl.iter().any(|a| *a != open) {
        return Err(Code::InvalidAcl.into());
    }
    Ok(())
}

/// The tree's create mode of a ZooKeeper create, checked against its opcode (a
/// container only by createContainer, a TTL only by createTTL).
fn create_mode(flags: i32, op: OpCode) -> Result<TreeMode, Failure> {
    let mode = CreateMode::try_from(flags).map_err(|_| Failure::Code(Code::BadArguments))?;
    let fits = match op {
        OpCode::CreateContainer => mode.is_container(),
        OpCode::CreateTtl => mode.is_ttl(),
        _ => !mode.is_container() && !mode.is_ttl(),
    };
    if !fits {
        return Err(Code::BadArguments.into());
    }
    Ok(match mode {
        CreateMode::Persistent => TreeMode::Persistent,
        CreateMode::Ephemeral => TreeMode::Ephemeral,
        CreateMode::PersistentSequential => TreeMode::PersistentSequential,
        CreateMode::EphemeralSequential => TreeMode::EphemeralSequential,
        CreateMode::Container => TreeMode::Container,
        CreateMode::PersistentWithTtl => TreeMode::PersistentWithTtl,
        CreateMode::PersistentSequentialWithTtl => TreeMode::PersistentSequentialWithTtl,
    })
}

/// A createTTL's create and its TTL.
fn without_ttl(c: proto::CreateTtlRequest) -> (CreateRequest, i64) {
    let create = CreateRequest {
        path: c.path,
        data: c.data,
        acl: c.acl,
        flags: c.flags,
    };
    (create, c.ttl_ms)
}

/// A node's data as the tree takes it, and whether it is null: null stays null
/// only where the ensemble keeps it (`Replica::keeps_null_data`); during a rolling
/// upgrade from a server without null data, it is written as empty, as such a
/// server wrote it.
fn node_data(data: Option<Bytes>, keeps_null: bool) -> (Bytes, bool) {
    match data {
        Some(data) => (data, false),
        None => (Bytes::new(), keeps_null),
    }
}

/// A create as the tree takes it: checked, paths mapped in.
fn create_op(conn: &Conn, c: CreateRequest, ttl_ms: i64, op: OpCode) -> Result<CreateOp, Failure> {
    check_acl(&c.acl)?;
    let mode = create_mode(c.flags, op)?;
    let (data, null_data) = node_data(c.data, conn.door.replica.keeps_null_data());
    let raw = CreateOp {
        path: c.path,
        data,
        mode,
        ttl_ms,
        null_data,
    };
    let limits = conn.door.tree.limits();
    let mut op = shared::check_create(raw, conn.session_id, limits).map_err(|s| failure(&s))?;
    op.path = conn
        .view
        .create_path_in(&op.path, mode.is_sequential())
        .map_err(|s| failure(&s))?;
    Ok(op)
}

/// Submits a write under the connection's session.
async fn write(conn: &Conn, op: TxnOp) -> Result<(Zxid, TxnResult), Status> {
    conn.door
        .tree
        .write(&conn.view, conn.session_id, 0, None, op)
        .await
}

async fn create(
    conn: &mut Conn,
    c: CreateRequest,
    ttl_ms: i64,
    op: OpCode,
) -> Result<Done, Failure> {
    let txn = TxnOp::Create(create_op(conn, c, ttl_ms, op)?);
    let (_, result) = write(conn, txn).await.map_err(|s| failure(&s))?;
    let TxnResult::Created { path, stat: s } = result else {
        return Err(Code::SystemError.into());
    };
    let path = conn.view.path_out(&path);
    Ok(match op {
        OpCode::Create => Done::new(s.czxid, &proto::CreateResponse { path }),
        _ => Done::new(
            s.czxid,
            &proto::Create2Response {
                path,
                stat: stat(&s),
            },
        ),
    })
}

fn delete_op(conn: &Conn, path: &str, version: i32) -> Result<DeleteOp, Failure> {
    shared::check_path(path).map_err(|s| failure(&s))?;
    shared::check_version(version).map_err(|s| failure(&s))?;
    if path == "/" {
        return Err(Code::BadArguments.into());
    }
    Ok(DeleteOp {
        path: conn.view.path_in(path).map_err(|s| failure(&s))?,
        version,
    })
}

async fn delete(conn: &mut Conn, d: proto::DeleteRequest) -> Result<Done, Failure> {
    let op = delete_op(conn, &d.path, d.version)?;
    let (zxid, _) = write(conn, TxnOp::Delete(op))
        .await
        .map_err(|s| failure(&s))?;
    Ok(Done::empty(zxid))
}

fn set_op(conn: &Conn, s: proto::SetDataRequest) -> Result<SetOp, Failure> {
    shared::check_path(&s.path).map_err(|e| failure(&e))?;
    shared::check_version(s.version).map_err(|e| failure(&e))?;
    let limits = conn.door.tree.limits();
    let (data, null_data) = node_data(s.data, conn.door.replica.keeps_null_data());
    Ok(SetOp {
        path: conn.view.path_in(&s.path).map_err(|e| failure(&e))?,
        data: shared::owned_data(&data, limits).map_err(|e| failure(&e))?,
        version: s.version,
        null_data,
    })
}

async fn set_data(conn: &mut Conn, s: proto::SetDataRequest) -> Result<Done, Failure> {
    let op = set_op(conn, s)?;
    let (_, result) = write(conn, TxnOp::Set(op)).await.map_err(|s| failure(&s))?;
    let TxnResult::Set { stat: s } = result else {
        return Err(Code::SystemError.into());
    };
    Ok(Done::new(
        s.mzxid,
        &proto::SetDataResponse { stat: stat(&s) },
    ))
}

/// Reads the node at `path` (the feed made first when a watch will follow), and
/// the notifications up to the read's zxid.
async fn read_node(
    conn: &mut Conn,
    path: &str,
    watch: bool,
) -> Result<(Zxid, Option<crate::tree::NodeView>, Vec<Vec<u8>>), Failure> {
    if watch {
        conn.ensure_feed()
            .map_err(|_| Failure::Code(Code::QuotaExceeded))?;
    }
    let (zxid, node) = conn
        .door
        .tree
        .read_node(&conn.view, path, conn.last_zxid, false)
        .await
        .map_err(|s| failure(&s))?;
    let notes = conn.drain_through(zxid).await.map_err(Failure::End)?;
    Ok((zxid, node, notes))
}

/// Registers a watch at client path `path` (already read, so valid).
fn watch(conn: &mut Conn, kind: WatchKind, path: &str) -> Result<(), Failure> {
    let at = conn.view.path_in(path).map_err(|s| failure(&s))?;
    conn.watches()
        .add(kind, &at)
        .map_err(|_| Failure::Code(Code::QuotaExceeded))
}

async fn exists(conn: &mut Conn, path: &str, watch_it: bool) -> Result<Done, Failure> {
    let (zxid, node, notes) = read_node(conn, path, watch_it).await?;
    // exists watches whether or not the node is there, as ZooKeeper.
    if watch_it {
        watch(conn, WatchKind::Data, path)?;
    }
    let node = node.ok_or(Failure::Code(Code::NoNode))?;
    let mut done = Done::new(
        zxid,
        &proto::ExistsResponse {
            stat: stat(&node.stat),
        },
    );
    done.notes = notes;
    Ok(done)
}

/// A node's data as a client reads it: None for null data.
fn data_out(data: Bytes, null_data: bool) -> Option<Bytes> {
    (!null_data).then_some(data)
}

/// getConfig (a getData of `/zookeeper/config`): the ensemble's config, the same
/// for every team. A watch on it is kept as ZooKeeper keeps one; the membership
/// never changes, so it fires only if the client writes a node of its own there.
fn ensemble_config(conn: &mut Conn, watch_it: bool) -> Result<proto::GetDataResponse, Failure> {
    if watch_it {
        conn.ensure_feed()
            .map_err(|_| Failure::Code(Code::QuotaExceeded))?;
        watch(conn, WatchKind::Data, CONFIG_NODE)?;
    }
    let data = conn.door.ensemble_config.clone();
    let stat = proto::Stat {
        data_length: i32::try_from(data.len()).unwrap_or(i32::MAX),
        ..proto::Stat::default()
    };
    Ok(proto::GetDataResponse {
        data: Some(data),
        stat,
    })
}

async fn get_data(conn: &mut Conn, path: &str, watch_it: bool) -> Result<Done, Failure> {
    if path == CONFIG_NODE {
        let body = ensemble_config(conn, watch_it)?;
        return Ok(Done::new(conn.door.replica.applied_zxid(), &body));
    }
    let (zxid, node, notes) = read_node(conn, path, watch_it).await?;
    let node = node.ok_or(Failure::Code(Code::NoNode))?;
    if watch_it {
        watch(conn, WatchKind::Data, path)?;
    }
    let body = proto::GetDataResponse {
        data: data_out(node.data, node.null_data),
        stat: stat(&node.stat),
    };
    let mut done = Done::new(zxid, &body);
    done.notes = notes;
    Ok(done)
}

/// The names of the children of `path`, bounded by the frame size.
async fn child_names(
    conn: &Conn,
    path: &str,
) -> Result<(Zxid, crate::tree::Stat, Vec<String>), Failure> {
    // Room for the reply header and the stat.
    let bytes_max = conn.door.frame_bytes_max.saturating_sub(128);
    conn.door
        .tree
        .all_children(&conn.view, path, conn.last_zxid, bytes_max)
        .await
        .map_err(|s| failure(&s))
}

async fn children(
    conn: &mut Conn,
    path: &str,
    watch_it: bool,
    with_stat: bool,
) -> Result<Done, Failure> {
    if watch_it {
        conn.ensure_feed()
            .map_err(|_| Failure::Code(Code::QuotaExceeded))?;
    }
    let (zxid, parent, names) = child_names(conn, path).await?;
    let notes = conn.drain_through(zxid).await.map_err(Failure::End)?;
    if watch_it {
        watch(conn, WatchKind::Child, path)?;
    }
    let mut done = if with_stat {
        let body = proto::GetChildren2Response {
            children: names,
            stat: stat(&parent),
        };
        Done::new(zxid, &body)
    } else {
        Done::new(zxid, &proto::GetChildrenResponse { children: names })
    };
    done.notes = notes;
    Ok(done)
}

async fn get_acl(conn: &mut Conn, path: &str) -> Result<Done, Failure> {
    let (zxid, node, notes) = read_node(conn, path, false).await?;
    let node = node.ok_or(Failure::Code(Code::NoNode))?;
    let body = proto::GetAclResponse {
        acl: vec![Acl::open_unsafe()],
        stat: stat(&node.stat),
    };
    let mut done = Done::new(zxid, &body);
    done.notes = notes;
    Ok(done)
}

/// setACL: only the open ACL, which every node has already (nothing is written,
/// the aversion stays); the caller needs `a` on the node, as ZooKeeper's ADMIN.
async fn set_acl(conn: &mut Conn, s: proto::SetAclRequest) -> Result<Done, Failure> {
    check_acl(&s.acl)?;
    let (zxid, node, notes) = read_node(conn, &s.path, false).await?;
    let node = node.ok_or(Failure::Code(Code::NoNode))?;
    let at = conn.view.path_in(&s.path).map_err(|e| failure(&e))?;
    let view = &conn.view;
    conn.door
        .replica
        .read(|t| view.check(t.grants(), &at, Perms::ADMIN))
        .map_err(|e| failure(&e))?;
    if s.version != -1 && s.version != node.stat.aversion {
        return Err(Code::BadVersion.into());
    }
    let mut done = Done::new(
        zxid,
        &proto::SetAclResponse {
            stat: stat(&node.stat),
        },
    );
    done.notes = notes;
    Ok(done)
}

async fn close(conn: &mut Conn) -> Result<Done, Failure> {
    let replica = conn.door.replica.clone();
    let closed = shared::close_session(&replica, &conn.view.caller, conn.session_id).await;
    // A session gone already is closed all the same.
    let gone = || replica.read(|t| t.session(conn.session_id).is_none());
    match closed {
        Err(s) if !gone() => Err(failure(&s)),
        _ => Err(Failure::CodeThenEnd(Code::Ok, End::SessionOver)),
    }
}

fn who_am_i(conn: &Conn) -> Done {
    let scheme = if conn.tls { "x509" } else { "ip" };
    let body = proto::WhoAmIResponse {
        client_info: vec![proto::ClientInfo {
            auth_scheme: scheme.to_string(),
            user: conn.view.caller.identity.to_string(),
        }],
    };
    Done::new(conn.door.replica.applied_zxid(), &body)
}

/// A multi's ops as the tree takes them (paths still the client's: `multi_in`
/// maps them), and each op's opcode for the answer's shape; Err names the first op
/// refused (its index and code). Null data stays null if `keeps_null` (`node_data`).
fn multi_ops(
    ops: Vec<proto::MultiOp>,
    keeps_null: bool,
) -> Result<(Vec<MultiOp>, Vec<OpCode>), (usize, Code)> {
    let mut out = Vec::with_capacity(ops.len());
    let mut codes = Vec::with_capacity(ops.len());
    for (index, op) in ops.into_iter().enumerate() {
        let opcode = op.op_code();
        codes.push(opcode);
        out.push(multi_op(op, opcode, keeps_null).map_err(|code| (index, code))?);
    }
    Ok((out, codes))
}

/// One op of a multi as the tree takes it.
fn multi_op(op: proto::MultiOp, opcode: OpCode, keeps_null: bool) -> Result<MultiOp, Code> {
    let create = |c: CreateRequest, ttl_ms: i64| {
        check_acl(&c.acl).map_err(|_| Code::InvalidAcl)?;
        let (data, null_data) = node_data(c.data, keeps_null);
        Ok(MultiOp::Create(CreateOp {
            mode: create_mode(c.flags, opcode).map_err(|_| Code::BadArguments)?,
            path: c.path,
            data,
            ttl_ms,
            null_data,
        }))
    };
    match op {
        proto::MultiOp::Create(c)
        | proto::MultiOp::Create2(c)
        | proto::MultiOp::CreateContainer(c) => create(c, 0),
        proto::MultiOp::CreateTtl(c) => {
            let (c, ttl_ms) = without_ttl(c);
            create(c, ttl_ms)
        }
        proto::MultiOp::Delete(d) => Ok(MultiOp::Delete(DeleteOp {
            path: d.path,
            version: d.version,
        })),
        proto::MultiOp::SetData(s) => {
            let (data, null_data) = node_data(s.data, keeps_null);
            Ok(MultiOp::Set(SetOp {
                path: s.path,
                data,
                version: s.version,
                null_data,
            }))
        }
        proto::MultiOp::Check(c) => Ok(MultiOp::Check(CheckOp {
            path: c.path,
            version: c.version,
        })),
        // The codec puts reads in a multiRead only.
        proto::MultiOp::GetData(_) | proto::MultiOp::GetChildren(_) => Err(Code::BadArguments),
    }
}

/// The index of the failed op a Multi's status names (its ErrorInfo's `op`).
fn failed_op(status: &Status) -> Option<usize> {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info()?;
    info.metadata.get(crate::api::error::OP_KEY)?.parse().ok()
}

/// A multi that failed at op `index` with `code`, as ZooKeeper answers it: the ops
/// before it rolled back (0), it with its code, those after RUNTIMEINCONSISTENCY.
fn multi_failed(n: usize, index: usize, code: Code, zxid: Zxid) -> Done {
    let results = (0..n)
        .map(|i| MultiResult::Error {
            err: match i.cmp(&index) {
                std::cmp::Ordering::Less => 0,
                std::cmp::Ordering::Equal => code.into(),
                std::cmp::Ordering::Greater => Code::RuntimeInconsistency.into(),
            },
        })
        .collect();
    Done::new(zxid, &proto::MultiResponse { results })
}

async fn multi(conn: &mut Conn, ops: Vec<proto::MultiOp>) -> Result<Done, Failure> {
    let n = ops.len();
    let applied = conn.door.replica.applied_zxid();
    // An op refused before submitting fails the multi at that op.
    let (ops, codes) = match multi_ops(ops, conn.door.replica.keeps_null_data()) {
        Ok(v) => v,
        Err((index, code)) => return Ok(multi_failed(n, index, code, applied)),
    };
    let outcome = match conn.door.tree.multi_in(&conn.view, ops, conn.session_id) {
        Ok(ops) => write(conn, TxnOp::Multi(ops)).await,
        Err(s) => Err(s),
    };
    let (zxid, result) = match outcome {
        Ok(v) => v,
        Err(s) => {
            return match (failed_op(&s), failure(&s)) {
                (Some(index), Failure::Code(code)) => Ok(multi_failed(n, index, code, applied)),
                (_, f) => Err(f),
            }
        }
    };
    let TxnResult::Multi(results) = result else {
        return Err(Code::SystemError.into());
    };
    let results = results
        .iter()
        .zip(codes)
        .map(|(r, code)| match r {
            OpResult::Created { path, stat: s } if code == OpCode::Create => MultiResult::Create {
                path: conn.view.path_out(path),
            },
            OpResult::Created { path, stat: s } => MultiResult::Create2 {
                path: conn.view.path_out(path),
                stat: stat(s),
            },
            OpResult::Set { stat: s } => MultiResult::SetData { stat: stat(s) },
            OpResult::Deleted => MultiResult::Delete,
            OpResult::Checked => MultiResult::Check,
        })
        .collect();
    Ok(Done::new(zxid, &proto::MultiResponse { results }))
}

/// multiRead: each read answered on its own (an error is that op's only).
async fn multi_read(conn: &mut Conn, ops: Vec<proto::MultiOp>) -> Result<Done, Failure> {
    let mut results = Vec::with_capacity(ops.len());
    let mut zxid = conn.door.replica.applied_zxid();
    for op in ops {
        let result = match op {
            proto::MultiOp::GetData(g) if g.path == CONFIG_NODE => {
                let body = ensemble_config(conn, false)?;
                MultiResult::GetData {
                    data: body.data,
                    stat: body.stat,
                }
            }
            proto::MultiOp::GetData(g) => {
                match conn
                    .door
                    .tree
                    .read_node(&conn.view, &g.path, conn.last_zxid, false)
                    .await
                {
                    Ok((z, Some(node))) => {
                        zxid = zxid.max(z);
                        MultiResult::GetData {
                            data: data_out(node.data, node.null_data),
                            stat: stat(&node.stat),
                        }
                    }
                    Ok((_, None)) => MultiResult::Error {
                        err: Code::NoNode.into(),
                    },
                    Err(s) => read_error(&s)?,
                }
            }
            proto::MultiOp::GetChildren(g) => match child_names(conn, &g.path).await {
                Ok((z, _, children)) => {
                    zxid = zxid.max(z);
                    MultiResult::GetChildren { children }
                }
                Err(Failure::Code(code)) => MultiResult::Error { err: code.into() },
                Err(f) => return Err(f),
            },
            _ => return Err(Code::BadArguments.into()),
        };
        results.push(result);
    }
    Ok(Done::new(zxid, &proto::MultiResponse { results }))
}

/// A multiRead op's error result, or the failure of the whole request.
fn read_error(status: &Status) -> Result<MultiResult, Failure> {
    match failure(status) {
        Failure::Code(code) => Ok(MultiResult::Error { err: code.into() }),
        f => Err(f),
    }
}

async fn remove_watches(
    conn: &mut Conn,
    path: &str,
    kind: i32,
    remove: bool,
) -> Result<Done, Failure> {
    let kind = WatcherType::try_from(kind).map_err(|_| Failure::Code(Code::BadArguments))?;
    shared::check_path(path).map_err(|s| failure(&s))?;
    let at = conn.view.path_in(path).map_err(|s| failure(&s))?;
    let found = if remove {
        conn.watches().remove(&at, kind)
    } else {
        conn.watches().has(&at, kind)
    };
    if !found {
        return Err(Code::NoWatcher.into());
    }
    Ok(Done::empty(conn.door.replica.applied_zxid()))
}

/// setWatches and setWatches2 after a reconnect: what changed since
/// `relative_zxid` is told at once (ZooKeeper's rule, `Watches::set_watches`), the
/// rest registered. Lists: data, exist, child, persistent, persistent recursive.
async fn set_watches(
    conn: &mut Conn,
    relative_zxid: i64,
    lists: [Vec<String>; 5],
) -> Result<Done, Failure> {
    if lists.iter().all(Vec::is_empty) {
        return Ok(Done::empty(conn.door.replica.applied_zxid()));
    }
    conn.ensure_feed()
        .map_err(|_| Failure::Code(Code::QuotaExceeded))?;
    // Paths into the tree; one a client could not have watched is left out.
    let lists = lists.map(|list| {
        list.into_iter()
            .filter(|p| shared::check_path(p).is_ok())
            .filter_map(|p| conn.view.path_in(&p).ok())
            .collect::<Vec<_>>()
    });
    let view = conn.view.clone();
    let (zxid, stats) = conn.door.replica.read(|t| {
        let stats: std::collections::HashMap<String, Option<crate::tree::Stat>> = lists
            .iter()
            .flatten()
            .map(|p| {
                let readable = view.check(t.grants(), p, Perms::READ).is_ok();
                (p.clone(), t.get(p).filter(|_| readable).map(|n| n.stat))
            })
            .collect();
        (t.last_zxid(), stats)
    });
    let mut notes = conn.drain_through(zxid).await.map_err(Failure::End)?;
    let relative = Zxid::try_from(relative_zxid).unwrap_or(0);
    let [data, exist, child, persistent, recursive] = &lists;
    let events = conn
        .watches()
        .set_watches(relative, data, exist, child, persistent, recursive, |p| {
            stats.get(p).copied().flatten()
        })
        .map_err(|_| Failure::Code(Code::QuotaExceeded))?;
    for (event_type, path) in events {
        let shown = conn.view.path_out(&path);
        notes.push(super::conn::notification(zxid, event_type.into(), &shown));
    }
    let mut done = Done::empty(zxid);
    done.notes = notes;
    Ok(done)
}

/// The session's ephemerals whose client paths start with `prefix`, sorted.
fn ephemerals(conn: &Conn, prefix: &str) -> Done {
    let (zxid, paths) = conn.door.replica.read(|t| {
        let paths: Vec<String> = t
            .session(conn.session_id)
            .map(|s| {
                s.ephemerals
                    .iter()
                    .filter_map(|p| conn.view.ns.path_out(p))
                    .filter(|p| p.starts_with(prefix))
                    .collect()
            })
            .unwrap_or_default();
        (t.last_zxid(), paths)
    });
    Done::new(zxid, &proto::GetEphemeralsResponse { ephemerals: paths })
}

async fn all_children_number(conn: &mut Conn, path: &str) -> Result<Done, Failure> {
    shared::check_path(path).map_err(|s| failure(&s))?;
    let at = conn.view.path_in(path).map_err(|s| failure(&s))?;
    shared::ready_for_read(&conn.door.replica, conn.last_zxid, false)
        .await
        .map_err(|s| failure(&s))?;
    let view = &conn.view;
    let (zxid, count) = conn
        .door
        .replica
        .read(|t| {
            view.check(t.grants(), &at, Perms::READ)?;
            Ok::<_, Status>((t.last_zxid(), t.descendant_count(&at)))
        })
        .map_err(|s| failure(&s))?;
    let count = count.ok_or(Failure::Code(Code::NoNode))?;
    let body = proto::GetAllChildrenNumberResponse {
        total_number: i32::try_from(count).unwrap_or(i32::MAX),
    };
    Ok(Done::new(zxid, &body))
}

async fn add_watch(conn: &mut Conn, path: &str, mode: i32) -> Result<Done, Failure> {
    let kind = WatchKind::from_add_watch_mode(mode).ok_or(Failure::Code(Code::BadArguments))?;
    shared::check_path(path).map_err(|s| failure(&s))?;
    let at = conn.view.path_in(path).map_err(|s| failure(&s))?;
    let view = &conn.view;
    conn.door
        .replica
        .read(|t| view.check(t.grants(), &at, Perms::READ))
        .map_err(|s| failure(&s))?;
    conn.ensure_feed()
        .map_err(|_| Failure::Code(Code::QuotaExceeded))?;
    let zxid = conn.door.replica.read(|t| t.last_zxid());
    let notes = conn.drain_through(zxid).await.map_err(Failure::End)?;
    watch(conn, kind, path)?;
    // ZooKeeper answers addWatch with an ErrorResponse of 0 as its body, and its Java
    // client reads one (without it, it drops the connection).
    let mut done = Done::new(zxid, &proto::ErrorResponse { err: 0 });
    done.notes = notes;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Null data is written as null only where every member keeps it (a rolling
    /// upgrade may still have a member that cannot decode it), in a multi too.
    #[test]
    fn null_data_is_written_as_empty_until_every_member_keeps_it() {
        assert_eq!(node_data(None, true), (Bytes::new(), true));
        assert_eq!(node_data(None, false), (Bytes::new(), false));
        let data = Bytes::from_static(b"x");
        assert_eq!(node_data(Some(data.clone()), true), (data, false));
        let create = |data| {
            proto::MultiOp::Create(CreateRequest {
                path: "/a".into(),
                data,
                acl: vec![proto::Acl::open_unsafe()],
                flags: 0,
            })
        };
        let set = proto::MultiOp::SetData(proto::SetDataRequest {
            path: "/a".into(),
            data: None,
            version: -1,
        });
        for keeps in [true, false] {
            let ops = vec![create(None), set.clone(), create(Some(Bytes::new()))];
            let (ops, _) = multi_ops(ops, keeps).unwrap();
            let nulls: Vec<bool> = ops
                .iter()
                .map(|op| match op {
                    MultiOp::Create(c) => c.null_data,
                    MultiOp::Set(s) => s.null_data,
                    _ => unreachable!(),
                })
                .collect();
            assert_eq!(nulls, [keeps, keeps, false]);
        }
        assert_eq!(data_out(Bytes::new(), true), None);
        assert_eq!(data_out(Bytes::new(), false), Some(Bytes::new()));
    }

    #[test]
    fn a_failed_multi_names_its_op_as_zookeeper_does() {
        let s = shared::error(ErrorCode::NoNode, "op 2: /a does not exist");
        assert_eq!(failed_op(&s), None, "error() does not add the op prefix");
        let s = crate::api::error::at_op(ErrorCode::NoNode, 2, "/a does not exist");
        assert_eq!(failed_op(&s), Some(2));
        let Done { body, .. } = multi_failed(4, 2, Code::NoNode, 9);
        let mut r = super::super::jute::Reader::new(&body);
        let decoded = proto::MultiResponse::decode(&mut r).unwrap();
        let errs: Vec<i32> = decoded
            .results
            .iter()
            .map(|m| match m {
                MultiResult::Error { err } => *err,
                _ => 1,
            })
            .collect();
        assert_eq!(errs, [0, 0, -101, -2]);
    }

    #[test]
    fn only_the_open_acl_is_accepted() {
        assert!(check_acl(&[Acl::open_unsafe()]).is_ok());
        assert!(matches!(
            check_acl(&[]),
            Err(Failure::Code(Code::InvalidAcl))
        ));
        let mut read_only = Acl::open_unsafe();
        read_only.perms = proto::perms::READ;
        assert!(matches!(
            check_acl(&[read_only]),
            Err(Failure::Code(Code::InvalidAcl))
        ));
    }

    /// An auth or SASL refusal is not answered before AUTH_REFUSAL_WAIT (kazoo's
    /// start() must see its connection before the refusal; test_invalid_sasl_auth).
    #[tokio::test(start_paused = true)]
    async fn an_auth_refusal_waits_before_authfailed() {
        let early =
            tokio::time::timeout(AUTH_REFUSAL_WAIT - Duration::from_millis(1), refuse_auth()).await;
        assert!(early.is_err(), "answered before AUTH_REFUSAL_WAIT");
        let started = tokio::time::Instant::now();
        let refusal = refuse_auth().await;
        assert!(started.elapsed() >= AUTH_REFUSAL_WAIT);
        assert!(matches!(
            refusal,
            Failure::CodeThenEnd(Code::AuthFailed, End::SessionOver)
        ));
    }

    #[test]
    fn create_modes_need_their_opcode() {
        assert!(create_mode(0, OpCode::Create).is_ok());
        assert!(create_mode(4, OpCode::Create2).is_err());
        assert!(create_mode(4, OpCode::CreateContainer).is_ok());
        assert!(create_mode(5, OpCode::CreateTtl).is_ok());
        assert!(create_mode(0, OpCode::CreateTtl).is_err());
        assert!(create_mode(7, OpCode::Create).is_err());
    }
}
