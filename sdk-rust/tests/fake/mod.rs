//! A tiny in-process fake Concord server for the SDK's tests: just enough of the Tree,
//! Session and Watch services to exercise the client's conversions, keep-alives and
//! watch resumption. It is not the real server and checks nothing but what tests ask.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use concord::proto::session_server::{Session, SessionServer};
use concord::proto::tree_server::{Tree, TreeServer};
use concord::proto::watch_server::{Watch, WatchServer};
use concord::proto::*;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

/// Shared, inspectable state of the fake.
#[derive(Default)]
pub struct State {
    /// Node path → data.
    pub nodes: BTreeMap<String, Vec<u8>>,
    /// Next zxid to hand out.
    pub zxid: u64,
    /// KeepAlive pings received, all streams together.
    pub pings: u64,
    /// KeepAlive streams opened.
    pub keep_alive_streams: u64,
    /// KeepAlive streams whose client side ended (closed or dropped).
    pub keep_alive_streams_ended: u64,
    /// Break the first KeepAlive stream after its first answer.
    pub break_first_keep_alive: bool,
    /// Answer pings with `expired`.
    pub expire_sessions: bool,
    /// Sessions closed with Close.
    pub closed: Vec<u64>,
    /// The watch log: events served by every Watch call, in zxid order.
    pub log: Vec<WatchEvent>,
    /// `start_zxid` of each Watch call, in order.
    pub watch_starts: Vec<Option<u64>>,
    /// For the n-th Watch call (0-based): after how many events to fail, and with what.
    pub watch_breaks: BTreeMap<usize, (usize, Status)>,
    /// Failures the next Get and Create calls answer with, one per call, in order.
    pub fail_next: std::collections::VecDeque<Status>,
    /// Get and Create calls received (failed ones included).
    pub calls: u64,
    /// How long Get waits before it answers.
    pub get_delay: std::time::Duration,
}

pub type Shared = Arc<Mutex<State>>;

/// A Status as the real server sends it: code prefix plus `concord-error-code`.
pub fn concord_status(code: ErrorCode, grpc: tonic::Code, message: &str) -> Status {
    let name = code.as_str_name();
    let mut metadata = MetadataMap::new();
    if let Ok(value) = name.parse() {
        metadata.insert("concord-error-code", value);
    }
    Status::with_metadata(grpc, format!("{name}: {message}"), metadata)
}

fn header(zxid: u64) -> Option<ResponseHeader> {
    Some(ResponseHeader { zxid, server_id: 1 })
}

/// Starts the fake on a loopback port; returns its endpoint and state.
pub async fn start() -> (String, Shared) {
    let state: Shared = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr: SocketAddr = listener.local_addr().expect("local addr");
    let fake = Fake(state.clone());
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(TreeServer::new(fake.clone()))
            .add_service(SessionServer::new(fake.clone()))
            .add_service(WatchServer::new(fake))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
    });
    (format!("http://{addr}"), state)
}

#[derive(Clone)]
struct Fake(Shared);

impl Fake {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().expect("fake state lock")
    }

    /// Counts a Get or Create call; the failure it must answer with, if one is queued.
    fn planned_failure(&self) -> Result<(), Status> {
        let mut state = self.state();
        state.calls += 1;
        state.fail_next.pop_front().map_or(Ok(()), Err)
    }
}

fn unimplemented() -> Status {
    concord_status(
        ErrorCode::Unimplemented,
        tonic::Code::Unimplemented,
        "not in the fake",
    )
}

#[tonic::async_trait]
impl Tree for Fake {
    async fn create(
        &self,
        req: Request<CreateRequest>,
    ) -> Result<Response<CreateResponse>, Status> {
        let req = req.into_inner();
        self.planned_failure()?;
        let mut state = self.state();
        if state.nodes.contains_key(&req.path) {
            let msg = format!("{} already exists", req.path);
            return Err(concord_status(
                ErrorCode::NodeExists,
                tonic::Code::AlreadyExists,
                &msg,
            ));
        }
        state.zxid += 1;
        let zxid = state.zxid;
        state.nodes.insert(req.path.clone(), req.data.to_vec());
        let stat = Stat {
            czxid: zxid,
            mzxid: zxid,
            data_length: req.data.len() as u32,
            ephemeral_owner: req.session_id,
            ..Stat::default()
        };
        Ok(Response::new(CreateResponse {
            header: header(zxid),
            path: req.path,
            stat: Some(stat),
        }))
    }

    async fn get(&self, req: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let req = req.into_inner();
        self.planned_failure()?;
        let delay = self.state().get_delay;
        tokio::time::sleep(delay).await;
        let state = self.state();
        let Some(data) = state.nodes.get(&req.path) else {
            let msg = format!("{} does not exist", req.path);
            return Err(concord_status(
                ErrorCode::NoNode,
                tonic::Code::NotFound,
                &msg,
            ));
        };
        Ok(Response::new(GetResponse {
            header: header(state.zxid),
            data: data.clone().into(),
            stat: Some(Stat {
                data_length: data.len() as u32,
                ..Stat::default()
            }),
        }))
    }

    async fn exists(&self, _: Request<ExistsRequest>) -> Result<Response<ExistsResponse>, Status> {
        Err(unimplemented())
    }

    async fn set(&self, _: Request<SetRequest>) -> Result<Response<SetResponse>, Status> {
        Err(unimplemented())
    }

    async fn delete(&self, _: Request<DeleteRequest>) -> Result<Response<DeleteResponse>, Status> {
        Err(unimplemented())
    }

    /// Pages of `page_size` names `c0..c4` under any path; the token is the next index.
    async fn children(
        &self,
        req: Request<ChildrenRequest>,
    ) -> Result<Response<ChildrenResponse>, Status> {
        let req = req.into_inner();
        let names: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
        let from: usize = req.page_token.parse().unwrap_or(0);
        let size = if req.page_size == 0 {
            names.len()
        } else {
            req.page_size as usize
        };
        let to = (from + size).min(names.len());
        let next = if to < names.len() {
            to.to_string()
        } else {
            String::new()
        };
        let children = names[from..to]
            .iter()
            .map(|name| Child {
                name: name.clone(),
                stat: None,
            })
            .collect();
        Ok(Response::new(ChildrenResponse {
            header: header(from as u64 + 100),
            children,
            next_page_token: next,
            stat: Some(Stat::default()),
        }))
    }

    async fn multi(&self, _: Request<MultiRequest>) -> Result<Response<MultiResponse>, Status> {
        Err(unimplemented())
    }

    async fn sync(&self, _: Request<SyncRequest>) -> Result<Response<SyncResponse>, Status> {
        Err(unimplemented())
    }
}

#[tonic::async_trait]
impl Session for Fake {
    async fn open(
        &self,
        req: Request<OpenSessionRequest>,
    ) -> Result<Response<OpenSessionResponse>, Status> {
        let ttl_ms = req.into_inner().ttl_ms;
        let mut state = self.state();
        state.zxid += 1;
        Ok(Response::new(OpenSessionResponse {
            header: header(state.zxid),
            session_id: 0x42,
            ttl_ms,
        }))
    }

    type KeepAliveStream = ReceiverStream<Result<KeepAliveResponse, Status>>;

    async fn keep_alive(
        &self,
        req: Request<Streaming<KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let mut pings = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let shared = self.0.clone();
        let stream_no = {
            let mut state = self.state();
            state.keep_alive_streams += 1;
            state.keep_alive_streams
        };
        tokio::spawn(async move {
            while let Ok(Some(ping)) = pings.message().await {
                let (expired, break_now) = {
                    let mut state = shared.lock().expect("fake state lock");
                    state.pings += 1;
                    (
                        state.expire_sessions,
                        state.break_first_keep_alive && stream_no == 1,
                    )
                };
                let resp = KeepAliveResponse {
                    header: header(0),
                    session_id: ping.session_id,
                    ttl_ms: 300,
                    remaining_ms: 300,
                    expired,
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
                if break_now {
                    let status =
                        concord_status(ErrorCode::Unavailable, tonic::Code::Unavailable, "bye");
                    let _ = tx.send(Err(status)).await;
                    return;
                }
            }
            shared
                .lock()
                .expect("fake state lock")
                .keep_alive_streams_ended += 1;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn close(
        &self,
        req: Request<CloseSessionRequest>,
    ) -> Result<Response<CloseSessionResponse>, Status> {
        let mut state = self.state();
        state.closed.push(req.into_inner().session_id);
        Ok(Response::new(CloseSessionResponse {
            header: header(state.zxid),
        }))
    }

    async fn get(
        &self,
        _: Request<GetSessionRequest>,
    ) -> Result<Response<GetSessionResponse>, Status> {
        Err(unimplemented())
    }

    async fn list(
        &self,
        _: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsResponse>, Status> {
        Err(unimplemented())
    }
}

#[tonic::async_trait]
impl Watch for Fake {
    type WatchStream = ReceiverStream<Result<WatchResponse, Status>>;

    /// Sends Started, then every log event after `start_zxid`, then holds the stream
    /// open; or fails after a scripted number of events.
    async fn watch(
        &self,
        req: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = req.into_inner();
        let (events, fail, head) = {
            let mut state = self.state();
            let call = state.watch_starts.len();
            state.watch_starts.push(req.start_zxid);
            let from = req.start_zxid.unwrap_or(0);
            let events: Vec<WatchEvent> = state
                .log
                .iter()
                .filter(|e| e.zxid > from)
                .cloned()
                .collect();
            let head = state.log.last().map_or(0, |e| e.zxid);
            (events, state.watch_breaks.remove(&call), head)
        };
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let started = watch_response::Msg::Started(WatchStarted {
                zxid: head,
                watch_id: 7,
            });
            let _ = tx.send(Ok(WatchResponse { msg: Some(started) })).await;
            for (sent, event) in events.into_iter().enumerate() {
                if let Some((after, status)) = &fail {
                    if sent == *after {
                        let status = Status::with_metadata(
                            status.code(),
                            status.message(),
                            status.metadata().clone(),
                        );
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                }
                let msg = watch_response::Msg::Event(event);
                let _ = tx.send(Ok(WatchResponse { msg: Some(msg) })).await;
            }
            // Hold the stream open until the client goes away.
            tx.closed().await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
