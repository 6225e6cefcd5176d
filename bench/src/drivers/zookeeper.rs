//! The ZooKeeper driver (feature `zookeeper`), on the `zookeeper-client` crate: one
//! client (one session) per driver. Linearizable reads are `sync` + `getData`, the
//! usual ZooKeeper idiom; locks use the standard ephemeral-sequential recipe in which
//! each waiter watches its predecessor only. It must not retry failed calls.
//!
//! The same driver measures two servers, named apart in reports by its type parameter:
//! ZooKeeper itself (`zookeeper`) and Concord's ZooKeeper-protocol port
//! (`concord-zookeeper`), so that only the server differs between the two.

use std::marker::PhantomData;

use futures::StreamExt;
use zookeeper_client as zk;

use super::{BenchError, Driver, EventStream, Result};

/// The server a ZooKeeper client talks to; only its name in reports differs.
pub trait Server: Send + Sync + 'static {
    /// The system's name in reports and errors.
    const NAME: &'static str;
}

/// ZooKeeper itself.
pub struct Apache;

impl Server for Apache {
    const NAME: &'static str = "zookeeper";
}

/// Concord's ZooKeeper-protocol port (`concord --zookeeper-addr`).
pub struct ConcordPort;

impl Server for ConcordPort {
    const NAME: &'static str = "concord-zookeeper";
}

/// One ZooKeeper client of the server `S`.
pub struct ZooKeeper<S: Server = Apache> {
    /// The client and its session.
    client: zk::Client,
    /// Which server, for the name.
    server: PhantomData<S>,
}

/// The ZooKeeper driver against Concord's ZooKeeper port.
pub type ConcordZooKeeper = ZooKeeper<ConcordPort>;

fn err<S: Server>(e: impl std::fmt::Display) -> BenchError {
    BenchError::Backend {
        system: S::NAME,
        message: e.to_string(),
    }
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

impl<S: Server> Driver for ZooKeeper<S> {
    const NAME: &'static str = S::NAME;

    async fn connect(endpoints: &str) -> Result<Self> {
        let client = zk::Client::connect(endpoints).await.map_err(err::<S>)?;
        Ok(Self {
            client,
            server: PhantomData,
        })
    }

    async fn ensure_parent(&mut self, path: &str) -> Result<()> {
        match self.client.create(path, &[], &persistent()).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(err::<S>(e)),
        }
    }

    async fn create(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.client
            .create(key, value, &persistent())
            .await
            .map_err(err::<S>)?;
        Ok(())
    }

    async fn write(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.client
            .set_data(key, value, None)
            .await
            .map_err(err::<S>)?;
        Ok(())
    }

    async fn read(&mut self, key: &str, linearizable: bool) -> Result<()> {
        if linearizable {
            self.client.sync(key).await.map_err(err::<S>)?;
        }
        self.client.get_data(key).await.map_err(err::<S>)?;
        Ok(())
    }

    async fn create_ephemeral_sequential(&mut self, parent: &str, value: &[u8]) -> Result<()> {
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        self.client
            .create(&format!("{parent}/e-"), value, &options)
            .await
            .map_err(err::<S>)?;
        Ok(())
    }

    async fn watch(&mut self, key: &str) -> Result<EventStream> {
        let watcher = self
            .client
            .watch(key, zk::AddWatchMode::Persistent)
            .await
            .map_err(err::<S>)?;
        let events = futures::stream::unfold(watcher, |mut watcher| async move {
            let event = watcher.changed().await;
            Some((event.event_type, watcher))
        })
        .filter_map(|kind| async move {
            match kind {
                zk::EventType::NodeDataChanged => Some(Ok(())),
                zk::EventType::Session => Some(Err(err::<S>("session event on a watch"))),
                _ => None,
            }
        });
        Ok(events.boxed())
    }

    async fn with_lock<F>(&mut self, name: &str, critical: F) -> Result<()>
    where
        F: std::future::Future<Output = ()> + Send,
    {
        let prefix = format!("{name}/lock-");
        let lock_prefix = zk::LockPrefix::new_shared(&prefix).map_err(err::<S>)?;
        let lock = self
            .client
            .lock(lock_prefix, &[], zk::Acls::anyone_all())
            .await
            .map_err(err::<S>)?;
        critical.await;
        let path = lock.lock_path().to_owned();
        // Release in the foreground so hand-off latency includes the delete; the guard's
        // own drop would only repeat the delete in the background.
        std::mem::forget(lock);
        self.client.delete(&path, None).await.map_err(err::<S>)?;
        Ok(())
    }

    /// The candidate's ephemeral-sequential node.
    type Leadership = String;

    async fn campaign(&mut self, election: &str) -> Result<Self::Leadership> {
        // Curator's LeaderLatch recipe: an ephemeral-sequential `latch-` node under the
        // election's folder, each candidate watching its predecessor; the lowest leads.
        let dir = format!("/{election}");
        self.ensure_parent(&dir).await?;
        let prefix = zk::LockPrefix::new_curator(&dir, "latch-").map_err(err::<S>)?;
        let latch = self
            .client
            .lock(prefix, &[], zk::Acls::anyone_all())
            .await
            .map_err(err::<S>)?;
        let path = latch.lock_path().to_owned();
        // The node stays until `resign` or `end_session`; the guard would delete it.
        std::mem::forget(latch);
        Ok(path)
    }

    async fn candidates(&mut self, election: &str) -> Result<usize> {
        let children = self
            .client
            .list_children(&format!("/{election}"))
            .await
            .map_err(err::<S>)?;
        Ok(children.len())
    }

    async fn resign(&mut self, path: Self::Leadership) -> Result<()> {
        self.client.delete(&path, None).await.map_err(err::<S>)
    }

    async fn end_session(self) -> Result<()> {
        // Dropping the last handle of a client sends closeSession; the client gives no
        // acknowledgement to wait for.
        drop(self.client);
        Ok(())
    }
}
