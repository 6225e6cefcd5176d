//! Concord through its Rust SDK (`concord::Client`), for the calls an application
//! makes most: so that a change to the SDK's call path lands with its numbers
//! (`--system concord-sdk`; docs/benchmarks.md, "The Rust SDK in one write").
//!
//! One `Client` per bench client, each given one server of the list in turn as the
//! raw driver does, with the SDK's defaults: no deadline, no retries (a failed call
//! is an error in the report). Watches, locks and elections are not driven through
//! the SDK here (`NotYet`): their recipes do more than one call each, and the raw
//! driver measures the server's side of them.

use concord::{Client, CreateOptions, ErrorCode, ReadOptions, Session};

use super::{next_endpoint, BenchError, Driver, EventStream, Result};

/// Requested session TTL for ephemerals.
const SESSION_TTL_MS: i64 = 10_000;

/// One SDK client, and its session once one is needed.
pub struct ConcordSdk {
    client: Client,
    session: Option<Session>,
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Backend {
        system: "concord-sdk",
        message: e.to_string(),
    }
}

fn not_through_the_sdk(what: &str) -> BenchError {
    BenchError::NotYet(format!("{what} through the SDK: use --system concord"))
}

impl Driver for ConcordSdk {
    const NAME: &'static str = "concord-sdk";

    async fn connect(endpoints: &str) -> Result<Self> {
        let client = Client::connect(next_endpoint(endpoints))
            .await
            .map_err(err)?;
        Ok(Self {
            client,
            session: None,
        })
    }

    async fn ensure_parent(&mut self, path: &str) -> Result<()> {
        match self.client.create(path, "", CreateOptions::default()).await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == ErrorCode::NodeExists => Ok(()),
            Err(e) => Err(err(e)),
        }
    }

    async fn create(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let options = CreateOptions::default();
        self.client.create(key, value, options).await.map_err(err)?;
        Ok(())
    }

    async fn write(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.client.set(key, value, -1).await.map_err(err)?;
        Ok(())
    }

    async fn read(&mut self, key: &str, linearizable: bool) -> Result<()> {
        let read = ReadOptions {
            linearizable,
            ..ReadOptions::default()
        };
        self.client.get(key, read).await.map_err(err)?;
        Ok(())
    }

    async fn create_ephemeral_sequential(&mut self, parent: &str, value: &[u8]) -> Result<()> {
        let session_id = match &self.session {
            Some(session) => session.id(),
            None => {
                let opened = self.client.open_session(SESSION_TTL_MS).await;
                self.session.insert(opened.map_err(err)?).id()
            }
        };
        let options = CreateOptions::ephemeral(session_id, true);
        let path = format!("{parent}/e-");
        self.client
            .create(&path, value, options)
            .await
            .map_err(err)?;
        Ok(())
    }

    async fn watch(&mut self, _key: &str) -> Result<EventStream> {
        Err(not_through_the_sdk("watches"))
    }

    async fn with_lock<F>(&mut self, _name: &str, _critical: F) -> Result<()>
    where
        F: std::future::Future<Output = ()> + Send,
    {
        Err(not_through_the_sdk("locks"))
    }

    type Leadership = ();

    async fn campaign(&mut self, _election: &str) -> Result<()> {
        Err(not_through_the_sdk("elections"))
    }

    async fn candidates(&mut self, _election: &str) -> Result<usize> {
        Err(not_through_the_sdk("elections"))
    }

    async fn resign(&mut self, _leadership: ()) -> Result<()> {
        Err(not_through_the_sdk("elections"))
    }

    async fn end_session(self) -> Result<()> {
        match self.session {
            Some(session) => session.close().await.map_err(err),
            None => Ok(()),
        }
    }
}
