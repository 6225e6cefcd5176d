//! Jute, ZooKeeper's binary record format, and its length-prefixed framing: bytes in,
//! typed values out, and back. Pure: no IO, no tokio, no clock.
//!
//! ```text
//!   socket bytes ─▶ FrameDecoder ─▶ frame body ─▶ Reader ─▶ records (proto.rs)
//!   records ─▶ Writer::framed() ─▶ into_frame() ─▶ socket bytes
//! ```
//!
//! Everything is big-endian, as Java's `DataOutputStream` writes it (ZooKeeper's
//! `BinaryOutputArchive`): `int` is 4 bytes, `long` 8, `boolean` 1 (0 or 1 written;
//! any non-zero byte reads as true, as `DataInputStream.readBoolean`), `buffer` and
//! `ustring` an `int` length then that many bytes (-1 means null), `vector<T>` an `int`
//! count then the items (-1 means null), a record its fields in order with nothing
//! around them.
//!
//! What it must not do: trust a length. Every length and count read from the wire is
//! checked against the bytes left in the frame before anything is allocated, so a
//! 20-byte frame claiming a vector of 2^31 items fails at once with an error. It never
//! panics on any input.

use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

/// Why bytes could not be read as the record they were meant to be. Any of these
/// means the client sent something no ZooKeeper client sends; ZooKeeper answers a
/// request body it cannot read with MARSHALLINGERROR (or closes the connection for a
/// connect request).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JuteError {
    /// The frame ended inside a value.
    #[error("{what}: needs {need} bytes, only {left} left")]
    Truncated {
        what: &'static str,
        need: usize,
        left: usize,
    },
    /// A length or count below -1, or more than the bytes left could hold.
    #[error("{what}: length {len} does not fit the {left} bytes left")]
    BadLength {
        what: &'static str,
        len: i32,
        left: usize,
    },
    /// A `ustring` that is not UTF-8.
    #[error("{what}: not UTF-8")]
    BadUtf8 { what: &'static str },
    /// Bytes after the end of a record that must fill its frame.
    #[error("{what}: {left} bytes left over after the record")]
    LeftOver { what: &'static str, left: usize },
    /// A field whose value the record does not allow (an op type a multi cannot hold).
    #[error("{what}: value {value} not allowed")]
    BadValue { what: &'static str, value: i32 },
    /// More items than the caller's bound (the ops of one multi).
    #[error("{what}: more than {max}")]
    TooMany { what: &'static str, max: usize },
}

/// A value with a jute encoding. Records in proto.rs implement it field by field.
pub trait Jute: Sized {
    /// The fewest bytes one value takes on the wire. A vector's claimed count is
    /// checked against `remaining / MIN_BYTES` before its items are read, so no claim
    /// allocates more than the frame could really hold.
    const MIN_BYTES: usize;
    /// Reads one value, consuming exactly its bytes.
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError>;
    /// Appends one value.
    fn encode(&self, w: &mut Writer);
}

/// Decodes a `T` that must fill `body` exactly (a request after its header, a
/// connect request): bytes left over are an error.
pub fn decode_all<T: Jute>(body: &[u8], what: &'static str) -> Result<T, JuteError> {
    let mut r = Reader::new(body);
    let value = T::decode(&mut r)?;
    r.finish(what)?;
    Ok(value)
}

/// Encodes one value into a fresh buffer (no frame length).
pub fn encode_to_vec<T: Jute>(value: &T) -> Vec<u8> {
    let mut w = Writer::new();
    value.encode(&mut w);
    w.into_bytes()
}

/// A cursor over one frame's bytes. Reads never run past the end and never allocate
/// more than the bytes they return.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    /// What is left to read.
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Fails with `LeftOver` unless everything was read.
    pub fn finish(&self, what: &'static str) -> Result<(), JuteError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(JuteError::LeftOver {
                what,
                left: self.buf.len(),
            })
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], JuteError> {
        if n > self.buf.len() {
            return Err(JuteError::Truncated {
                what,
                need: n,
                left: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], JuteError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub fn i32(&mut self) -> Result<i32, JuteError> {
        Ok(i32::from_be_bytes(self.array("int")?))
    }

    pub fn i64(&mut self) -> Result<i64, JuteError> {
        Ok(i64::from_be_bytes(self.array("long")?))
    }

    /// One byte; any non-zero byte is true, as Java reads it.
    pub fn bool(&mut self) -> Result<bool, JuteError> {
        Ok(self.array::<1>("boolean")?[0] != 0)
    }

    /// A length of -1 is `None`; other lengths must be ≥ 0 and, when `item_bytes` is
    /// the fewest bytes one item takes, fit what is left.
    fn length(
        &mut self,
        what: &'static str,
        item_bytes: usize,
    ) -> Result<Option<usize>, JuteError> {
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        let left = self.buf.len();
        let fits = usize::try_from(len)
            .ok()
            .filter(|n| n.saturating_mul(item_bytes.max(1)) <= left);
        match fits {
            Some(n) => Ok(Some(n)),
            None => Err(JuteError::BadLength { what, len, left }),
        }
    }

    /// A jute `buffer`: `None` for null (length -1), borrowed from the frame.
    pub fn buffer(&mut self) -> Result<Option<&'a [u8]>, JuteError> {
        match self.length("buffer", 1)? {
            None => Ok(None),
            Some(n) => self.take(n, "buffer").map(Some),
        }
    }

    /// A jute `ustring`: `None` for null (length -1), kept apart from `Some("")`.
    pub fn string(&mut self) -> Result<Option<String>, JuteError> {
        match self.length("ustring", 1)? {
            None => Ok(None),
            Some(n) => {
                let bytes = self.take(n, "ustring")?;
                match std::str::from_utf8(bytes) {
                    Ok(s) => Ok(Some(s.to_owned())),
                    Err(_) => Err(JuteError::BadUtf8 { what: "ustring" }),
                }
            }
        }
    }

    /// A `vector<ustring>`: a null vector reads as empty, a null item as "".
    pub fn strings(&mut self) -> Result<Vec<String>, JuteError> {
        Vec::<String>::decode(self)
    }

    /// A vector's count, checked against what is left for items of at least
    /// `item_bytes` each; a null vector is a count of 0.
    pub fn count(&mut self, what: &'static str, item_bytes: usize) -> Result<usize, JuteError> {
        Ok(self.length(what, item_bytes)?.unwrap_or(0))
    }
}

/// Appends jute values to a buffer. Its lengths are `int`s: a single field longer
/// than `i32::MAX` bytes cannot be written.
#[derive(Debug, Clone, Default)]
pub struct Writer {
    buf: Vec<u8>,
    /// Whether the first 4 bytes are a frame length that `into_frame` fills in.
    framed: bool,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer whose output is one frame: 4 bytes kept for the length, which
    /// `into_frame` fills in.
    pub fn framed() -> Self {
        Self {
            buf: vec![0; 4],
            framed: true,
        }
    }

    /// Bytes written, the frame length included if framed.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// What was written (with the 4 length bytes still 0 if framed: use `into_frame`).
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// The finished frame: the body's length in the first 4 bytes. For a writer that
    /// was not made by `framed`, the length is put in front.
    ///
    /// # Panics
    /// If the body is longer than `i32::MAX` bytes, which jute cannot express; the
    /// server never builds one (frames are bounded by jute.maxbuffer long before).
    pub fn into_frame(self) -> Vec<u8> {
        if !self.framed {
            return frame(&self.buf);
        }
        let mut buf = self.buf;
        let len = wire_len(buf.len() - 4);
        buf[..4].copy_from_slice(&len.to_be_bytes());
        buf
    }

    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }

    /// A `buffer`; `None` is written as null (length -1).
    pub fn buffer(&mut self, v: Option<&[u8]>) {
        match v {
            None => self.i32(-1),
            Some(b) => {
                self.i32(wire_len(b.len()));
                self.buf.extend_from_slice(b);
            }
        }
    }

    /// A `ustring`; `None` is written as null (length -1).
    pub fn string(&mut self, v: Option<&str>) {
        self.buffer(v.map(str::as_bytes));
    }

    /// A `vector<ustring>`.
    pub fn strings(&mut self, v: &[String]) {
        self.count(v.len());
        for s in v {
            self.string(Some(s));
        }
    }

    /// A vector's count.
    pub fn count(&mut self, n: usize) {
        self.i32(wire_len(n));
    }
}

/// A length as jute writes it.
///
/// # Panics
/// Above `i32::MAX`: no jute length can say it, and writing a wrong one would corrupt
/// the stream for the client; the server's values are bounded far below (node data,
/// jute.maxbuffer).
fn wire_len(n: usize) -> i32 {
    match i32::try_from(n) {
        Ok(len) => len,
        Err(_) => panic!("jute length {n} does not fit an int"),
    }
}

/// `body` with its 4-byte big-endian length in front: one frame.
///
/// # Panics
/// If `body` is longer than `i32::MAX` bytes (see `Writer::into_frame`).
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&wire_len(body.len()).to_be_bytes());
    out.extend_from_slice(body);
    out
}

impl Jute for i32 {
    const MIN_BYTES: usize = 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        r.i32()
    }
    fn encode(&self, w: &mut Writer) {
        w.i32(*self);
    }
}

impl Jute for i64 {
    const MIN_BYTES: usize = 8;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        r.i64()
    }
    fn encode(&self, w: &mut Writer) {
        w.i64(*self);
    }
}

impl Jute for bool {
    const MIN_BYTES: usize = 1;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        r.bool()
    }
    fn encode(&self, w: &mut Writer) {
        w.bool(*self);
    }
}

/// A `ustring` that ZooKeeper never leaves null (paths, names): null reads as "", which
/// every path check then refuses as ZooKeeper refuses a null path (BADARGUMENTS).
impl Jute for String {
    const MIN_BYTES: usize = 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(r.string()?.unwrap_or_default())
    }
    fn encode(&self, w: &mut Writer) {
        w.string(Some(self));
    }
}

/// A `ustring` whose null means something (reconfig's server lists).
impl Jute for Option<String> {
    const MIN_BYTES: usize = 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        r.string()
    }
    fn encode(&self, w: &mut Writer) {
        w.string(self.as_deref());
    }
}

/// A `buffer` whose null means nothing apart from empty (a password, an auth
/// token): null reads as empty, and it is written with its length.
impl Jute for Bytes {
    const MIN_BYTES: usize = 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(r.buffer()?.map(Bytes::copy_from_slice).unwrap_or_default())
    }
    fn encode(&self, w: &mut Writer) {
        w.buffer(Some(self));
    }
}

/// A `buffer` whose null is kept apart from empty: a node's data (Java's
/// `create(path, null, ...)`, kazoo's `None`).
impl Jute for Option<Bytes> {
    const MIN_BYTES: usize = 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(r.buffer()?.map(Bytes::copy_from_slice))
    }
    fn encode(&self, w: &mut Writer) {
        w.buffer(self.as_deref());
    }
}

/// A `vector<T>`: null reads as empty; written with its count, never as null.
impl<T: Jute> Jute for Vec<T> {
    const MIN_BYTES: usize = 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        let n = r.count("vector", T::MIN_BYTES)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(T::decode(r)?);
        }
        Ok(out)
    }
    fn encode(&self, w: &mut Writer) {
        w.count(self.len());
        for item in self {
            item.encode(w);
        }
    }
}

/// A frame's length was refused; the connection must be closed (ZooKeeper logs
/// "Len error" and closes it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("frame length {len} is negative")]
    Negative { len: i32 },
    #[error("frame length {len} is above jute.maxbuffer ({max} bytes)")]
    TooLarge { len: usize, max: usize },
}

/// Splits a byte stream into frames: a 4-byte big-endian length, then that many bytes.
/// Sans-IO: the caller reads from the socket into a `BytesMut` and calls `decode`
/// until it answers `None`.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    /// jute.maxbuffer: the longest body accepted. As ZooKeeper, a length equal to it
    /// passes and one byte more fails.
    pub max: usize,
}

impl FrameDecoder {
    pub fn new(max: usize) -> Self {
        Self { max }
    }

    /// The next whole frame's body, or `None` if `buf` does not hold one yet (nothing
    /// is consumed then). A refused length is an error before its body arrives.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(head) = buf.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = i32::from_be_bytes(*head);
        let Ok(body_len) = usize::try_from(len) else {
            return Err(FrameError::Negative { len });
        };
        if body_len > self.max {
            return Err(FrameError::TooLarge {
                len: body_len,
                max: self.max,
            });
        }
        if buf.len() < 4 + body_len {
            buf.reserve(4 + body_len - buf.len());
            return Ok(None);
        }
        buf.advance(4);
        Ok(Some(buf.split_to(body_len).freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_are_big_endian_as_java_writes_them() {
        let mut w = Writer::new();
        w.i32(0x0102_0304);
        w.i64(-2);
        w.bool(true);
        w.bool(false);
        assert_eq!(
            w.into_bytes(),
            [1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 1, 0]
        );
        let bytes = [0, 0, 0, 7, 0x80, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut r = Reader::new(&bytes);
        assert_eq!(r.i32(), Ok(7));
        assert_eq!(r.i64(), Ok(i64::MIN));
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.bool(), Ok(true), "any non-zero byte reads true");
        assert!(r.is_empty());
        assert_eq!(r.finish("t"), Ok(()));
    }

    #[test]
    fn null_is_kept_apart_from_empty() {
        let mut w = Writer::new();
        w.string(None);
        w.string(Some(""));
        w.buffer(None);
        w.buffer(Some(b""));
        let bytes = w.into_bytes();
        assert_eq!(
            bytes,
            [255, 255, 255, 255, 0, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0]
        );
        let mut r = Reader::new(&bytes);
        assert_eq!(r.string(), Ok(None));
        assert_eq!(r.string(), Ok(Some(String::new())));
        assert_eq!(r.buffer(), Ok(None));
        assert_eq!(r.buffer(), Ok(Some(&b""[..])));
        // The typed fields fold null into empty, as documented on their impls, but
        // for a node's data.
        let mut r = Reader::new(&bytes);
        assert_eq!(String::decode(&mut r), Ok(String::new()));
        assert_eq!(String::decode(&mut r), Ok(String::new()));
        assert_eq!(Bytes::decode(&mut r), Ok(Bytes::new()));
        assert_eq!(Bytes::decode(&mut r), Ok(Bytes::new()));
        let mut r = Reader::new(&bytes[8..]);
        assert_eq!(Option::<Bytes>::decode(&mut r), Ok(None));
        assert_eq!(Option::<Bytes>::decode(&mut r), Ok(Some(Bytes::new())));
        let mut w = Writer::new();
        None::<Bytes>.encode(&mut w);
        Some(Bytes::new()).encode(&mut w);
        assert_eq!(w.into_bytes(), bytes[8..]);
    }

    #[test]
    fn strings_round_trip_and_a_null_vector_reads_empty() {
        let v = vec!["a".to_owned(), "ζ".to_owned(), String::new()];
        let mut w = Writer::new();
        w.strings(&v);
        let bytes = w.into_bytes();
        assert_eq!(
            bytes,
            [0, 0, 0, 3, 0, 0, 0, 1, b'a', 0, 0, 0, 2, 0xce, 0xb6, 0, 0, 0, 0]
        );
        assert_eq!(Reader::new(&bytes).strings(), Ok(v));
        assert_eq!(Reader::new(&[255; 4]).strings(), Ok(vec![]));
    }

    #[test]
    fn bad_utf8_is_an_error() {
        let bytes = [0, 0, 0, 2, 0xc3, 0x28];
        assert_eq!(
            Reader::new(&bytes).string(),
            Err(JuteError::BadUtf8 { what: "ustring" })
        );
    }

    #[test]
    fn lengths_are_checked_against_what_is_left_before_allocating() {
        // A vector claiming i32::MAX strings in 4 bytes: refused from its count alone.
        let bytes = [0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert_eq!(
            Reader::new(&bytes).strings(),
            Err(JuteError::BadLength {
                what: "vector",
                len: i32::MAX,
                left: 4
            })
        );
        // Two strings need at least 8 bytes: 7 are refused before the first is read.
        let bytes = [0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            Reader::new(&bytes).strings(),
            Err(JuteError::BadLength {
                len: 2,
                left: 7,
                ..
            })
        ));
        let bytes = [0x7f, 0xff, 0xff, 0xff, 1, 2];
        assert_eq!(
            Reader::new(&bytes).buffer(),
            Err(JuteError::BadLength {
                what: "buffer",
                len: i32::MAX,
                left: 2
            })
        );
        for len in [-2i32, i32::MIN] {
            let bytes = len.to_be_bytes();
            assert!(matches!(
                Reader::new(&bytes).string(),
                Err(JuteError::BadLength { .. })
            ));
            assert!(matches!(
                Reader::new(&bytes).count("vector", 1),
                Err(JuteError::BadLength { .. })
            ));
        }
    }

    #[test]
    fn truncated_values_are_errors() {
        assert!(matches!(
            Reader::new(&[0, 0, 0]).i32(),
            Err(JuteError::Truncated {
                need: 4,
                left: 3,
                ..
            })
        ));
        assert!(matches!(
            Reader::new(&[0; 7]).i64(),
            Err(JuteError::Truncated {
                need: 8,
                left: 7,
                ..
            })
        ));
        assert!(matches!(
            Reader::new(&[]).bool(),
            Err(JuteError::Truncated {
                need: 1,
                left: 0,
                ..
            })
        ));
        assert!(matches!(
            Reader::new(&[0, 0]).buffer(),
            Err(JuteError::Truncated { .. })
        ));
    }

    #[test]
    fn decode_all_refuses_bytes_left_over() {
        assert_eq!(decode_all::<i32>(&[0, 0, 0, 1], "x"), Ok(1));
        assert_eq!(
            decode_all::<i32>(&[0, 0, 0, 1, 9], "getData"),
            Err(JuteError::LeftOver {
                what: "getData",
                left: 1
            })
        );
    }

    #[test]
    fn frames_are_split_only_when_whole() {
        let mut d = FrameDecoder::new(16);
        let mut buf = BytesMut::new();
        assert_eq!(d.decode(&mut buf), Ok(None));
        buf.extend_from_slice(&[0, 0, 0]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        buf.extend_from_slice(&[3, b'a', b'b']);
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert_eq!(buf.len(), 6, "nothing is consumed until the frame is whole");
        buf.extend_from_slice(&[b'c', 0, 0, 0, 0, 0, 0, 0, 1, b'z', 0]);
        assert_eq!(d.decode(&mut buf), Ok(Some(Bytes::from_static(b"abc"))));
        assert_eq!(d.decode(&mut buf), Ok(Some(Bytes::new())));
        assert_eq!(d.decode(&mut buf), Ok(Some(Bytes::from_static(b"z"))));
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert_eq!(&buf[..], &[0]);
    }

    #[test]
    fn frame_lengths_above_max_or_negative_are_refused_before_the_body() {
        let mut d = FrameDecoder::new(1024 * 1024);
        let mut buf = BytesMut::from(&(1024 * 1024i32).to_be_bytes()[..]);
        assert_eq!(
            d.decode(&mut buf),
            Ok(None),
            "exactly jute.maxbuffer passes"
        );
        let mut buf = BytesMut::from(&(1024 * 1024 + 1i32).to_be_bytes()[..]);
        assert_eq!(
            d.decode(&mut buf),
            Err(FrameError::TooLarge {
                len: 1024 * 1024 + 1,
                max: 1024 * 1024
            })
        );
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xfe][..]);
        assert_eq!(d.decode(&mut buf), Err(FrameError::Negative { len: -2 }));
        let mut buf = BytesMut::from(&i32::MAX.to_be_bytes()[..]);
        assert!(matches!(
            d.decode(&mut buf),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(buf.capacity() < 1024, "a refused length reserves nothing");
    }

    #[test]
    fn framed_writer_and_frame_put_the_length_in_front() {
        let mut w = Writer::framed();
        w.i32(-2);
        w.i32(11);
        let expected = [0, 0, 0, 8, 255, 255, 255, 254, 0, 0, 0, 11];
        assert_eq!(w.into_frame(), expected);
        assert_eq!(frame(&expected[4..]), expected);
        let mut w = Writer::new();
        w.bool(true);
        assert_eq!(w.into_frame(), [0, 0, 0, 1, 1]);
    }
}
