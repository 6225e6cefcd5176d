//! Ensembles of real server processes on 127.0.0.1: each member gets its own config
//! file (the same member list everywhere), data folder and log; members are killed,
//! stopped and restarted one by one through their `Server`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use concord_proto::v1 as pb;
use tonic::transport::Channel;

use crate::proxy::Proxies;
use crate::{eventually, free_addr, Server, ServerOptions};

/// How long the helpers below wait for one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The servers of one ensemble; index i is server id i + 1 (voters first, then
/// observers).
pub struct Ensemble {
    pub servers: Vec<Server>,
    /// The proxy on every peer link (`start_proxied` only).
    pub proxies: Option<Proxies>,
    /// What to keep if the test fails (`keep_on_failure`).
    keep: Option<Keep>,
    _configs: tempfile::TempDir,
}

/// What a failing run keeps, and how to run it again.
struct Keep {
    name: String,
    replay: String,
    history: Box<dyn Fn() -> String + Send + Sync>,
}

impl Ensemble {
    /// Starts `size` voters with `options` (the tick, TTLs and extra flags apply to
    /// every member; `{id}` in an extra flag becomes the member's id) and returns
    /// once every one listens.
    pub fn start(size: usize, options: ServerOptions) -> Ensemble {
        Ensemble::start_with_observers(size, 0, options)
    }

    /// `start`, with `observers` observers after the voters.
    pub fn start_with_observers(
        voters: usize,
        observers: usize,
        options: ServerOptions,
    ) -> Ensemble {
        Ensemble::start_inner(voters, observers, options, None, &|_| String::new())
    }

    /// `start`, with `toml(i)` added to the config file of server `i` (keys of the
    /// server's `Config`, such as a per-member `local_identity`).
    pub fn start_with_toml(
        size: usize,
        options: ServerOptions,
        toml: &dyn Fn(usize) -> String,
    ) -> Ensemble {
        Ensemble::start_inner(size, 0, options, None, toml)
    }

    /// `start`, with `toml` (top-level keys and tables, such as `[[teams]]`) added
    /// to every member's config file.
    pub fn start_with_config(size: usize, options: ServerOptions, toml: &str) -> Ensemble {
        Ensemble::start_with_toml(size, options, &|_| toml.to_owned())
    }

    /// `start`, with a proxy on every peer link: server i reaches server j's peer
    /// address through the proxy (i, j) (its member list names the proxy), so a
    /// test can cut one direction of a link (`proxies.cut`).
    pub fn start_proxied(size: usize, options: ServerOptions) -> Ensemble {
        Ensemble::start_inner(size, 0, options, Some(Proxies::new()), &|_| String::new())
    }

    /// `start`, with every `[[members]]` address a host name (`localhost:PORT`), as
    /// a Kubernetes config names pods by DNS name: the servers resolve it each time
    /// they dial, and each binds 127.0.0.1 on its entry's ports.
    pub fn start_named(size: usize, options: ServerOptions) -> Ensemble {
        Ensemble::start_members(size, 0, options, None, &|_| String::new(), true)
    }

    fn start_inner(
        voters: usize,
        observers: usize,
        options: ServerOptions,
        proxies: Option<Proxies>,
        extra_toml: &dyn Fn(usize) -> String,
    ) -> Ensemble {
        Ensemble::start_members(voters, observers, options, proxies, extra_toml, false)
    }

    /// `start_inner`; `named`: members' addresses as `localhost:PORT`.
    fn start_members(
        voters: usize,
        observers: usize,
        options: ServerOptions,
        mut proxies: Option<Proxies>,
        extra_toml: &dyn Fn(usize) -> String,
        named: bool,
    ) -> Ensemble {
        let shown = |a: SocketAddr| {
            if named {
                format!("localhost:{}", a.port())
            } else {
                a.to_string()
            }
        };
        let size = voters + observers;
        let configs = tempfile::tempdir().unwrap();
        let addrs: Vec<(SocketAddr, SocketAddr)> =
            (0..size).map(|_| (free_addr(), free_addr())).collect();
        // The peer address server `viewer` dials for server `j`.
        let mut peer_addr_of = |viewer: usize, j: usize| match proxies.as_mut() {
            Some(proxies) if viewer != j => proxies.add(viewer, j, addrs[j].1),
            _ => addrs[j].1,
        };
        let members: Vec<String> = (0..size)
            .map(|viewer| {
                addrs
                    .iter()
                    .enumerate()
                    .map(|(j, (client, _))| {
                        let role = if j < voters { "voter" } else { "observer" };
                        let peer = shown(peer_addr_of(viewer, j));
                        let client = shown(*client);
                        format!(
                            "[[members]]\nid = {}\nclient_addr = \"{client}\"\npeer_addr = \"{peer}\"\nrole = \"{role}\"\n",
                            j + 1
                        )
                    })
                    .collect()
            })
            .collect();
        let servers = addrs
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                let path = configs.path().join(format!("concord-{}.toml", i + 1));
                // Top-level keys before the first [[members]] table.
                let toml = format!(
                    "server_id = {}\nclient_addr = \"{client}\"\npeer_addr = \"{peer}\"\ncluster_id = 7\n{}\n{}",
                    i + 1,
                    extra_toml(i),
                    members[i]
                );
                std::fs::write(&path, toml).unwrap();
                let mut o = options.clone();
                // `{id}` in a flag stands for the member's id (its own peer
                // certificate, say).
                let id = (i + 1).to_string();
                o.extra = o.extra.iter().map(|a| a.replace("{id}", &id)).collect();
                o.extra
                    .extend(["--config".to_owned(), path.display().to_string()]);
                Server::start_on(o, &client.to_string())
            })
            .collect();
        Ensemble {
            servers,
            proxies,
            keep: None,
            _configs: configs,
        }
    }

    /// If the test fails (panics) while the ensemble lives, its servers are killed
    /// and their logs, data folders and config files are copied, with `history()`,
    /// to a folder named after `name` in the temp folder; the folder and `replay`
    /// (the command that runs the test again) are printed.
    pub fn keep_on_failure(
        &mut self,
        name: &str,
        replay: String,
        history: impl Fn() -> String + Send + Sync + 'static,
    ) {
        self.keep = Some(Keep {
            name: name.to_owned(),
            replay,
            history: Box::new(history),
        });
    }

    /// `Cluster/Status` of server `i`, or None if it is down or does not answer
    /// within a second.
    pub async fn status(&self, i: usize) -> Option<pb::StatusResponse> {
        let server = &self.servers[i];
        if !server.is_running() {
            return None;
        }
        server.try_status().await
    }

    /// Waits until a running server leads an established epoch, and every other
    /// running server in `among` follows it; returns its index.
    pub async fn leader_among(&self, among: &[usize], timeout: Duration) -> usize {
        eventually(
            "an established leader followed by the others",
            timeout,
            || async {
                let mut leader = None;
                for &i in among {
                    let status = self.status(i).await?;
                    if status.leader_serving {
                        leader = Some(i);
                    }
                    if status.leader_id == 0 {
                        return None;
                    }
                }
                let leader = leader?;
                for &i in among {
                    let status = self.status(i).await?;
                    if status.leader_id != leader as u64 + 1 {
                        return None;
                    }
                }
                Some(leader)
            },
        )
        .await
    }

    /// `leader_among` every running server.
    pub async fn leader(&self, timeout: Duration) -> usize {
        self.leader_among(&self.running(), timeout).await
    }

    /// Indexes of the servers whose processes run.
    pub fn running(&self) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|&i| self.servers[i].is_running())
            .collect()
    }

    /// Waits until there is a leader and every server has applied what it had
    /// applied then.
    pub async fn all_caught_up(&self, timeout: Duration) {
        let leader = self.leader(timeout).await;
        let zxid = self.status(leader).await.map_or(0, |s| s.zxid);
        for i in 0..self.servers.len() {
            self.caught_up(i, zxid, timeout).await;
        }
    }

    /// Waits until server `i` has applied at least `zxid`.
    pub async fn caught_up(&self, i: usize, zxid: u64, timeout: Duration) {
        let what = format!("server {} applies zxid {zxid:#x}", i + 1);
        eventually(&what, timeout, || async {
            (self.status(i).await?.zxid >= zxid).then_some(())
        })
        .await;
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        let Some(keep) = self.keep.take() else {
            return;
        };
        if !std::thread::panicking() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("{}-{}", keep.name, std::process::id()));
        let kept = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("history.txt"), (keep.history)())?;
            copy_dir(self._configs.path(), &dir.join("configs"))?;
            for (i, server) in self.servers.iter_mut().enumerate() {
                server.kill9();
                let id = i + 1;
                std::fs::copy(&server.log_path, dir.join(format!("server-{id}.log")))?;
                copy_dir(&server.data_dir, &dir.join(format!("server-{id}-data")))?;
            }
            Ok(())
        })();
        match kept {
            Ok(()) => eprintln!(
                "kept the history, the servers' logs, data folders and configs in {}\nreplay: {}",
                dir.display(),
                keep.replay
            ),
            Err(e) => eprintln!("could not keep the run in {}: {e}", dir.display()),
        }
    }
}

/// Copies the folder `from` (files and folders in it) to `to`.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// A Tree client for `endpoint` that connects on first use and gives up on a call
/// after `timeout` (servers in these tests get killed and stopped).
pub fn tree_at(endpoint: &str, timeout: Duration) -> pb::tree_client::TreeClient<Channel> {
    pb::tree_client::TreeClient::new(channel_at(endpoint, timeout))
}

/// A channel to `endpoint` that connects on first use and gives up on a call after
/// `timeout`.
pub fn channel_at(endpoint: &str, timeout: Duration) -> Channel {
    Channel::from_shared(endpoint.to_owned())
        .unwrap()
        .connect_timeout(Duration::from_millis(500))
        .timeout(timeout)
        .connect_lazy()
}

/// Creates persistent `path` (its data is the path) through `endpoint`; returns
/// the zxid of the write.
pub async fn create_at(endpoint: &str, path: &str) -> Result<u64, tonic::Status> {
    let reply = tree_at(endpoint, CALL_TIMEOUT)
        .create(pb::CreateRequest {
            path: path.into(),
            data: path.to_owned().into(),
            ..Default::default()
        })
        .await?;
    Ok(reply.into_inner().header.unwrap_or_default().zxid)
}

/// Every child name of `path` on one server, read at or after `min_zxid`.
pub async fn children_at(endpoint: &str, path: &str, min_zxid: u64) -> BTreeSet<String> {
    let mut client = tree_at(endpoint, CALL_TIMEOUT);
    let mut names = BTreeSet::new();
    let mut page_token = String::new();
    loop {
        let reply = client
            .children(pb::ChildrenRequest {
                path: path.into(),
                page_token,
                min_zxid,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        names.extend(reply.children.into_iter().map(|c| c.name));
        if reply.next_page_token.is_empty() {
            return names;
        }
        page_token = reply.next_page_token;
    }
}
