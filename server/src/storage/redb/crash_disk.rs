//! A disk that can crash, for tests: a redb `StorageBackend` in memory that keeps
//! what was synced apart from what was only written, and makes the image a crash
//! would leave.
//!
//! ```text
//!   write ──▶ cached (what the process reads)  + unsynced (the writes since the sync)
//!   sync  ──▶ durable = cached, unsynced = []
//!   crash ──▶ durable, then each 512-byte sector touched since the sync at one of
//!             its versions (none of the writes, some first of them, or all), and the
//!             length as of the sync or as of now
//! ```
//!
//! The sector model is a page cache's: writeback may write a sector at any moment
//! (so with any of the contents it had since the sync) and in any order, but a sector
//! is written whole. `Tear::DropAll` loses every unsynced write, `Tear::KeepAll` is
//! kill -9 (the page cache survives), `Tear::Sectors` draws a version per sector.
//!
//! Before each write, sync or length change, the disk calls its crash hook with
//! itself: every such call is a crash point, at which the hook may make images.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use ::redb::StorageBackend;

use crate::zab::rng::Rng;

/// The unit a disk writes whole.
const SECTOR_BYTES: u64 = 512;

/// Called at every crash point, before the write, sync or length change happens.
pub(crate) type CrashHook = Box<dyn FnMut(&Disk) + Send>;

/// What a crash does to the writes since the last sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tear {
    /// None of them reached the disk.
    DropAll,
    /// All of them did (kill -9: the page cache is written back).
    KeepAll,
    /// Each sector they touched holds one of its versions since the sync, drawn at
    /// random, and the length is the synced one or the current one.
    Sectors,
}

/// The disk's contents.
#[derive(Debug, Default)]
pub(crate) struct Disk {
    /// What the process reads: every write so far.
    cached: Vec<u8>,
    /// What survives any crash: the contents as of the last sync.
    durable: Vec<u8>,
    /// The writes since the last sync, in order: (offset, bytes).
    unsynced: Vec<(u64, Vec<u8>)>,
    /// Writes, syncs and length changes so far.
    points: u64,
    /// Syncs so far.
    syncs: u64,
    /// The shortest `cached` was since the last sync.
    shortest_since_sync: usize,
}

impl Disk {
    /// A disk holding `image`, all of it durable.
    fn from_image(image: Vec<u8>) -> Disk {
        Disk {
            cached: image.clone(),
            shortest_since_sync: image.len(),
            durable: image,
            ..Disk::default()
        }
    }

    /// Crash points passed so far.
    pub(crate) fn points(&self) -> u64 {
        self.points
    }

    /// Syncs so far: `Tear::DropAll` makes the same image until the next one.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs
    }

    /// The bytes a crash now would leave.
    pub(crate) fn crash_image(&self, tear: Tear, rng: &mut Rng) -> Vec<u8> {
        let len_changed = self.cached.len() != self.durable.len();
        let len = match tear {
            Tear::DropAll => self.durable.len(),
            Tear::KeepAll => self.cached.len(),
            Tear::Sectors if len_changed && rng.chance(500) => self.durable.len(),
            Tear::Sectors => self.cached.len(),
        };
        // How many unsynced writes touch each sector, then the version each keeps.
        let mut touches: HashMap<u64, u32> = HashMap::new();
        for (offset, data) in &self.unsynced {
            for sector in sectors(*offset, data.len()) {
                *touches.entry(sector).or_default() += 1;
            }
        }
        let mut kept: HashMap<u64, u32> = touches
            .iter()
            .map(|(&sector, &n)| {
                let version = match tear {
                    Tear::DropAll => 0,
                    Tear::KeepAll => n,
                    Tear::Sectors => rng.below(u64::from(n) + 1) as u32,
                };
                (sector, version)
            })
            .collect();
        let mut image = self.durable.clone();
        for (offset, data) in &self.unsynced {
            for sector in sectors(*offset, data.len()) {
                let Some(left) = kept.get_mut(&sector).filter(|left| **left > 0) else {
                    continue;
                };
                *left -= 1;
                // This write's bytes within the sector.
                let start = (sector * SECTOR_BYTES).max(*offset);
                let end = ((sector + 1) * SECTOR_BYTES).min(*offset + data.len() as u64);
                let from = (start - *offset) as usize;
                put(
                    &mut image,
                    start,
                    &data[from..from + (end - start) as usize],
                );
            }
        }
        image.resize(len, 0);
        image
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        put(&mut self.cached, offset, data);
        self.unsynced.push((offset, data.to_vec()));
    }

    fn set_len(&mut self, len: usize) {
        self.cached.resize(len, 0);
        self.shortest_since_sync = self.shortest_since_sync.min(len);
    }

    fn sync(&mut self) {
        // The synced writes onto the durable bytes: what `cached` holds, without a copy
        // of the whole disk (it holds zeros past any shorter length it had meanwhile).
        self.durable.truncate(self.shortest_since_sync);
        for (offset, data) in self.unsynced.drain(..) {
            put(&mut self.durable, offset, &data);
        }
        self.durable.resize(self.cached.len(), 0);
        self.shortest_since_sync = self.cached.len();
        self.syncs += 1;
    }
}

/// Writes `data` at `offset` into `bytes`, growing it with zeros as a file would.
fn put(bytes: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = offset as usize;
    let end = start + data.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[start..end].copy_from_slice(data);
}

/// The sectors that `len` bytes at `offset` touch.
fn sectors(offset: u64, len: usize) -> std::ops::Range<u64> {
    let end = offset + len as u64;
    offset / SECTOR_BYTES..end.div_ceil(SECTOR_BYTES)
}

/// A `Disk` as redb's backend, with its crash hook.
pub(crate) struct CrashDisk {
    disk: Arc<Mutex<Disk>>,
    hook: Option<Arc<Mutex<CrashHook>>>,
}

impl std::fmt::Debug for CrashDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashDisk").finish_non_exhaustive()
    }
}

impl CrashDisk {
    /// A backend over `disk` (shared, so the test can look at it), calling `hook` at
    /// every crash point.
    pub(crate) fn new(disk: Arc<Mutex<Disk>>, hook: Option<CrashHook>) -> CrashDisk {
        CrashDisk {
            disk,
            hook: hook.map(|h| Arc::new(Mutex::new(h))),
        }
    }

    /// Runs `change` on the disk after the crash hook has seen it as it was.
    fn crash_point(&self, change: impl FnOnce(&mut Disk)) {
        let mut disk = self.disk();
        if let Some(hook) = &self.hook {
            (hook.lock().unwrap_or_else(PoisonError::into_inner))(&disk);
        }
        disk.points += 1;
        change(&mut disk);
    }

    fn disk(&self) -> std::sync::MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StorageBackend for CrashDisk {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.disk().cached.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let disk = self.disk();
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let source = disk
            .cached
            .get(start..start + out.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        out.copy_from_slice(source);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        self.crash_point(|disk| disk.set_len(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.crash_point(Disk::sync);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.crash_point(|disk| disk.write(offset, data));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk_with(durable: &[u8], writes: &[(u64, &[u8])]) -> Disk {
        let mut disk = Disk::from_image(durable.to_vec());
        for (offset, data) in writes {
            disk.write(*offset, data);
        }
        disk
    }

    #[test]
    fn a_crash_keeps_what_was_synced_and_loses_or_keeps_the_rest() {
        let mut rng = Rng::new(1);
        let mut disk = disk_with(&[1; 1024], &[(0, &[2; 1024])]);
        assert_eq!(disk.crash_image(Tear::DropAll, &mut rng), vec![1; 1024]);
        assert_eq!(disk.crash_image(Tear::KeepAll, &mut rng), vec![2; 1024]);
        disk.sync();
        disk.write(2048, &[3; 10]);
        let dropped = disk.crash_image(Tear::DropAll, &mut rng);
        assert_eq!(dropped, vec![2; 1024], "an unsynced extension is lost");
        let kept = disk.crash_image(Tear::KeepAll, &mut rng);
        assert_eq!(kept.len(), 2058);
        assert_eq!(&kept[1024..2048], &[0; 1024][..]);
        assert_eq!(&kept[2048..], &[3; 10][..]);
    }

    #[test]
    fn a_torn_crash_leaves_each_sector_whole_at_one_of_its_versions() {
        // Two writes over two sectors: each sector ends at version 0, 1 or 2.
        let disk = disk_with(&[0; 1024], &[(0, &[1; 1024]), (256, &[2; 512])]);
        let mut seen = std::collections::BTreeSet::new();
        let mut rng = Rng::new(7);
        for _ in 0..200 {
            let image = disk.crash_image(Tear::Sectors, &mut rng);
            for sector in image.chunks(512) {
                let versions = [
                    [0u8; 512].to_vec(),
                    [1u8; 512].to_vec(),
                    [[1u8; 256].as_slice(), &[2u8; 256]].concat(),
                    [[2u8; 256].as_slice(), &[1u8; 256]].concat(),
                ];
                let v = versions.iter().position(|v| v.as_slice() == sector);
                seen.insert(v.expect("a sector mixes writes it never held"));
            }
        }
        // Sector 0: versions 0, 1 (first write) and [1,2] (both); sector 1: 0, 1, [2,1].
        assert_eq!(seen.len(), 4, "{seen:?}");
    }

    #[test]
    fn the_hook_sees_the_disk_before_each_change() {
        let disk = Arc::new(Mutex::new(Disk::default()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let backend = CrashDisk::new(
            disk.clone(),
            Some(Box::new(move |d: &Disk| {
                log.lock().unwrap().push((d.points(), d.cached.len()));
            })),
        );
        backend.set_len(10).unwrap();
        backend.write(10, &[1; 5]).unwrap();
        backend.sync_data().unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![(0, 0), (1, 10), (2, 15)]);
        assert_eq!(disk.lock().unwrap().durable.len(), 15);
    }
}
