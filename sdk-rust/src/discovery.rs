//! [`ServiceDiscovery`]: the live instances of a named service, read from the
//! ephemeral nodes that registrations write, on a [`ChildrenCache`].
//!
//! ```text
//!  /services/NAME/INSTANCE_ID   (ephemeral, owned by the instance's session)
//!        data: the instance's address as UTF-8, e.g. "10.0.0.7:8080"
//!
//!  ChildrenCache("/services/NAME") ─▶ ServiceDiscovery ─▶ instances(), random_instance(),
//!                                         │                round_robin_instance()
//!                                         └─▶ ServiceListener::next() → ServiceEvent
//! ```
//!
//! The layout is shared with the registration recipe (`registration.rs`): one node per
//! instance, named by the instance id (one path segment), whose data is the address and
//! nothing else (no JSON: a client in any language reads it as a string; leading and
//! trailing whitespace is ignored). An instance is up while its node exists: when its
//! session is closed or expires, the server deletes the node and discovery sees it go.
//! Discovery itself needs no session and never writes. What it must not do: poll, or
//! read anything but the service's directory.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};

use concord_proto::v1::ErrorCode;

use crate::cache::{CacheEvent, CacheListener, ChildrenCache};
use crate::client::Client;
use crate::error::Error;
use crate::types::Node;

/// The folder under which every service has its directory.
pub const SERVICES_ROOT: &str = "/services";

/// The directory of a service's instances: `/services/NAME`.
pub fn service_path(name: &str) -> String {
    format!("{SERVICES_ROOT}/{name}")
}

/// The node of one instance: `/services/NAME/INSTANCE_ID`.
pub fn instance_path(name: &str, instance_id: &str) -> String {
    format!("{SERVICES_ROOT}/{name}/{instance_id}")
}

/// One registered instance of a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInstance {
    /// The instance id: the node's name.
    pub id: String,
    /// The address the instance registered (its node's data as UTF-8, trimmed).
    pub address: String,
    /// The session that owns the registration (0 for a persistent node).
    pub session_id: u64,
    /// The instance's node, as cached.
    pub node: Node,
}

impl ServiceInstance {
    /// The instance a node of a service's directory describes.
    pub fn from_node(node: &Node) -> ServiceInstance {
        let id = node.path.rsplit('/').next().unwrap_or_default().to_owned();
        ServiceInstance {
            id,
            address: String::from_utf8_lossy(&node.data).trim().to_owned(),
            session_id: node.stat.ephemeral_owner,
            node: node.clone(),
        }
    }
}

/// A change to a service's instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceEvent {
    /// An instance appeared (or was there when discovery started).
    Registered(ServiceInstance),
    /// An instance's address changed.
    Updated(ServiceInstance),
    /// An instance went away (unregistered, or its session closed or expired).
    Unregistered(ServiceInstance),
    /// The instances present at start have all been reported: sent once.
    Initialized,
    /// This listener fell behind and missed `missed` events; read
    /// [`ServiceDiscovery::instances`] again.
    Lagged {
        /// How many events this listener missed.
        missed: u64,
    },
}

/// A stream of a service's changes, in order. Made by [`ServiceDiscovery::listen`].
#[derive(Debug)]
pub struct ServiceListener {
    events: CacheListener,
}

impl ServiceListener {
    /// The next change; `None` once discovery is closed. Bounded like a
    /// [`CacheListener`]: a listener that falls behind gets `Lagged`.
    pub async fn next(&mut self) -> Option<ServiceEvent> {
        let event = self.events.next().await?;
        Some(match event {
            CacheEvent::Created(node) => {
                ServiceEvent::Registered(ServiceInstance::from_node(&node))
            }
            CacheEvent::Changed { node, .. } => {
                ServiceEvent::Updated(ServiceInstance::from_node(&node))
            }
            CacheEvent::Deleted(node) => {
                ServiceEvent::Unregistered(ServiceInstance::from_node(&node))
            }
            CacheEvent::Initialized => ServiceEvent::Initialized,
            CacheEvent::Lagged { missed } => ServiceEvent::Lagged { missed },
        })
    }
}

/// The instances of one service, kept current (Curator's ServiceDiscovery with a
/// ServiceCache, reading the layout above).
///
/// ```no_run
/// # async fn demo(client: &concord::Client) -> Result<(), concord::Error> {
/// let mut discovery = concord::ServiceDiscovery::new(client, "billing");
/// discovery.start().await?;
/// discovery.wait_initialized().await;
/// if let Some(instance) = discovery.round_robin_instance() {
///     println!("call {} at {}", instance.id, instance.address);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ServiceDiscovery {
    name: String,
    cache: ChildrenCache,
    /// The next index for round robin.
    turn: AtomicUsize,
}

impl ServiceDiscovery {
    /// Discovery of the service `name` (one path segment), not started yet.
    pub fn new(client: &Client, name: impl Into<String>) -> ServiceDiscovery {
        let name = name.into();
        ServiceDiscovery {
            cache: ChildrenCache::new(client, service_path(&name)),
            name,
            turn: AtomicUsize::new(0),
        }
    }

    /// Starts watching the service's directory (it need not exist yet). Fails with
    /// BAD_ARGUMENTS for a name that is not one path segment, or as
    /// [`ChildrenCache::start`] does.
    pub async fn start(&mut self) -> Result<(), Error> {
        if self.name.is_empty() || self.name.contains('/') {
            return Err(Error::client(
                ErrorCode::BadArguments,
                format!("a service name is one path segment, not {:?}", self.name),
            ));
        }
        self.cache.start().await
    }

    /// The service's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The instances registered now, by id.
    pub fn instances(&self) -> Vec<ServiceInstance> {
        self.cache
            .current()
            .iter()
            .map(ServiceInstance::from_node)
            .collect()
    }

    /// The instance with this id, if registered.
    pub fn instance(&self, id: &str) -> Option<ServiceInstance> {
        self.cache
            .get(&instance_path(&self.name, id))
            .map(|node| ServiceInstance::from_node(&node))
    }

    /// One instance drawn at random; `None` when there is none.
    pub fn random_instance(&self) -> Option<ServiceInstance> {
        let mut instances = self.instances();
        if instances.is_empty() {
            return None;
        }
        let draw = RandomState::new().hash_one(self.cache.zxid()) as usize % instances.len();
        Some(instances.swap_remove(draw))
    }

    /// The instances in turn (in id order, one further each call); `None` when there
    /// is none.
    pub fn round_robin_instance(&self) -> Option<ServiceInstance> {
        let mut instances = self.instances();
        if instances.is_empty() {
            return None;
        }
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) % instances.len();
        Some(instances.swap_remove(turn))
    }

    /// A listener of the service's changes from now on (listen before `start` to get
    /// the instances present at start as `Registered`, then `Initialized`).
    pub fn listen(&self) -> ServiceListener {
        ServiceListener {
            events: self.cache.listen(),
        }
    }

    /// Waits until the instances present at start are known: true, or false if
    /// discovery was closed first.
    pub async fn wait_initialized(&self) -> bool {
        self.cache.wait_initialized().await
    }

    /// The zxid the instances reflect.
    pub fn zxid(&self) -> u64 {
        self.cache.zxid()
    }

    /// Stops discovery: listeners end; the last instances stay readable.
    pub fn close(&mut self) {
        self.cache.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Stat;

    #[test]
    fn an_instance_is_its_node_name_and_address() {
        let node = Node {
            path: instance_path("billing", "i-1"),
            data: b" 10.0.0.7:8080\n".to_vec(),
            stat: Stat {
                ephemeral_owner: 42,
                ..Stat::default()
            },
        };
        assert_eq!(node.path, "/services/billing/i-1");
        let instance = ServiceInstance::from_node(&node);
        assert_eq!(instance.id, "i-1");
        assert_eq!(instance.address, "10.0.0.7:8080");
        assert_eq!(instance.session_id, 42);
    }
}
