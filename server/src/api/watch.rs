//! TEMPORARY: replaced once the watch hub lands.
use crate::replica::Replica;
use concord_proto::v1 as pb;
use futures::Stream;
use std::pin::Pin;
use tonic::{Request, Response, Status};
pub struct WatchService {
    _replica: Replica,
}
impl WatchService {
    pub fn new(replica: Replica) -> Self {
        WatchService { _replica: replica }
    }
}
type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;
#[tonic::async_trait]
impl pb::watch_server::Watch for WatchService {
    type WatchStream = WatchStream;
    async fn watch(&self, _: Request<pb::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        Err(Status::unimplemented("soon"))
    }
}
