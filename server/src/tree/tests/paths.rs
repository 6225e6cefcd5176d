//! Path rules and helpers.

use super::super::path::{
    clip, join, name, parent, validate, CLIP_BYTES_MAX, CLIP_PREFIX_BYTES, PATH_BYTES_MAX,
};

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

#[test]
fn clip_keeps_short_text_and_cuts_long_text_to_a_prefix_and_its_length() {
    assert_eq!(clip("/a/b").to_string(), "/a/b");
    let fits = format!("/{}", "a".repeat(CLIP_BYTES_MAX - 1));
    assert_eq!(clip(&fits).to_string(), fits);
    let long = format!("/{}", "a".repeat(PATH_BYTES_MAX - 1));
    let shown = clip(&long).to_string();
    assert_eq!(
        shown,
        format!("/{}…(4096 bytes)", "a".repeat(CLIP_PREFIX_BYTES - 1))
    );
    assert!(shown.len() <= CLIP_BYTES_MAX);
    // 64 KiB of anything, multi-byte or control characters, stays within the bound,
    // cut on a character boundary.
    for unit in ["é", "中", "\0", "\u{85}", "a\u{1}"] {
        let text = format!("/{}", unit.repeat(65536 / unit.len()));
        let shown = clip(&text).to_string();
        assert!(shown.len() <= CLIP_BYTES_MAX, "{unit:?}: {}", shown.len());
        assert!(
            shown.ends_with(&format!("…({} bytes)", text.len())),
            "{shown}"
        );
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }
    assert_eq!(clip("/a\0b").to_string(), "/a\\u{0}b");
    assert_eq!(clip("").to_string(), "");
}
