//! Path rules and helpers.

use super::super::path::{join, name, parent, validate, PATH_BYTES_MAX};

#[test]
fn valid_paths_pass() {
    for p in [
        "/",
        "/a",
        "/a/b/c",
        "/a.b",
        "/...",
        "/.a",
        "/a..",
        "/zookeeper",
        "/name with spaces",
        "/é/ü/中文",
        "/x-y_z:0",
    ] {
        assert_eq!(validate(p), Ok(()), "{p}");
    }
    let longest = format!("/{}", "a".repeat(PATH_BYTES_MAX - 1));
    assert_eq!(validate(&longest), Ok(()));
}

#[test]
fn invalid_paths_fail_with_reason() {
    let too_long = format!("/{}", "a".repeat(PATH_BYTES_MAX));
    let cases = [
        "",
        "a",
        "a/b",
        "//",
        "/a/",
        "/a//b",
        "/.",
        "/..",
        "/a/./b",
        "/a/../b",
        "/a/.",
        "/a\0b",
        "/a\u{1}",
        "/a\u{1f}",
        "/a\u{7f}",
        "/a\u{85}",
        "/a\u{9f}",
        "/a\u{e000}",
        "/a\u{f8ff}",
        "/a\u{fff0}",
        "/a\u{ffff}",
        "/a\u{1f600}",
        too_long.as_str(),
    ];
    for p in cases {
        let reason = validate(p).expect_err(p);
        assert!(!reason.is_empty(), "{p:?}");
    }
    // Boundaries next to refused ranges are fine.
    for p in [
        "/a\u{20}",
        "/a\u{a0}",
        "/a\u{d7ff}",
        "/a\u{f900}",
        "/a\u{ffef}",
    ] {
        assert_eq!(validate(p), Ok(()), "{p:?}");
    }
}

#[test]
fn helpers_split_and_join() {
    assert_eq!(parent("/a/b"), "/a");
    assert_eq!(parent("/a"), "/");
    assert_eq!(parent("/"), "/");
    assert_eq!(name("/a/b"), "b");
    assert_eq!(name("/a"), "a");
    assert_eq!(join("/", "a"), "/a");
    assert_eq!(join("/a", "b"), "/a/b");
    // Garbage does not panic.
    assert_eq!(parent("abc"), "/");
    assert_eq!(name("abc"), "abc");
    assert_eq!(name(""), "");
}
