//! The Lock and Election services are declared in the API but not built yet: every
//! RPC answers UNIMPLEMENTED with the machine code, so clients can tell at once.

use std::pin::Pin;

use concord_proto::v1 as pb;
use concord_proto::v1::election_server::Election;
use concord_proto::v1::lock_server::Lock;
use concord_proto::v1::ErrorCode;
use futures::Stream;
use tonic::{Request, Response, Status};

use super::error::error;

fn unbuilt<T>(service: &str) -> Result<Response<T>, Status> {
    Err(error(
        ErrorCode::Unimplemented,
        format!("the {service} service is declared but not built yet"),
    ))
}

/// Answers every Lock RPC with UNIMPLEMENTED.
pub struct LockService;

#[tonic::async_trait]
impl Lock for LockService {
    async fn acquire(
        &self,
        _: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        unbuilt("Lock")
    }
    async fn try_acquire(
        &self,
        _: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        unbuilt("Lock")
    }
    async fn release(
        &self,
        _: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        unbuilt("Lock")
    }
    async fn holder(
        &self,
        _: Request<pb::HolderRequest>,
    ) -> Result<Response<pb::HolderResponse>, Status> {
        unbuilt("Lock")
    }
    async fn waiters(
        &self,
        _: Request<pb::WaitersRequest>,
    ) -> Result<Response<pb::WaitersResponse>, Status> {
        unbuilt("Lock")
    }
    async fn validate(
        &self,
        _: Request<pb::ValidateRequest>,
    ) -> Result<Response<pb::ValidateResponse>, Status> {
        unbuilt("Lock")
    }
}

/// Answers every Election RPC with UNIMPLEMENTED.
pub struct ElectionService;

type ObserveStream = Pin<Box<dyn Stream<Item = Result<pb::LeaderResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Election for ElectionService {
    async fn campaign(
        &self,
        _: Request<pb::CampaignRequest>,
    ) -> Result<Response<pb::CampaignResponse>, Status> {
        unbuilt("Election")
    }
    async fn proclaim(
        &self,
        _: Request<pb::ProclaimRequest>,
    ) -> Result<Response<pb::ProclaimResponse>, Status> {
        unbuilt("Election")
    }
    async fn resign(
        &self,
        _: Request<pb::ResignRequest>,
    ) -> Result<Response<pb::ResignResponse>, Status> {
        unbuilt("Election")
    }
    async fn leader(
        &self,
        _: Request<pb::LeaderRequest>,
    ) -> Result<Response<pb::LeaderResponse>, Status> {
        unbuilt("Election")
    }
    type ObserveStream = ObserveStream;
    async fn observe(
        &self,
        _: Request<pb::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        unbuilt("Election")
    }
    async fn participants(
        &self,
        _: Request<pb::ParticipantsRequest>,
    ) -> Result<Response<pb::ParticipantsResponse>, Status> {
        unbuilt("Election")
    }
}
