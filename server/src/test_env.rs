//! Knobs that long test runs read from the environment (test builds only).

/// The number in environment variable `name`, or `default` if it is unset or not a
/// number.
pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
