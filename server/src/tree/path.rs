//! Path rules (ZooKeeper's `PathUtils.validatePath`) and small path helpers.
//!
//! A valid path is absolute ("/a/b"), has no empty segment ("//"), no "." or ".."
//! segment, no trailing slash (except the root "/"), none of the characters ZooKeeper
//! refuses, and at most `PATH_BYTES_MAX` bytes.
//!
//! ZooKeeper checks UTF-16 code units, so it refuses every character outside the Basic
//! Multilingual Plane (an emoji is a surrogate pair, U+D800..U+DFFF, in Java). We do
//! the same, so a path valid here is valid in ZooKeeper and the other way round.
//!
//! The helpers (`parent`, `name`, `join`) never panic, whatever the input; on invalid
//! input they return something meaningless but safe.
//!
//! `clip` shortens a path (or any client-given text) for an error message: messages
//! travel in gRPC trailers, twice (grpc-message and grpc-status-details-bin), and
//! gRPC C-core clients drop a call whose trailers pass 8 KiB.
//!
//! What it must not do: look at the tree; it only knows strings.

/// Longest path accepted, in bytes (UTF-8).
pub const PATH_BYTES_MAX: usize = 4096;

/// Most bytes of client-given text an error message shows: longer text is cut to a
/// prefix of at most `CLIP_PREFIX_BYTES` and its length (`/aaaa…(4096 bytes)`).
pub const CLIP_BYTES_MAX: usize = 96;

/// Bytes of the prefix `clip` keeps of a text longer than `CLIP_BYTES_MAX`.
pub const CLIP_PREFIX_BYTES: usize = 64;

/// `text` for an error message: whole when short, else a prefix and the length; control
/// characters escaped (`\u{0}`), so the message stays one printable line.
pub fn clip(text: &str) -> Clip<'_> {
    Clip(text)
}

/// Display of `clip`: at most `CLIP_BYTES_MAX` bytes of text, plus the length when cut.
#[derive(Clone, Copy, Debug)]
pub struct Clip<'a>(&'a str);

impl std::fmt::Display for Clip<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0;
        let budget = if shown_bytes(text) <= CLIP_BYTES_MAX {
            CLIP_BYTES_MAX
        } else {
            CLIP_PREFIX_BYTES
        };
        let mut shown = 0;
        for c in text.chars() {
            let width = shown_width(c);
            if shown + width > budget {
                return write!(f, "…({} bytes)", text.len());
            }
            shown += width;
            if c.is_control() {
                write!(f, "{}", c.escape_unicode())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// Bytes `c` takes in a message (escaped when it is a control character).
fn shown_width(c: char) -> usize {
    if c.is_control() {
        c.escape_unicode().len()
    } else {
        c.len_utf8()
    }
}

/// Bytes the whole of `text` would take in a message; stops counting past the clip.
fn shown_bytes(text: &str) -> usize {
    let mut total = 0;
    for c in text.chars() {
        total += shown_width(c);
        if total > CLIP_BYTES_MAX {
            break;
        }
    }
    total
}

/// Checks a path against the rules; Err carries the reason.
pub fn validate(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("path must not be empty".into());
    }
    if !path.starts_with('/') {
        return Err("path must start with /".into());
    }
    if path.len() > PATH_BYTES_MAX {
        return Err(format!(
            "path is {} bytes, more than {PATH_BYTES_MAX}",
            path.len()
        ));
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err("path must not end with /".into());
    }
    // Skip the leading '/', then every segment must be a non-empty, non-relative name.
    for segment in path[1..].split('/') {
        validate_segment(segment)?;
    }
    Ok(())
}

/// Checks one segment (a node name) of a path.
fn validate_segment(segment: &str) -> Result<(), String> {
    match segment {
        "" => return Err("empty node name (//)".into()),
        "." | ".." => return Err(format!("relative segment {segment:?} not allowed")),
        _ => {}
    }
    match segment.chars().find(|&c| is_refused_char(c)) {
        Some(c) => Err(format!("character U+{:04X} not allowed", u32::from(c))),
        None => Ok(()),
    }
}

/// The characters ZooKeeper refuses: NUL and controls, the high C1 range, private use
/// up to U+F8FF (surrogates U+D800..U+DFFF are not Rust chars at all), U+FFF0..U+FFFF,
/// and (as surrogate pairs in Java) everything above U+FFFF.
fn is_refused_char(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{e000}'..='\u{f8ff}'
        | '\u{fff0}'..='\u{ffff}')
        || u32::from(c) > 0xffff
}

/// The parent of a valid non-root path ("/a/b" -> "/a", "/a" -> "/"). The root's
/// parent is the root. Never panics.
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        // A '/' is one byte, so `i` is a char boundary.
        Some(i) => &path[..i],
    }
}

/// The last segment of a valid non-root path ("/a/b" -> "b"). Never panics.
pub fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// The path of child `name` under `parent` ("/" + "a" -> "/a", "/a" + "b" -> "/a/b").
pub fn join(parent: &str, name: &str) -> String {
    let mut out = String::with_capacity(parent.len() + 1 + name.len());
    out.push_str(parent);
    if parent != "/" {
        out.push('/');
    }
    out.push_str(name);
    out
}
