//! Wire encoding of what servers send each other: one format byte (`FORMAT_V1`) then
//! postcard, like `txn.rs`. A `zab::Message` is the `payload` of a
//! `concord.peer.v1.Frame`; forwarded writes and their outcomes travel the same way.
//!
//! What it must not do: panic on any input. Garbage decodes to an error.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::zab::{LearnerMsg, Message};

/// The first byte of every encoded message.
pub const FORMAT_V1: u8 = 1;

/// The peer protocol this server speaks, announced in every frame it sends
/// (`Frame.protocol`). 1: the first (a frame without the field, from an older
/// server, reads as 0, which means 1). 2: ACKEPOCH names the epoch it answers
/// (`LearnerMsg::AckEpoch`), and a leader's stream messages the epoch of the
/// leadership that opened the stream (`Message::ToLearner`). 3: a learner also
/// answers its leader's pings at once, outside its stream (`Message::Alive`). 4: a
/// txn may hold null data (`txn.rs`), which no downgrade can express: a server
/// writes null data only once every other member announced 4 to it
/// (`PeerHandle::lowest_protocol`).
pub const PROTOCOL: u32 = 4;

/// The first peer protocol whose txns may hold null data.
pub const NULL_DATA_PROTOCOL: u32 = 4;

/// Turns `msg` into what a server speaking peer `protocol` decodes, or None if it
/// has no such message: below protocol 3, `Alive` (that server counts its learners
/// heard by their stream alone); for protocol 1, an ACKEPOCH and a leader's stream
/// message without their epochs. Every other message is the same in all.
pub fn downgrade(msg: Message, protocol: u32) -> Option<Message> {
    if let Message::Alive { .. } = msg {
        return (protocol >= 3).then_some(msg);
    }
    if protocol >= 2 {
        return Some(msg);
    }
    Some(match msg {
        Message::ToLeader {
            session,
            seq,
            body:
                LearnerMsg::AckEpoch {
                    current_epoch,
                    last_zxid,
                    counts,
                    ..
                },
        } => Message::ToLeader {
            session,
            seq,
            body: LearnerMsg::AckEpochV1 {
                current_epoch,
                last_zxid,
                counts,
            },
        },
        Message::ToLearner {
            session, seq, body, ..
        } => Message::ToLearnerV1 { session, seq, body },
        other => other,
    })
}

/// A payload that is not something this server understands.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("empty message encoding")]
    Empty,
    #[error("unknown message format {0}")]
    UnknownFormat(u8),
    #[error("malformed message: {0}")]
    Malformed(#[from] postcard::Error),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// Encodes a value (never empty: an empty frame payload is a hello).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing plain data into a Vec cannot fail.
    match postcard::to_extend(value, vec![FORMAT_V1]) {
        Ok(v) => v,
        Err(e) => unreachable!("encoding into a Vec failed: {e}"),
    }
}

/// The length of `encode(value)`, without encoding it.
pub fn encoded_len<T: Serialize>(value: &T) -> usize {
    // Sizing plain data cannot fail; count the format byte alone if it ever does.
    1 + postcard::experimental::serialized_size(value).unwrap_or(0)
}

/// Decodes bytes written by `encode`; they must be exactly one value.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let (&format, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if format != FORMAT_V1 {
        return Err(DecodeError::UnknownFormat(format));
    }
    let (msg, left) = postcard::take_from_bytes(rest)?;
    if !left.is_empty() {
        return Err(DecodeError::Trailing(left.len()));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::txn::{Txn, TxnOp};
    use crate::zab::Message;
    use crate::zab::{LeaderMsg, LearnerMsg, Notification, PeerState, SyncKind, Vote};

    fn txn(zxid: u64) -> Txn {
        Txn {
            zxid,
            time_ms: 1_700_000_000_000,
            session_id: 5,
            request_id: 6,
            fence: None,
            op: TxnOp::Reap { path: "/a".into() },
        }
    }

    fn to_learner(body: LeaderMsg) -> Message {
        Message::ToLearner {
            session: 7,
            epoch: 4,
            seq: 8,
            body,
        }
    }

    fn to_leader(body: LearnerMsg) -> Message {
        Message::ToLeader {
            session: 7,
            seq: u64::MAX,
            body,
        }
    }

    /// One of every variant, nested variants included.
    fn every_message() -> Vec<Message> {
        let vote = Vote {
            epoch: 3,
            zxid: 1 << 41,
            leader: 2,
        };
        let states = [
            PeerState::Looking,
            PeerState::Following,
            PeerState::Leading,
            PeerState::Observing,
        ];
        let mut all: Vec<Message> = states
            .into_iter()
            .map(|state| {
                Message::Notification(Notification {
                    vote,
                    round: 9,
                    state,
                })
            })
            .collect();
        all.push(Message::FollowerInfo {
            session: 1,
            accepted_epoch: 2,
            observer: true,
        });
        all.push(Message::Reset { session: 4 });
        all.push(Message::Alive { session: 5 });
        let leader = [
            LeaderMsg::NewEpoch { epoch: 4 },
            LeaderMsg::Sync(SyncKind::Diff { from: 10 }),
            LeaderMsg::Sync(SyncKind::Trunc { to: 11 }),
            LeaderMsg::Sync(SyncKind::Snap {
                zxid: 12,
                data: Bytes::from_static(b"\x00snapshot\xff"),
            }),
            LeaderMsg::Proposal {
                txns: vec![txn(13), txn(14)],
            },
            LeaderMsg::Commit { zxid: 14 },
            LeaderMsg::NewLeader { epoch: 4 },
            LeaderMsg::UpToDate { committed: 14 },
            LeaderMsg::Inform {
                txns: vec![txn(15)],
                committed: 15,
            },
            LeaderMsg::Ping { round: 16 },
        ];
        all.extend(leader.into_iter().map(to_learner));
        all.push(Message::ToLearnerV1 {
            session: 7,
            seq: 8,
            body: LeaderMsg::Ping { round: 16 },
        });
        let learner = [
            LearnerMsg::AckEpoch {
                epoch: 4,
                current_epoch: 3,
                last_zxid: 17,
                counts: true,
            },
            LearnerMsg::AckEpochV1 {
                current_epoch: 3,
                last_zxid: 17,
                counts: false,
            },
            LearnerMsg::AckNewLeader { epoch: 4 },
            LearnerMsg::Ack { zxid: 18 },
            LearnerMsg::PingAck { round: 16 },
        ];
        all.extend(learner.into_iter().map(to_leader));
        all
    }

    #[test]
    fn every_variant_round_trips() {
        let all = every_message();
        assert_eq!(all.len(), 23);
        for msg in all {
            let bytes = encode(&msg);
            assert_eq!(bytes[0], FORMAT_V1);
            assert_eq!(decode::<Message>(&bytes).unwrap(), msg);
        }
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(decode::<Message>(&[]), Err(DecodeError::Empty)));
        assert!(matches!(
            decode::<Message>(&[9, 0]),
            Err(DecodeError::UnknownFormat(9))
        ));
        assert!(matches!(
            decode::<Message>(&[FORMAT_V1]),
            Err(DecodeError::Malformed(_))
        ));
        assert!(matches!(
            decode::<Message>(&[FORMAT_V1, 200]),
            Err(DecodeError::Malformed(_))
        ));
        let mut long = encode(&Message::Reset { session: 1 });
        long.push(0);
        assert!(matches!(
            decode::<Message>(&long),
            Err(DecodeError::Trailing(1))
        ));
        // Every truncation of every message, and a crude fuzz: errors, never panics.
        let mut state = 0x1234_5678_u64;
        for msg in every_message() {
            let bytes = encode(&msg);
            for cut in 0..bytes.len() {
                assert!(
                    decode::<Message>(&bytes[..cut]).is_err(),
                    "{msg:?} cut at {cut}"
                );
            }
            for _ in 0..200 {
                let mut noisy = bytes.clone();
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let at = (state >> 33) as usize % noisy.len();
                noisy[at] ^= (state >> 13) as u8 | 1;
                let _ = decode::<Message>(&noisy);
            }
        }
    }

    /// `LearnerMsg` and `Message` as protocol 1 declared them (copies of the old
    /// declarations).
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum LearnerMsgV1 {
        AckEpoch {
            current_epoch: u32,
            last_zxid: u64,
            counts: bool,
        },
        AckNewLeader {
            epoch: u32,
        },
        Ack {
            zxid: u64,
        },
        PingAck {
            round: u64,
        },
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum MessageV1 {
        Notification(Notification),
        FollowerInfo {
            session: u64,
            accepted_epoch: u32,
            observer: bool,
        },
        ToLearner {
            session: u64,
            seq: u64,
            body: LeaderMsg,
        },
        ToLeader {
            session: u64,
            seq: u64,
            body: LearnerMsgV1,
        },
        Reset {
            session: u64,
        },
    }

    /// Protocol 1's form of each message protocol 2 sends, as protocol 1 declared it.
    fn as_v1(msg: &Message) -> MessageV1 {
        match msg.clone() {
            Message::Notification(n) => MessageV1::Notification(n),
            Message::FollowerInfo {
                session,
                accepted_epoch,
                observer,
            } => MessageV1::FollowerInfo {
                session,
                accepted_epoch,
                observer,
            },
            Message::ToLearner {
                session, seq, body, ..
            } => MessageV1::ToLearner { session, seq, body },
            Message::ToLeader { session, seq, body } => MessageV1::ToLeader {
                session,
                seq,
                body: match body {
                    LearnerMsg::AckEpoch {
                        current_epoch,
                        last_zxid,
                        counts,
                        ..
                    } => LearnerMsgV1::AckEpoch {
                        current_epoch,
                        last_zxid,
                        counts,
                    },
                    LearnerMsg::AckNewLeader { epoch } => LearnerMsgV1::AckNewLeader { epoch },
                    LearnerMsg::Ack { zxid } => LearnerMsgV1::Ack { zxid },
                    LearnerMsg::PingAck { round } => LearnerMsgV1::PingAck { round },
                    other => unreachable!("protocol 2 does not send {other:?}"),
                },
            },
            Message::Reset { session } => MessageV1::Reset { session },
            other => unreachable!("protocol 2 does not send {other:?}"),
        }
    }

    /// Every message protocol 2 sends, downgraded, is byte for byte what protocol 1
    /// sent for it, both ways: an old server reads what a new one sends it, and a
    /// new server reads an old one's messages (as the V1 variants). Protocol 2
    /// itself sends them unchanged.
    #[test]
    fn downgraded_messages_are_protocol_1_on_the_wire() {
        let sent_by_2 = every_message().into_iter().filter(|m| {
            !matches!(
                m,
                Message::ToLearnerV1 { .. }
                    | Message::Alive { .. }
                    | Message::ToLeader {
                        body: LearnerMsg::AckEpochV1 { .. },
                        ..
                    }
            )
        });
        let mut count = 0;
        for msg in sent_by_2 {
            let kept = downgrade(msg.clone(), PROTOCOL);
            assert_eq!(kept, Some(msg.clone()), "protocol {PROTOCOL} keeps it");
            assert_eq!(downgrade(msg.clone(), 2), Some(msg.clone()), "so does 2");
            let down = downgrade(msg.clone(), 0).unwrap();
            let bytes = encode(&down);
            let old = as_v1(&msg);
            assert_eq!(bytes[1..], postcard::to_allocvec(&old).unwrap(), "{msg:?}");
            assert_eq!(postcard::from_bytes::<MessageV1>(&bytes[1..]).unwrap(), old);
            assert_eq!(decode::<Message>(&bytes).unwrap(), down);
            count += 1;
        }
        assert_eq!(count, 20);
    }

    /// `Alive` goes only to a server that speaks protocol 3: older ones would not
    /// decode it (and count their learners heard by their streams alone).
    #[test]
    fn alive_is_sent_only_from_protocol_3() {
        let alive = Message::Alive { session: 5 };
        assert_eq!(downgrade(alive.clone(), 3), Some(alive.clone()));
        for older in [0, 1, 2] {
            assert_eq!(downgrade(alive.clone(), older), None, "protocol {older}");
        }
        assert_eq!(decode::<Message>(&encode(&alive)).unwrap(), alive);
    }
}
