//! Knobs that long test runs read from the environment (test builds only).

/// The number in environment variable `name`, or `default` if it is unset or not a
/// number.
pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A loopback address that is free now and that no other call in this process has
/// handed out, for a listener a test starts later (a replica's client or peer port).
///
/// Drawn below the kernel's ephemeral range (32768 and up on Linux), from which every
/// `bind(":0")` and every outgoing connection takes its port: a port from `bind(":0")`
/// once became an outgoing connection's before the replica it was meant for started
/// ("Address already in use"). Calls walk the range in turn from a random start, as
/// concord-tests' `free_ports` does for server processes.
pub(crate) fn free_addr() -> std::net::SocketAddr {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    // Below concord-tests' range (20000..32000), so a run of both never meets.
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 10_000;
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let draw = RandomState::new().hash_one(std::process::id());
        AtomicU32::new((draw % u64::from(COUNT)) as u32)
    });
    for _ in 0..COUNT {
        let port = (FIRST + next.fetch_add(1, Ordering::Relaxed) % COUNT) as u16;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        if std::net::TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT);
}
