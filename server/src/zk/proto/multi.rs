//! multi and multiRead: a sequence of (MultiHeader, op) ending with a done header,
//! both ways.

use super::*;

/// Which ops a multi may hold: multi takes writes and check, multiRead takes reads.
/// ZooKeeper refuses to mix them ("Mixing different kind of ops").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiKind {
    Write,
    Read,
}

/// One op of a multi. The create opcodes are kept apart: create is answered with a
/// path, the others with a path and a stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOp {
    Create(CreateRequest),
    Create2(CreateRequest),
    CreateContainer(CreateRequest),
    CreateTtl(CreateTtlRequest),
    Delete(DeleteRequest),
    SetData(SetDataRequest),
    Check(CheckVersionRequest),
    GetData(GetDataRequest),
    GetChildren(GetChildrenRequest),
}

impl MultiOp {
    pub fn op_code(&self) -> OpCode {
        match self {
            Self::Create(_) => OpCode::Create,
            Self::Create2(_) => OpCode::Create2,
            Self::CreateContainer(_) => OpCode::CreateContainer,
            Self::CreateTtl(_) => OpCode::CreateTtl,
            Self::Delete(_) => OpCode::Delete,
            Self::SetData(_) => OpCode::SetData,
            Self::Check(_) => OpCode::Check,
            Self::GetData(_) => OpCode::GetData,
            Self::GetChildren(_) => OpCode::GetChildren,
        }
    }

    /// The op after a header of type `op`, if a multi of `kind` may hold it.
    fn decode(op: i32, kind: MultiKind, r: &mut Reader<'_>) -> Result<Self, JuteError> {
        let refused = JuteError::BadValue {
            what: "multi op type",
            value: op,
        };
        let Ok(code) = OpCode::try_from(op) else {
            return Err(refused);
        };
        Ok(match (kind, code) {
            (MultiKind::Write, OpCode::Create) => Self::Create(Jute::decode(r)?),
            (MultiKind::Write, OpCode::Create2) => Self::Create2(Jute::decode(r)?),
            (MultiKind::Write, OpCode::CreateContainer) => Self::CreateContainer(Jute::decode(r)?),
            (MultiKind::Write, OpCode::CreateTtl) => Self::CreateTtl(Jute::decode(r)?),
            (MultiKind::Write, OpCode::Delete) => Self::Delete(Jute::decode(r)?),
            (MultiKind::Write, OpCode::SetData) => Self::SetData(Jute::decode(r)?),
            (MultiKind::Write, OpCode::Check) => Self::Check(Jute::decode(r)?),
            (MultiKind::Read, OpCode::GetData) => Self::GetData(Jute::decode(r)?),
            (MultiKind::Read, OpCode::GetChildren) => Self::GetChildren(Jute::decode(r)?),
            _ => return Err(refused),
        })
    }

    fn encode_body(&self, w: &mut Writer) {
        match self {
            Self::Create(b) | Self::Create2(b) | Self::CreateContainer(b) => b.encode(w),
            Self::CreateTtl(b) => b.encode(w),
            Self::Delete(b) => b.encode(w),
            Self::SetData(b) => b.encode(w),
            Self::Check(b) => b.encode(w),
            Self::GetData(b) => b.encode(w),
            Self::GetChildren(b) => b.encode(w),
        }
    }
}

/// The header that ends a multi request or answer.
const MULTI_END: MultiHeader = MultiHeader {
    op: -1,
    done: true,
    err: -1,
};

/// A multi or multiRead request (`MultiOperationRecord`): (MultiHeader, op) pairs up
/// to a header whose `done` is true.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MultiRequest {
    pub ops: Vec<MultiOp>,
}

impl MultiRequest {
    /// Reads ops of `kind` up to the end header; more than `ops_max` ops is an error
    /// as soon as the one past the bound begins. An empty multi is allowed, as in
    /// ZooKeeper.
    pub fn decode(r: &mut Reader<'_>, kind: MultiKind, ops_max: usize) -> Result<Self, JuteError> {
        let mut ops = Vec::new();
        loop {
            // Each turn reads at least a 9-byte header, so the loop ends with the frame.
            let header = MultiHeader::decode(r)?;
            if header.done {
                return Ok(Self { ops });
            }
            if ops.len() >= ops_max {
                return Err(JuteError::TooMany {
                    what: "ops in one multi",
                    max: ops_max,
                });
            }
            ops.push(MultiOp::decode(header.op, kind, r)?);
        }
    }

    pub fn encode(&self, w: &mut Writer) {
        for op in &self.ops {
            MultiHeader {
                op: op.op_code().into(),
                done: false,
                err: -1,
            }
            .encode(w);
            op.encode_body(w);
        }
        MULTI_END.encode(w);
    }
}

/// One result of a multi's answer (`OpResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    /// For a create op.
    Create {
        path: String,
    },
    /// For create2, createContainer and createTTL ops (ZooKeeper answers all three
    /// with opcode create2).
    Create2 {
        path: String,
        stat: Stat,
    },
    Delete,
    SetData {
        stat: Stat,
    },
    Check,
    GetData {
        /// None: null data.
        data: Option<Bytes>,
        stat: Stat,
    },
    GetChildren {
        children: Vec<String>,
    },
    /// A failed op, or in a multi that failed every op: OK (0) for those before the
    /// failure, the failure's code, RUNTIMEINCONSISTENCY for those after (ZooKeeper's
    /// rule, the caller's to apply).
    Error {
        err: i32,
    },
}

impl MultiResult {
    fn op_code(&self) -> OpCode {
        match self {
            Self::Create { .. } => OpCode::Create,
            Self::Create2 { .. } => OpCode::Create2,
            Self::Delete => OpCode::Delete,
            Self::SetData { .. } => OpCode::SetData,
            Self::Check => OpCode::Check,
            Self::GetData { .. } => OpCode::GetData,
            Self::GetChildren { .. } => OpCode::GetChildren,
            Self::Error { .. } => OpCode::Error,
        }
    }

    fn decode(header: &MultiHeader, r: &mut Reader<'_>) -> Result<Self, JuteError> {
        let refused = JuteError::BadValue {
            what: "multi result type",
            value: header.op,
        };
        let Ok(code) = OpCode::try_from(header.op) else {
            return Err(refused);
        };
        Ok(match code {
            OpCode::Create => Self::Create {
                path: String::decode(r)?,
            },
            OpCode::Create2 => {
                let b = Create2Response::decode(r)?;
                Self::Create2 {
                    path: b.path,
                    stat: b.stat,
                }
            }
            OpCode::Delete => Self::Delete,
            OpCode::SetData => Self::SetData {
                stat: Stat::decode(r)?,
            },
            OpCode::Check => Self::Check,
            OpCode::GetData => {
                let b = GetDataResponse::decode(r)?;
                Self::GetData {
                    data: b.data,
                    stat: b.stat,
                }
            }
            OpCode::GetChildren => Self::GetChildren {
                children: Vec::decode(r)?,
            },
            OpCode::Error => Self::Error { err: r.i32()? },
            _ => return Err(refused),
        })
    }

    fn encode(&self, w: &mut Writer) {
        let err = match self {
            Self::Error { err } => *err,
            _ => 0,
        };
        MultiHeader {
            op: self.op_code().into(),
            done: false,
            err,
        }
        .encode(w);
        match self {
            Self::Create { path } => path.encode(w),
            Self::Create2 { path, stat } => {
                path.encode(w);
                stat.encode(w);
            }
            Self::Delete | Self::Check => {}
            Self::SetData { stat } => stat.encode(w),
            Self::GetData { data, stat } => {
                data.encode(w);
                stat.encode(w);
            }
            Self::GetChildren { children } => w.strings(children),
            Self::Error { err } => w.i32(*err),
        }
    }
}

/// The answer to multi and multiRead (`MultiResponse`): one result per op, then the
/// end header {-1, true, -1}.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MultiResponse {
    pub results: Vec<MultiResult>,
}

impl Jute for MultiResponse {
    const MIN_BYTES: usize = 9;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        let mut results = Vec::new();
        loop {
            let header = MultiHeader::decode(r)?;
            if header.done {
                return Ok(Self { results });
            }
            results.push(MultiResult::decode(&header, r)?);
        }
    }
    fn encode(&self, w: &mut Writer) {
        for result in &self.results {
            result.encode(w);
        }
        MULTI_END.encode(w);
    }
}
