//! The etcd driver (feature `etcd`), on the `etcd-client` crate: one gRPC client per
//! driver. The default (sequential) read is a serializable get, the linearizable read
//! is etcd's default get. Ephemeral-sequential nodes are puts under a unique key with
//! this client's lease; locks use etcd's Lock RPC with the same lease. It must not
//! retry failed calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client as etcd;
use futures::StreamExt;
use tokio::task::JoinHandle;

use super::{BenchError, Driver, EventStream, Result};

/// Lease TTL for ephemerals and locks, in seconds.
const LEASE_TTL_S: i64 = 10;

/// Distinguishes the drivers of one process in generated keys.
static DRIVER_SEQ: AtomicU64 = AtomicU64::new(0);

/// One etcd client.
pub struct Etcd {
    /// The client (cheap to clone: one shared channel).
    client: etcd::Client,
    /// This driver's number, for unique keys.
    id: u64,
    /// Keys made by `create_ephemeral_sequential` so far.
    created: u64,
    /// The lease, once granted, and its keep-alive task.
    lease: Option<(i64, JoinHandle<()>)>,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some((_, keepalive)) = &self.lease {
            keepalive.abort();
        }
    }
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Backend {
        system: "etcd",
        message: e.to_string(),
    }
}

impl Etcd {
    async fn lease_id(&mut self) -> Result<i64> {
        if let Some((id, _)) = &self.lease {
            return Ok(*id);
        }
        let id = self
            .client
            .lease_grant(LEASE_TTL_S, None)
            .await
            .map_err(err)?
            .id();
        let (mut keeper, mut replies) = self.client.lease_keep_alive(id).await.map_err(err)?;
        let period = Duration::from_secs(u64::try_from(LEASE_TTL_S / 3).unwrap_or(1));
        let keepalive = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                if keeper.keep_alive().await.is_err() {
                    return;
                }
                if !matches!(replies.message().await, Ok(Some(_))) {
                    return;
                }
            }
        });
        self.lease = Some((id, keepalive));
        Ok(id)
    }
}

impl Driver for Etcd {
    const NAME: &'static str = "etcd";

    async fn connect(endpoints: &str) -> Result<Self> {
        let endpoints: Vec<&str> = endpoints.split(',').collect();
        let client = etcd::Client::connect(endpoints, None).await.map_err(err)?;
        Ok(Self {
            client,
            id: DRIVER_SEQ.fetch_add(1, Ordering::Relaxed),
            created: 0,
            lease: None,
        })
    }

    async fn ensure_parent(&mut self, _path: &str) -> Result<()> {
        Ok(())
    }

    async fn create(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.write(key, value).await
    }

    async fn write(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.client.put(key, value, None).await.map_err(err)?;
        Ok(())
    }

    async fn read(&mut self, key: &str, linearizable: bool) -> Result<()> {
        let options = (!linearizable).then(|| etcd::GetOptions::new().with_serializable());
        let got = self.client.get(key, options).await.map_err(err)?;
        if got.kvs().is_empty() {
            return Err(err(format!("{key} not found")));
        }
        Ok(())
    }

    async fn create_ephemeral_sequential(&mut self, parent: &str, value: &[u8]) -> Result<()> {
        let lease = self.lease_id().await?;
        self.created += 1;
        let key = format!("{parent}/e-{}-{:010}", self.id, self.created);
        let options = etcd::PutOptions::new().with_lease(lease);
        self.client
            .put(key, value, Some(options))
            .await
            .map_err(err)?;
        Ok(())
    }

    async fn watch(&mut self, key: &str) -> Result<EventStream> {
        let mut stream = self.client.watch(key, None).await.map_err(err)?;
        // Registered once etcd answers `created`.
        loop {
            match stream.message().await.map_err(err)? {
                Some(r) if r.created() => break,
                Some(_) => continue,
                None => return Err(err("watch stream ended before it was created")),
            }
        }
        let events = stream.filter_map(|reply| async move {
            match reply {
                Ok(r) if !r.events().is_empty() => Some(Ok(())),
                Ok(_) => None,
                Err(e) => Some(Err(err(e))),
            }
        });
        Ok(events.boxed())
    }

    async fn with_lock<F>(&mut self, name: &str, critical: F) -> Result<()>
    where
        F: std::future::Future<Output = ()> + Send,
    {
        let lease = self.lease_id().await?;
        let options = etcd::LockOptions::new().with_lease(lease);
        let held = self.client.lock(name, Some(options)).await.map_err(err)?;
        critical.await;
        self.client.unlock(held.key()).await.map_err(err)?;
        Ok(())
    }

    /// etcd's leader key (name, key, revision, lease).
    type Leadership = etcd::LeaderKey;

    async fn campaign(&mut self, election: &str) -> Result<Self::Leadership> {
        let lease = self.lease_id().await?;
        let won = self
            .client
            .campaign(election, Vec::new(), lease)
            .await
            .map_err(err)?;
        won.leader()
            .cloned()
            .ok_or_else(|| err("Campaign answered without a leader key"))
    }

    async fn candidates(&mut self, election: &str) -> Result<usize> {
        // etcd's election keeps one key per candidate under `name/`.
        let options = etcd::GetOptions::new().with_prefix().with_count_only();
        let got = self
            .client
            .get(format!("{election}/"), Some(options))
            .await
            .map_err(err)?;
        usize::try_from(got.count()).map_err(err)
    }

    async fn resign(&mut self, leader: Self::Leadership) -> Result<()> {
        let options = etcd::ResignOptions::new().with_leader(leader);
        self.client.resign(Some(options)).await.map_err(err)?;
        Ok(())
    }

    async fn end_session(mut self) -> Result<()> {
        let Some((lease, keepalive)) = self.lease.take() else {
            return Ok(());
        };
        keepalive.abort();
        self.client.lease_revoke(lease).await.map_err(err)?;
        Ok(())
    }
}
