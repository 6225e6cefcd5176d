//! Calls over many nodes: [`Client::ensure_path`] (Curator's
//! `creatingParentsIfNeeded`, kazoo's `ensure_path`), the parents of
//! [`CreateOptions::create_parents`], and [`Client::delete_recursive`] (Curator's
//! `deletingChildrenIfNeeded`, kazoo's `delete(recursive=True)`).
//!
//! ```text
//!  ensure_path("/a/b/c"): exists /a/b/c? no ─▶ exists /a/b? no ─▶ exists /a? yes
//!                         create /a/b, create /a/b/c (NODE_EXISTS: someone else did)
//!  delete_recursive("/a"): list /a ─▶ depth first: list and delete each child's
//!                          subtree, then the child ─▶ delete /a (NO_NODE: already gone;
//!                          NOT_EMPTY: a child came meanwhile, list again, bounded)
//! ```
//!
//! Each node is its own call: none of this is atomic, and another client may see a
//! path half made or half deleted. What it must not do: create anything but
//! persistent, empty ancestors; delete outside the subtree it was given.

use concord_proto::v1::{CreateMode, ErrorCode};

use crate::client::{Client, Created};
use crate::error::Error;
use crate::options::{ChildrenOptions, CreateOptions, ReadOptions, ANY_VERSION};

/// Rounds of `ensure_path` (an ancestor it found or made was deleted before its
/// child was created: it starts over) before the NO_NODE is returned.
const ENSURE_ROUNDS_MAX: u32 = 8;

/// Times `delete_recursive` lists one node again because a child was created under
/// it while its subtree was being deleted, before the NOT_EMPTY is returned.
const RELISTS_MAX: u32 = 8;

impl Client {
    /// Makes sure `path` exists: creates it and each missing ancestor as an empty
    /// persistent node, as Curator's `creatingParentsIfNeeded` and kazoo's
    /// `ensure_path` do. A node that exists already is left as it is, whatever its
    /// mode or data; one created meanwhile by someone else (NODE_EXISTS) is fine.
    /// Reads first, so that a client may use a folder it could not create. Errors:
    /// BAD_PATH (nothing is created), PERMISSION_DENIED, NO_CHILDREN_FOR_EPHEMERALS
    /// (an ancestor is ephemeral), and NO_NODE if ancestors keep being deleted as it
    /// creates them.
    pub async fn ensure_path(&self, path: &str) -> Result<(), Error> {
        let mut last = None;
        for _ in 0..ENSURE_ROUNDS_MAX {
            // The first read checks the path: a bad one creates nothing.
            if self.present(path).await? {
                return Ok(());
            }
            let chain = chain(path);
            // The deepest ancestor that exists (the root always does).
            let mut first_missing = chain.len() - 1;
            while first_missing > 0 {
                let parent = chain[first_missing - 1];
                if self.present(parent).await? {
                    break;
                }
                first_missing -= 1;
            }
            match self.create_each(&chain[first_missing..]).await {
                Ok(()) => return Ok(()),
                // An ancestor went away between the read and the create.
                Err(e) if e.code() == ErrorCode::NoNode => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::client(ErrorCode::NoNode, "no round was run")))
    }

    /// Whether `path` exists.
    async fn present(&self, path: &str) -> Result<bool, Error> {
        let read = self.exists(path, ReadOptions::default()).await?;
        Ok(read.stat.is_some())
    }

    /// Creates `paths` in order as empty persistent nodes, skipping those that exist.
    async fn create_each(&self, paths: &[&str]) -> Result<(), Error> {
        for path in paths {
            let options = CreateOptions::mode(CreateMode::Persistent);
            match self.create_once(path, Vec::new(), options).await {
                Ok(_) => {}
                Err(e) if e.code() == ErrorCode::NodeExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A create with [`CreateOptions::create_parents`]: on NO_NODE the parents are
    /// made and the create is sent again (a new request, so with a request id of its
    /// own: the server remembers the first one's NO_NODE). With a request id the
    /// caller picked, the parents are made first, so that the id is sent once.
    pub(crate) async fn create_with_parents(
        &self,
        path: &str,
        data: Vec<u8>,
        options: CreateOptions,
    ) -> Result<Created, Error> {
        let parent = parent_of(path);
        if options.request_id != 0 {
            self.ensure_path(parent).await?;
            return self.create_once(path, data, options).await;
        }
        let mut last = None;
        for _ in 0..ENSURE_ROUNDS_MAX {
            match self.create_once(path, data.clone(), options.clone()).await {
                Err(e) if e.code() == ErrorCode::NoNode && parent != path => {
                    last = Some(e);
                    self.ensure_path(parent).await?;
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| Error::client(ErrorCode::NoNode, "no round was run")))
    }

    /// Deletes `path` and everything below it, depth first (each node after its
    /// children, every page of children followed), then `path` itself if its version
    /// is `version` (-1: any): Curator's `deletingChildrenIfNeeded`, kazoo's
    /// `delete(path, recursive=True)`. Nodes deleted meanwhile by someone else are
    /// skipped (so a `path` that does not exist is no error); a node given a new
    /// child meanwhile is listed again, at most 8 times. The root `/` itself is never
    /// deleted, only what is under it. Returns how many nodes this call deleted.
    /// Errors: BAD_PATH, BAD_VERSION (of `path`, after its subtree is gone),
    /// NOT_EMPTY (children kept coming), PERMISSION_DENIED.
    pub async fn delete_recursive(&self, path: &str, version: i32) -> Result<u64, Error> {
        let mut stack = vec![Pending {
            path: path.to_owned(),
            listed: false,
            relists: 0,
        }];
        let mut deleted = 0u64;
        while let Some(node) = stack.pop() {
            if !node.listed {
                let read = ChildrenOptions::default();
                let children = match self.children(&node.path, &read).await {
                    Ok(all) => all.children,
                    Err(e) if e.code() == ErrorCode::NoNode => continue,
                    Err(e) => return Err(e),
                };
                let base = node.path.trim_end_matches('/').to_owned();
                stack.push(Pending {
                    listed: true,
                    ..node
                });
                // Popped in name order.
                stack.extend(children.into_iter().rev().map(|c| Pending {
                    path: format!("{base}/{}", c.name),
                    listed: false,
                    relists: 0,
                }));
                continue;
            }
            if node.path == "/" {
                continue;
            }
            let expected = if node.path == path {
                version
            } else {
                ANY_VERSION
            };
            match self.delete(&node.path, expected).await {
                Ok(_) => deleted += 1,
                Err(e) if e.code() == ErrorCode::NoNode => {}
                Err(e) if e.code() == ErrorCode::NotEmpty && node.relists < RELISTS_MAX => {
                    stack.push(Pending {
                        listed: false,
                        relists: node.relists + 1,
                        ..node
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}

/// A node `delete_recursive` has yet to list (`listed` false) or to delete.
struct Pending {
    path: String,
    listed: bool,
    /// Times it was listed again after NOT_EMPTY.
    relists: u32,
}

/// `path`'s ancestors below the root, then `path`: "/a/b/c" gives ["/a", "/a/b",
/// "/a/b/c"]; "/" gives ["/"].
fn chain(path: &str) -> Vec<&str> {
    let mut chain: Vec<&str> = path
        .match_indices('/')
        .skip(1)
        .map(|(end, _)| &path[..end])
        .collect();
    chain.push(path);
    chain
}

/// The parent of `path` ("/" for "/a" and for "/").
pub(crate) fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(end) => &path[..end],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_is_the_ancestors_then_the_path() {
        assert_eq!(chain("/a/b/c"), ["/a", "/a/b", "/a/b/c"]);
        assert_eq!(chain("/a"), ["/a"]);
        assert_eq!(chain("/"), ["/"]);
    }

    #[test]
    fn a_parent_is_the_path_up_to_its_last_slash() {
        assert_eq!(parent_of("/a/b/c"), "/a/b");
        assert_eq!(parent_of("/a"), "/");
        assert_eq!(parent_of("/"), "/");
        assert_eq!(parent_of("/a/seq-"), "/a");
    }
}
