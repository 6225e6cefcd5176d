//! The ZooKeeper driver (feature `zookeeper`), on the `zookeeper-client` crate: one
//! client (one session) per driver. Linearizable reads are `sync` + `getData`, the
//! usual ZooKeeper idiom; locks use the standard ephemeral-sequential recipe in which
//! each waiter watches its predecessor only. It must not retry failed calls.

use futures::StreamExt;
use zookeeper_client as zk;

use super::{BenchError, Driver, EventStream, Result};

/// One ZooKeeper client.
pub struct ZooKeeper {
    /// The client and its session.
    client: zk::Client,
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Backend {
        system: "zookeeper",
        message: e.to_string(),
    }
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

impl Driver for ZooKeeper {
    const NAME: &'static str = "zookeeper";

    async fn connect(endpoints: &str) -> Result<Self> {
        let client = zk::Client::connect(endpoints).await.map_err(err)?;
        Ok(Self { client })
    }

    async fn ensure_parent(&mut self, path: &str) -> Result<()> {
        match self.client.create(path, &[], &persistent()).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(err(e)),
        }
    }

    async fn create(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.client
            .create(key, value, &persistent())
            .await
            .map_err(err)?;
        Ok(())
    }

    async fn write(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.client.set_data(key, value, None).await.map_err(err)?;
        Ok(())
    }

    async fn read(&mut self, key: &str, linearizable: bool) -> Result<()> {
        if linearizable {
            self.client.sync(key).await.map_err(err)?;
        }
        self.client.get_data(key).await.map_err(err)?;
        Ok(())
    }

    async fn create_ephemeral_sequential(&mut self, parent: &str, value: &[u8]) -> Result<()> {
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        self.client
            .create(&format!("{parent}/e-"), value, &options)
            .await
            .map_err(err)?;
        Ok(())
    }

    async fn watch(&mut self, key: &str) -> Result<EventStream> {
        let watcher = self
            .client
            .watch(key, zk::AddWatchMode::Persistent)
            .await
            .map_err(err)?;
        let events = futures::stream::unfold(watcher, |mut watcher| async move {
            let event = watcher.changed().await;
            Some((event.event_type, watcher))
        })
        .filter_map(|kind| async move {
            match kind {
                zk::EventType::NodeDataChanged => Some(Ok(())),
                zk::EventType::Session => Some(Err(err("session event on a watch"))),
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
        let lock_prefix = zk::LockPrefix::new_shared(&prefix).map_err(err)?;
        let lock = self
            .client
            .lock(lock_prefix, &[], zk::Acls::anyone_all())
            .await
            .map_err(err)?;
        critical.await;
        let path = lock.lock_path().to_owned();
        // Release in the foreground so hand-off latency includes the delete; the guard's
        // own drop would only repeat the delete in the background.
        std::mem::forget(lock);
        self.client.delete(&path, None).await.map_err(err)?;
        Ok(())
    }

    /// The candidate's ephemeral-sequential node.
    type Leadership = String;

    async fn campaign(&mut self, election: &str) -> Result<Self::Leadership> {
        // Curator's LeaderLatch recipe: an ephemeral-sequential `latch-` node under the
        // election's folder, each candidate watching its predecessor; the lowest leads.
        let dir = format!("/{election}");
        self.ensure_parent(&dir).await?;
        let prefix = zk::LockPrefix::new_curator(&dir, "latch-").map_err(err)?;
        let latch = self
            .client
            .lock(prefix, &[], zk::Acls::anyone_all())
            .await
            .map_err(err)?;
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
            .map_err(err)?;
        Ok(children.len())
    }

    async fn resign(&mut self, path: Self::Leadership) -> Result<()> {
        self.client.delete(&path, None).await.map_err(err)
    }

    async fn end_session(self) -> Result<()> {
        // Dropping the last handle of a client sends closeSession; the client gives no
        // acknowledgement to wait for.
        drop(self.client);
        Ok(())
    }
}
