//! A request frame as a whole: its header, then its body by opcode; and an answer
//! frame.

use super::*;

/// What follows a RequestHeader, by opcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Ping,
    CloseSession,
    WhoAmI,
    Create(CreateRequest),
    Create2(CreateRequest),
    CreateContainer(CreateRequest),
    CreateTtl(CreateTtlRequest),
    Delete(DeleteRequest),
    DeleteContainer(DeleteContainerRequest),
    Exists(ExistsRequest),
    GetData(GetDataRequest),
    SetData(SetDataRequest),
    GetAcl(GetAclRequest),
    SetAcl(SetAclRequest),
    GetChildren(GetChildrenRequest),
    GetChildren2(GetChildren2Request),
    Sync(SyncRequest),
    Multi(MultiRequest),
    MultiRead(MultiRequest),
    Reconfig(ReconfigRequest),
    CheckWatches(CheckWatchesRequest),
    RemoveWatches(RemoveWatchesRequest),
    Auth(AuthPacket),
    SetWatches(SetWatches),
    SetWatches2(SetWatches2),
    Sasl(GetSaslRequest),
    GetEphemerals(GetEphemeralsRequest),
    GetAllChildrenNumber(GetAllChildrenNumberRequest),
    AddWatch(AddWatchRequest),
}

/// A request the server cannot take. Both are answered, with the request's xid, and
/// the connection goes on (ZooKeeper does the same).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// An opcode no client may send (unknown, notification, a check outside a multi,
    /// error, createSession): answer UNIMPLEMENTED, as ZooKeeper's
    /// UnimplementedRequestProcessor does.
    #[error("opcode {op} is not a request a client may send")]
    Unimplemented { op: i32 },
    /// A known opcode whose body does not read as its record: ZooKeeper answers
    /// MARSHALLINGERROR.
    #[error("{} request: {source}", op.name())]
    Malformed {
        op: OpCode,
        #[source]
        source: JuteError,
    },
}

impl RequestError {
    /// The code ZooKeeper answers it with.
    pub fn code(&self) -> Code {
        match self {
            Self::Unimplemented { .. } => Code::Unimplemented,
            Self::Malformed { .. } => Code::MarshallingError,
        }
    }
}

impl Request {
    /// Reads the body of a request of opcode `op`, which must fill `body` exactly.
    /// A multi of more than `multi_ops_max` ops is malformed.
    pub fn decode(
        op: OpCode,
        body: &mut Reader<'_>,
        multi_ops_max: usize,
    ) -> Result<Self, RequestError> {
        let malformed = |source| RequestError::Malformed { op, source };
        let request = Self::decode_body(op, body, multi_ops_max).map_err(malformed)?;
        if let Some(request) = request {
            body.finish(op.name()).map_err(malformed)?;
            Ok(request)
        } else {
            Err(RequestError::Unimplemented { op: op.into() })
        }
    }

    fn decode_body(
        op: OpCode,
        r: &mut Reader<'_>,
        ops_max: usize,
    ) -> Result<Option<Self>, JuteError> {
        Ok(Some(match op {
            OpCode::Ping => Self::Ping,
            OpCode::CloseSession => Self::CloseSession,
            OpCode::WhoAmI => Self::WhoAmI,
            OpCode::Create => Self::Create(Jute::decode(r)?),
            OpCode::Create2 => Self::Create2(Jute::decode(r)?),
            OpCode::CreateContainer => Self::CreateContainer(Jute::decode(r)?),
            OpCode::CreateTtl => Self::CreateTtl(Jute::decode(r)?),
            OpCode::Delete => Self::Delete(Jute::decode(r)?),
            OpCode::DeleteContainer => Self::DeleteContainer(Jute::decode(r)?),
            OpCode::Exists => Self::Exists(Jute::decode(r)?),
            OpCode::GetData => Self::GetData(Jute::decode(r)?),
            OpCode::SetData => Self::SetData(Jute::decode(r)?),
            OpCode::GetAcl => Self::GetAcl(Jute::decode(r)?),
            OpCode::SetAcl => Self::SetAcl(Jute::decode(r)?),
            OpCode::GetChildren => Self::GetChildren(Jute::decode(r)?),
            OpCode::GetChildren2 => Self::GetChildren2(Jute::decode(r)?),
            OpCode::Sync => Self::Sync(Jute::decode(r)?),
            OpCode::Multi => Self::Multi(MultiRequest::decode(r, MultiKind::Write, ops_max)?),
            OpCode::MultiRead => {
                Self::MultiRead(MultiRequest::decode(r, MultiKind::Read, ops_max)?)
            }
            OpCode::Reconfig => Self::Reconfig(Jute::decode(r)?),
            OpCode::CheckWatches => Self::CheckWatches(Jute::decode(r)?),
            OpCode::RemoveWatches => Self::RemoveWatches(Jute::decode(r)?),
            OpCode::Auth => Self::Auth(Jute::decode(r)?),
            OpCode::SetWatches => Self::SetWatches(Jute::decode(r)?),
            OpCode::SetWatches2 => Self::SetWatches2(Jute::decode(r)?),
            OpCode::Sasl => Self::Sasl(Jute::decode(r)?),
            OpCode::GetEphemerals => Self::GetEphemerals(Jute::decode(r)?),
            OpCode::GetAllChildrenNumber => Self::GetAllChildrenNumber(Jute::decode(r)?),
            OpCode::AddWatch => Self::AddWatch(Jute::decode(r)?),
            OpCode::Notification | OpCode::Check | OpCode::Error | OpCode::CreateSession => {
                return Ok(None)
            }
        }))
    }

    pub fn op_code(&self) -> OpCode {
        match self {
            Self::Ping => OpCode::Ping,
            Self::CloseSession => OpCode::CloseSession,
            Self::WhoAmI => OpCode::WhoAmI,
            Self::Create(_) => OpCode::Create,
            Self::Create2(_) => OpCode::Create2,
            Self::CreateContainer(_) => OpCode::CreateContainer,
            Self::CreateTtl(_) => OpCode::CreateTtl,
            Self::Delete(_) => OpCode::Delete,
            Self::DeleteContainer(_) => OpCode::DeleteContainer,
            Self::Exists(_) => OpCode::Exists,
            Self::GetData(_) => OpCode::GetData,
            Self::SetData(_) => OpCode::SetData,
            Self::GetAcl(_) => OpCode::GetAcl,
            Self::SetAcl(_) => OpCode::SetAcl,
            Self::GetChildren(_) => OpCode::GetChildren,
            Self::GetChildren2(_) => OpCode::GetChildren2,
            Self::Sync(_) => OpCode::Sync,
            Self::Multi(_) => OpCode::Multi,
            Self::MultiRead(_) => OpCode::MultiRead,
            Self::Reconfig(_) => OpCode::Reconfig,
            Self::CheckWatches(_) => OpCode::CheckWatches,
            Self::RemoveWatches(_) => OpCode::RemoveWatches,
            Self::Auth(_) => OpCode::Auth,
            Self::SetWatches(_) => OpCode::SetWatches,
            Self::SetWatches2(_) => OpCode::SetWatches2,
            Self::Sasl(_) => OpCode::Sasl,
            Self::GetEphemerals(_) => OpCode::GetEphemerals,
            Self::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
            Self::AddWatch(_) => OpCode::AddWatch,
        }
    }

    /// Writes the body as a client would (the header is the caller's).
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Self::Ping | Self::CloseSession | Self::WhoAmI => {}
            Self::Create(b) | Self::Create2(b) | Self::CreateContainer(b) => b.encode(w),
            Self::CreateTtl(b) => b.encode(w),
            Self::Delete(b) => b.encode(w),
            Self::DeleteContainer(b) => b.encode(w),
            Self::Exists(b) => b.encode(w),
            Self::GetData(b) => b.encode(w),
            Self::SetData(b) => b.encode(w),
            Self::GetAcl(b) => b.encode(w),
            Self::SetAcl(b) => b.encode(w),
            Self::GetChildren(b) => b.encode(w),
            Self::GetChildren2(b) => b.encode(w),
            Self::Sync(b) => b.encode(w),
            Self::Multi(b) | Self::MultiRead(b) => b.encode(w),
            Self::Reconfig(b) => b.encode(w),
            Self::CheckWatches(b) => b.encode(w),
            Self::RemoveWatches(b) => b.encode(w),
            Self::Auth(b) => b.encode(w),
            Self::SetWatches(b) => b.encode(w),
            Self::SetWatches2(b) => b.encode(w),
            Self::Sasl(b) => b.encode(w),
            Self::GetEphemerals(b) => b.encode(w),
            Self::GetAllChildrenNumber(b) => b.encode(w),
            Self::AddWatch(b) => b.encode(w),
        }
    }
}

/// Reads one request frame's body (the bytes after the frame length). The outer error
/// means not even the 8-byte header could be read: close the connection. The inner
/// one is answered with the header's xid and `RequestError::code()`.
pub fn decode_request(
    frame: &[u8],
    multi_ops_max: usize,
) -> Result<(RequestHeader, Result<Request, RequestError>), JuteError> {
    let mut r = Reader::new(frame);
    let header = RequestHeader::decode(&mut r)?;
    let request = match OpCode::try_from(header.op) {
        Ok(op) => Request::decode(op, &mut r, multi_ops_max),
        Err(op) => Err(RequestError::Unimplemented { op }),
    };
    Ok((header, request))
}

/// One answer frame: the length, the reply header, then `body` (`&()` for none).
pub fn reply_frame<T: Jute>(header: &ReplyHeader, body: &T) -> Vec<u8> {
    let mut w = Writer::framed();
    header.encode(&mut w);
    body.encode(&mut w);
    w.into_frame()
}
