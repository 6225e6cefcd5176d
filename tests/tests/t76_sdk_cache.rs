//! The SDK's caches against a real server: a TreeCache equals the server's tree after
//! 1,000 random changes with a kill -9 and restart in between; a cache whose watch
//! cannot be resumed (history purged while it was cut off) rebuilds and its listeners
//! still converge; NodeCache and ChildrenCache events arrive in order, Initialized once.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use concord::{
    CacheEvent, CacheListener, ChildrenCache, ChildrenOptions, Client, ConfigWatcher,
    CreateOptions, Node, NodeCache, ReadOptions, TreeCache, ANY_VERSION,
};
use concord_tests::{config_file, config_flags, eventually, Ensemble, Server, ServerOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(20);

/// A seeded xorshift, so that a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Reads the subtree at `root` node by node, at least at `zxid` (no writes run
/// meanwhile, so the reads are one consistent picture).
async fn read_tree(client: &Client, root: &str, zxid: u64) -> BTreeMap<String, Node> {
    let mut tree = BTreeMap::new();
    let mut todo = vec![root.to_owned()];
    let read = ReadOptions::at_least(zxid);
    while let Some(path) = todo.pop() {
        let got = client.get(&path, read).await.unwrap();
        let options = ChildrenOptions {
            read,
            ..ChildrenOptions::default()
        };
        let children = client.children(&path, &options).await.unwrap();
        for child in children.children {
            todo.push(format!("{}/{}", path.trim_end_matches('/'), child.name));
        }
        tree.insert(
            path.clone(),
            Node {
                path,
                data: got.data,
                stat: got.stat,
            },
        );
    }
    tree
}

fn cached(cache: &TreeCache) -> BTreeMap<String, Node> {
    let (_, nodes) = cache.snapshot();
    nodes.into_iter().map(|n| (n.path.clone(), n)).collect()
}

/// What a listener has seen, applied to a map (as a user would), and how many
/// `Initialized` and `Lagged` it got.
#[derive(Default)]
struct Seen {
    nodes: BTreeMap<String, Node>,
    initialized: usize,
    lagged: usize,
}

fn follow(mut listener: CacheListener) -> (Arc<Mutex<Seen>>, JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    let task = tokio::spawn(async move {
        while let Some(event) = listener.next().await {
            let mut seen = shared.lock().unwrap();
            match event {
                CacheEvent::Created(node) => {
                    assert!(seen.nodes.insert(node.path.clone(), node).is_none());
                }
                CacheEvent::Changed { old, node } => {
                    let before = seen.nodes.insert(node.path.clone(), node);
                    assert_eq!(before.map(|b| b.data), Some(old.data));
                }
                CacheEvent::Deleted(node) => {
                    assert!(seen.nodes.remove(&node.path).is_some());
                }
                CacheEvent::Initialized => seen.initialized += 1,
                CacheEvent::Lagged { .. } => seen.lagged += 1,
            }
        }
    });
    (seen, task)
}

/// `count` random creates, sets and deletes at depths 1 to 4 under `root`, kept in
/// `model` (the existing paths below root); returns the last write's zxid.
async fn random_changes(
    client: &Client,
    rng: &mut Rng,
    root: &str,
    model: &mut BTreeSet<String>,
    count: usize,
) -> u64 {
    let mut zxid = 0;
    for _ in 0..count {
        let existing: Vec<String> = model.iter().cloned().collect();
        let roll = rng.below(10);
        if roll < 4 || existing.is_empty() {
            let parents: Vec<&String> = existing
                .iter()
                .filter(|p| p.matches('/').count() < 4 + root.matches('/').count())
                .collect();
            let parent = match rng.below(parents.len() + 1) {
                0 => root.to_owned(),
                i => parents[i - 1].clone(),
            };
            let path = format!("{parent}/n{}", rng.below(6));
            let data = format!("v{}", rng.below(1000));
            if model.contains(&path) {
                zxid = client.set(&path, data, ANY_VERSION).await.unwrap().zxid;
            } else {
                zxid = client
                    .create(&path, data, CreateOptions::default())
                    .await
                    .unwrap()
                    .zxid;
                model.insert(path);
            }
        } else if roll < 7 {
            let path = &existing[rng.below(existing.len())];
            let data = format!("v{}", rng.below(1000));
            zxid = client.set(path, data, ANY_VERSION).await.unwrap().zxid;
        } else {
            let leaves: Vec<&String> = existing
                .iter()
                .filter(|p| !model.iter().any(|q| q.starts_with(&format!("{p}/"))))
                .collect();
            let path = leaves[rng.below(leaves.len())].clone();
            zxid = client.delete(&path, ANY_VERSION).await.unwrap();
            model.remove(&path);
        }
    }
    zxid
}

/// Waits until the cache reflects `zxid`, then checks it (and what the listener saw)
/// against a full read of the server's subtree.
async fn converged(cache: &TreeCache, seen: &Mutex<Seen>, client: &Client, root: &str, zxid: u64) {
    eventually("the cache reflects the last write", WAIT, || async {
        (cache.zxid() >= zxid).then_some(())
    })
    .await;
    let server = read_tree(client, root, zxid).await;
    assert_eq!(cached(cache), server, "the cache differs from the server");
    // A listener is not told of children bookkeeping (the parent's pzxid, cversion
    // and num_children): it sees each node's data and data version.
    let wanted = data_of(&server);
    eventually("the listener saw every change", WAIT, || async {
        (data_of(&seen.lock().unwrap().nodes) == wanted).then_some(())
    })
    .await;
}

fn data_of(nodes: &BTreeMap<String, Node>) -> Vec<(String, Vec<u8>, u64, u64, i32)> {
    nodes
        .values()
        .map(|n| {
            let s = n.stat;
            (n.path.clone(), n.data.clone(), s.czxid, s.mzxid, s.version)
        })
        .collect()
}

async fn ready(client: &Client) {
    eventually("the server answers", WAIT, || async {
        client.exists("/", ReadOptions::default()).await.ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t76_tree_cache_equals_the_server_after_random_changes_and_a_restart() {
    let mut server = Server::start(ServerOptions::default());
    let client = Client::connect(server.endpoint()).await.unwrap();
    client
        .create("/t", "root", CreateOptions::default())
        .await
        .unwrap();
    let mut model = BTreeSet::new();
    let mut rng = Rng(0x76_cace);
    // Some nodes exist before the cache starts: they come as Created, then Initialized.
    random_changes(&client, &mut rng, "/t", &mut model, 50).await;
    let mut cache = TreeCache::new(&client, "/t");
    let (seen, follower) = follow(cache.listen());
    cache.start().await.unwrap();
    assert!(tokio::time::timeout(WAIT, cache.wait_initialized())
        .await
        .unwrap());

    let zxid = random_changes(&client, &mut rng, "/t", &mut model, 500).await;
    converged(&cache, &seen, &client, "/t", zxid).await;

    server.kill9();
    server.restart();
    ready(&client).await;
    let zxid = random_changes(&client, &mut rng, "/t", &mut model, 500).await;
    converged(&cache, &seen, &client, "/t", zxid).await;

    // The watch resumed across the restart: no rebuild was needed.
    assert!(
        cache.reconnects() >= 1,
        "the restart did not break the watch"
    );
    assert_eq!(cache.rebuilds(), 0, "{:?}", cache.last_error());
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.initialized, 1);
        assert_eq!(seen.lagged, 0);
    }
    assert_eq!(cache.get("/t").map(|n| n.data), Some(b"root".to_vec()));
    cache.close();
    tokio::time::timeout(WAIT, follower).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t76_tree_cache_moves_between_the_servers_of_an_ensemble() {
    let mut ensemble = Ensemble::start(3, ServerOptions::default());
    let leader = ensemble.leader(WAIT).await;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    // The writer talks to the leader; the cache to both followers, so each follower's
    // kill below leaves it one server to move to, and one of the two kills moves it.
    let writer = Client::connect(ensemble.servers[leader].endpoint())
        .await
        .unwrap();
    let cache_endpoints: Vec<String> = followers
        .iter()
        .map(|&i| ensemble.servers[i].endpoint())
        .collect();
    let reader = Client::connect(cache_endpoints.join(",")).await.unwrap();
    writer
        .create("/t", "", CreateOptions::default())
        .await
        .unwrap();
    let mut model = BTreeSet::new();
    let mut rng = Rng(0xe45e_0b1e);
    let mut cache = TreeCache::new(&reader, "/t");
    let (seen, _follower) = follow(cache.listen());
    cache.start().await.unwrap();
    assert!(tokio::time::timeout(WAIT, cache.wait_initialized())
        .await
        .unwrap());
    let mut zxid = random_changes(&writer, &mut rng, "/t", &mut model, 100).await;
    converged(&cache, &seen, &writer, "/t", zxid).await;
    for &down in &followers {
        ensemble.servers[down].kill9();
        zxid = random_changes(&writer, &mut rng, "/t", &mut model, 100).await;
        converged(&cache, &seen, &writer, "/t", zxid).await;
        ensemble.servers[down].restart();
        ensemble.caught_up(down, zxid, WAIT).await;
    }
    assert!(cache.reconnects() >= 1, "the cache never moved");
    assert_eq!(cache.rebuilds(), 0, "{:?}", cache.last_error());
    assert_eq!(seen.lock().unwrap().initialized, 1);
}

/// A TCP forwarder that can be cut: while cut, its connections are dropped and new
/// ones closed at once.
struct Cuttable {
    addr: std::net::SocketAddr,
    cut: Arc<Mutex<bool>>,
    pipes: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Cuttable {
    async fn start(target: std::net::SocketAddr) -> Cuttable {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(Mutex::new(false));
        let pipes = Arc::new(Mutex::new(Vec::new()));
        let (flag, list) = (cut.clone(), pipes.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if *flag.lock().unwrap() {
                    continue;
                }
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                list.lock().unwrap().push(pipe);
            }
        });
        Cuttable {
            addr,
            cut,
            pipes,
            accept,
        }
    }

    fn set_cut(&self, cut: bool) {
        *self.cut.lock().unwrap() = cut;
        if cut {
            for pipe in self.pipes.lock().unwrap().drain(..) {
                pipe.abort();
            }
        }
    }
}

impl Drop for Cuttable {
    fn drop(&mut self) {
        self.accept.abort();
        self.set_cut(true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t76_a_cache_that_cannot_resume_rebuilds_and_listeners_converge() {
    let cfg = config_file("watch_history_txns_max = 5\nsnapshots_keep = 1\n");
    let server = Server::start(ServerOptions {
        snapshot_every_txns: 10,
        extra: config_flags(&cfg),
        ..ServerOptions::default()
    });
    let writer = Client::connect(server.endpoint()).await.unwrap();
    writer
        .create("/t", "", CreateOptions::default())
        .await
        .unwrap();
    let mut model = BTreeSet::new();
    let mut rng = Rng(0x5eed_0076);
    random_changes(&writer, &mut rng, "/t", &mut model, 30).await;

    let proxy = Cuttable::start(server.addr).await;
    let reader = Client::connect(format!("http://{}", proxy.addr))
        .await
        .unwrap();
    let mut cache = TreeCache::new(&reader, "/t");
    let (seen, _follower) = follow(cache.listen());
    cache.start().await.unwrap();
    assert!(tokio::time::timeout(WAIT, cache.wait_initialized())
        .await
        .unwrap());
    let zxid = random_changes(&writer, &mut rng, "/t", &mut model, 30).await;
    converged(&cache, &seen, &writer, "/t", zxid).await;

    // Cut off, the cache misses more changes than the server keeps history for.
    proxy.set_cut(true);
    let missed_from = cache.zxid();
    let zxid = random_changes(&writer, &mut rng, "/t", &mut model, 60).await;
    eventually("the history before the cut is purged", WAIT, || async {
        let status = writer.status().await.ok()?;
        (status.oldest_resumable_zxid > missed_from + 1).then_some(())
    })
    .await;
    proxy.set_cut(false);
    converged(&cache, &seen, &writer, "/t", zxid).await;
    assert!(
        cache.rebuilds() >= 1,
        "the cache resumed instead of rebuilding"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.initialized, 1);
}

/// The next `n` events of `listener`, each within the deadline.
async fn take(listener: &mut CacheListener, n: usize) -> Vec<CacheEvent> {
    let mut events = Vec::new();
    for _ in 0..n {
        let event = tokio::time::timeout(WAIT, listener.next()).await.unwrap();
        events.push(event.expect("the listener ended"));
    }
    events
}

/// A short name for an event, to compare sequences.
fn short(event: &CacheEvent) -> String {
    match event {
        CacheEvent::Created(n) => {
            format!("created {} {}", n.path, String::from_utf8_lossy(&n.data))
        }
        CacheEvent::Changed { old, node } => format!(
            "changed {} {}->{}",
            node.path,
            String::from_utf8_lossy(&old.data),
            String::from_utf8_lossy(&node.data)
        ),
        CacheEvent::Deleted(n) => {
            format!("deleted {} {}", n.path, String::from_utf8_lossy(&n.data))
        }
        CacheEvent::Initialized => "initialized".to_owned(),
        CacheEvent::Lagged { missed } => format!("lagged {missed}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t76_node_cache_events_in_order() {
    let server = Server::start(ServerOptions::default());
    let client = Client::connect(server.endpoint()).await.unwrap();
    let mut cache = NodeCache::new(&client, "/n");
    let mut events = cache.listen();
    cache.start().await.unwrap();
    assert_eq!(short(&take(&mut events, 1).await[0]), "initialized");
    assert!(cache.current().is_none());

    let none = CreateOptions::default();
    client.create("/n", "a", none.clone()).await.unwrap();
    client.set("/n", "b", ANY_VERSION).await.unwrap();
    // A child changes the node's stat, silently.
    let child = client.create("/n/c", "", none.clone()).await.unwrap();
    client.set("/n", "c", ANY_VERSION).await.unwrap();
    client.delete("/n/c", ANY_VERSION).await.unwrap();
    let z = client.delete("/n", ANY_VERSION).await.unwrap();
    client.create("/n", "d", none).await.unwrap();
    let got: Vec<String> = take(&mut events, 5).await.iter().map(short).collect();
    assert_eq!(
        got,
        [
            "created /n a",
            "changed /n a->b",
            "changed /n b->c",
            "deleted /n c",
            "created /n d",
        ]
    );
    assert!(cache.zxid() > z && cache.zxid() > child.zxid);
    let node = cache.current().unwrap();
    let read = client
        .get("/n", ReadOptions::at_least(cache.zxid()))
        .await
        .unwrap();
    assert_eq!((node.data, node.stat), (read.data, read.stat));

    cache.close();
    assert!(tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .is_none());
    assert!(cache.listen().next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t76_children_cache_events_in_order() {
    let server = Server::start(ServerOptions::default());
    let client = Client::connect(server.endpoint()).await.unwrap();
    let none = CreateOptions::default();
    for (path, data) in [
        ("/c", "p"),
        ("/c/a", "1"),
        ("/c/b", "2"),
        ("/c/b/deep", "x"),
    ] {
        client.create(path, data, none.clone()).await.unwrap();
    }
    let mut cache = ChildrenCache::new(&client, "/c");
    let mut events = cache.listen();
    cache.start().await.unwrap();
    let initial: Vec<String> = take(&mut events, 3).await.iter().map(short).collect();
    assert_eq!(initial, ["created /c/a 1", "created /c/b 2", "initialized"]);

    client.create("/c/x", "3", none.clone()).await.unwrap();
    client.create("/c/x/deep", "", none.clone()).await.unwrap();
    client.set("/c/a", "1b", ANY_VERSION).await.unwrap();
    client.set("/c", "p2", ANY_VERSION).await.unwrap();
    client.delete("/c/x/deep", ANY_VERSION).await.unwrap();
    client.delete("/c/x", ANY_VERSION).await.unwrap();
    client.create("/c/end", "", none).await.unwrap();
    let got: Vec<String> = take(&mut events, 4).await.iter().map(short).collect();
    assert_eq!(
        got,
        [
            "created /c/x 3",
            "changed /c/a 1->1b",
            "deleted /c/x 3",
            "created /c/end "
        ]
    );
    let names: Vec<String> = cache.current().into_iter().map(|n| n.path).collect();
    assert_eq!(names, ["/c/a", "/c/b", "/c/end"]);
    assert_eq!(cache.get("/c/a").map(|n| n.data), Some(b"1b".to_vec()));
    assert!(cache.get("/c").is_none());
    // A second listener made now sees later events only.
    let mut late = cache.listen();
    client.delete("/c/end", ANY_VERSION).await.unwrap();
    assert_eq!(short(&take(&mut late, 1).await[0]), "deleted /c/end ");
    assert_eq!(short(&take(&mut events, 1).await[0]), "deleted /c/end ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t76_config_watcher_follows_a_config_node() {
    let server = Server::start(ServerOptions::default());
    let client = Client::connect(server.endpoint()).await.unwrap();
    // The node is absent at start: its value is None.
    let parse = |data: &[u8]| String::from_utf8_lossy(data).parse::<u32>();
    let mut watcher = ConfigWatcher::start_with(&client, "/cfg", parse)
        .await
        .unwrap();
    assert!(tokio::time::timeout(WAIT, watcher.wait_initialized())
        .await
        .unwrap());
    assert!(watcher.current().is_none());
    let mut changes = watcher.listen();

    let created = client
        .create("/cfg", "1", CreateOptions::default())
        .await
        .unwrap();
    let first = tokio::time::timeout(WAIT, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.value, Some(Ok(1)));
    assert_eq!((first.version, first.zxid), (0, created.zxid));
    for n in 2..=5u32 {
        client
            .set("/cfg", n.to_string(), ANY_VERSION)
            .await
            .unwrap();
        let got = tokio::time::timeout(WAIT, changes.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.value, Some(Ok(n)));
        assert_eq!(got.version, n as i32 - 1);
    }
    // A value the closure cannot parse is a value too.
    client.set("/cfg", "oops", ANY_VERSION).await.unwrap();
    let bad = tokio::time::timeout(WAIT, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(bad.value, Some(Err(_))));
    // A slow listener skips to the newest value.
    for n in 10..20u32 {
        client
            .set("/cfg", n.to_string(), ANY_VERSION)
            .await
            .unwrap();
    }
    let newest = eventually("the watcher reaches the last value", WAIT, || async {
        (watcher.current() == Some(Ok(19))).then_some(())
    });
    newest.await;
    let skipped = tokio::time::timeout(WAIT, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(skipped.value, Some(Ok(19)));
    client.delete("/cfg", ANY_VERSION).await.unwrap();
    let gone = tokio::time::timeout(WAIT, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((gone.value, gone.version), (None, -1));

    // A watcher started on an existing node has its value once initialized.
    client
        .create("/cfg", "7", CreateOptions::default())
        .await
        .unwrap();
    let raw = ConfigWatcher::start(&client, "/cfg").await.unwrap();
    assert!(tokio::time::timeout(WAIT, raw.wait_initialized())
        .await
        .unwrap());
    assert_eq!(raw.current(), Some(b"7".to_vec()));
    let again = tokio::time::timeout(WAIT, changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.value, Some(Ok(7)));
    watcher.close();
    assert!(tokio::time::timeout(WAIT, changes.next())
        .await
        .unwrap()
        .is_none());
}
