//! Path rules (ZooKeeper's) and path helpers. Stub: the tree helper fills this in.

/// Checks a path against the rules; Err carries the reason.
pub fn validate(path: &str) -> Result<(), String> {
    let _ = path;
    todo!("tree helper")
}

/// The parent of a valid non-root path ("/a/b" -> "/a", "/a" -> "/").
pub fn parent(path: &str) -> &str {
    let _ = path;
    todo!("tree helper")
}

/// The last segment of a valid non-root path ("/a/b" -> "b").
pub fn name(path: &str) -> &str {
    let _ = path;
    todo!("tree helper")
}
