//! A TCP proxy per peer link, to fault one direction of a link between two servers
//! while the other keeps flowing. Each server sends its messages to a peer on the
//! connection it dialled, so the faults of the link (i → j) act on the bytes server
//! i sends through the proxy (i, j):
//!
//! ```text
//!   server i ──dials──▶ proxy (i → j) ──▶ server j's peer address
//!     cut:   i's bytes are read and dropped (the connection stays open, as with a
//!            one-way partition, a blackhole when both directions are cut);
//!     delay: i's bytes reach j that much later, in order;
//!     sever: every open connection through the proxy is closed at once (both
//!            sides see it end; i dials again);
//!     j's bytes back to i pass untouched.
//! ```
//!
//! Every proxy of an ensemble runs on one runtime of its own (the test's runtime
//! may be blocked while servers start); it stops when the `Proxies` are dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Chunks read but not yet written by a delaying link, at most (64 KiB each), so a
/// delayed link holds at most 16 MiB before the sender waits.
const DELAYED_CHUNKS_MAX: usize = 256;

/// The proxies of one ensemble, by (dialling server index, target server index).
pub struct Proxies {
    links: HashMap<(usize, usize), Proxy>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// One link's proxy.
struct Proxy {
    addr: SocketAddr,
    faults: Arc<Faults>,
    /// Bumped to close every open connection through the proxy.
    severed: watch::Sender<u64>,
}

/// What is done to the bytes the dialling side sends.
#[derive(Default)]
struct Faults {
    cut: AtomicBool,
    delay_ms: AtomicU64,
}

impl Proxies {
    pub(crate) fn new() -> Proxies {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        Proxies {
            links: HashMap::new(),
            runtime: Some(runtime),
        }
    }

    /// Starts the proxy that server `from` dials to reach server `to` at `target`;
    /// returns its address.
    pub(crate) fn add(&mut self, from: usize, to: usize, target: SocketAddr) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let faults = Arc::new(Faults::default());
        let (severed, _) = watch::channel(0);
        let runtime = self.runtime.as_ref().unwrap();
        let (link, sever) = (faults.clone(), severed.clone());
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            while let Ok((inbound, _)) = listener.accept().await {
                let severed = sever.subscribe();
                tokio::spawn(pipe(inbound, target, link.clone(), severed));
            }
        });
        let proxy = Proxy {
            addr,
            faults,
            severed,
        };
        self.links.insert((from, to), proxy);
        addr
    }

    /// Drops (`true`) or passes again (`false`) every byte server `from` sends on
    /// its link to server `to`; what `to` sends back on that link still arrives.
    pub fn cut(&self, from: usize, to: usize, cut: bool) {
        self.links[&(from, to)]
            .faults
            .cut
            .store(cut, Ordering::SeqCst);
    }

    /// Delays every byte server `from` sends on its link to server `to` by `delay`
    /// (zero: none), from the next byte read on.
    pub fn delay(&self, from: usize, to: usize, delay: Duration) {
        let ms = delay.as_millis() as u64;
        self.links[&(from, to)]
            .faults
            .delay_ms
            .store(ms, Ordering::SeqCst);
    }

    /// Closes every connection open now on server `from`'s link to server `to`.
    pub fn sever(&self, from: usize, to: usize) {
        self.links[&(from, to)].severed.send_modify(|n| *n += 1);
    }

    /// Heals every link: nothing cut, nothing delayed.
    pub fn heal_all(&self) {
        for proxy in self.links.values() {
            proxy.faults.cut.store(false, Ordering::SeqCst);
            proxy.faults.delay_ms.store(0, Ordering::SeqCst);
        }
    }

    /// The address server `from` dials for server `to`.
    pub fn addr(&self, from: usize, to: usize) -> SocketAddr {
        self.links[&(from, to)].addr
    }
}

impl Drop for Proxies {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Copies one connection both ways until either side closes or the link is
/// severed, doing to the dialling side's bytes what `faults` says.
async fn pipe(
    inbound: TcpStream,
    target: SocketAddr,
    faults: Arc<Faults>,
    mut severed: watch::Receiver<u64>,
) {
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut from_reader, mut from_writer) = inbound.into_split();
    let (mut to_reader, mut to_writer) = outbound.into_split();
    // Read chunks, each with the time it may be written, in order.
    let (chunks, mut delayed) = mpsc::channel::<(Instant, Vec<u8>)>(DELAYED_CHUNKS_MAX);
    // Owns the sender, so the writer ends once the reader has.
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_reader.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if faults.cut.load(Ordering::SeqCst) {
                continue;
            }
            let delay = Duration::from_millis(faults.delay_ms.load(Ordering::SeqCst));
            if chunks
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .await
                .is_err()
            {
                return;
            }
        }
    };
    let write = async {
        while let Some((due, chunk)) = delayed.recv().await {
            tokio::time::sleep_until(due).await;
            if to_writer.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let up = async { tokio::join!(read, write) };
    let down = tokio::io::copy(&mut to_reader, &mut from_writer);
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = severed.changed() => {}
    }
}
