//! A TCP proxy per peer link, to cut one direction of a link between two servers
//! while the other keeps flowing: bytes from the dialling server to its target are
//! dropped (the connection stays open, as with a one-way partition), bytes back
//! still pass.
//!
//! ```text
//!   server i ──dials──▶ proxy (i → j) ──▶ server j's peer address
//!                       cut: i's bytes are read and dropped; j's still reach i
//! ```
//!
//! Every proxy of an ensemble runs on one runtime of its own (the test's runtime
//! may be blocked while servers start); it stops when the `Proxies` are dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxies of one ensemble, by (dialling server index, target server index).
pub struct Proxies {
    links: HashMap<(usize, usize), Proxy>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// One link's proxy.
struct Proxy {
    addr: SocketAddr,
    /// Set: bytes from the dialling side are dropped.
    cut: Arc<AtomicBool>,
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
        let cut = Arc::new(AtomicBool::new(false));
        let runtime = self.runtime.as_ref().unwrap();
        let flag = cut.clone();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(pipe(inbound, target, flag.clone()));
            }
        });
        self.links.insert((from, to), Proxy { addr, cut });
        addr
    }

    /// Drops (`true`) or passes again (`false`) every byte server `from` sends on
    /// its link to server `to`; what `to` sends back on that link still arrives.
    pub fn cut(&self, from: usize, to: usize, cut: bool) {
        let proxy = &self.links[&(from, to)];
        proxy.cut.store(cut, Ordering::SeqCst);
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

/// Copies one connection both ways until either side closes.
async fn pipe(inbound: TcpStream, target: SocketAddr, cut: Arc<AtomicBool>) {
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut from_reader, mut from_writer) = inbound.into_split();
    let (mut to_reader, mut to_writer) = outbound.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_reader.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if cut.load(Ordering::SeqCst) {
                continue;
            }
            if to_writer.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = tokio::io::copy(&mut to_reader, &mut from_writer);
    tokio::select! {
        () = up => {}
        _ = down => {}
    }
}
