//! The replica's sled database, and flushes that reach the disk.
//!
//! sled 0.34 makes its log durable on Linux with `sync_file_range`, which writes the pages
//! out but flushes neither the drive's volatile write cache nor the file's metadata. Items
//! too large for a quarter of a segment (about 128 KiB: a big batch of commands, a
//! snapshot) go to files of their own under `blobs/`, which sled never syncs. A power loss
//! could thus take writes that sled's flush had returned from. [`Disk::flush`] therefore
//! follows sled's flush with an `fdatasync` of its data file, and an `fsync` of each blob file
//! not synced at its present length and of their directory, as etcd syncs its write-ahead
//! log. A blob is written once, but a flush for another write may find it half written; its
//! own flush then finds it longer and syncs it again.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// A replica's sled database in one directory, with the files its flushes sync.
#[derive(Clone)]
pub struct Disk {
    db: sled::Db,
    files: Arc<Files>,
}

/// What sled writes, beside its pages in memory.
struct Files {
    /// sled's data file (`db`), opened to sync it.
    data: File,
    /// Where sled writes its blobs.
    blobs: PathBuf,
    /// The length each blob file that still exists had when it was last synced, by name.
    synced_blobs: Mutex<BTreeMap<String, u64>>,
}

impl Disk {
    /// Opens (or creates) the database in `dir`, with at most `cache_bytes` of pages cached.
    /// sled's own periodic flusher is off: every write that must survive a crash is flushed
    /// before it is acknowledged, and the flusher would only compete for the disk.
    ///
    /// # Errors
    ///
    /// sled could not open the directory, or its files cannot be opened or synced.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self, sled::Error> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .open()?;
        // The directory entries of sled's files, and of its directory, from their creation.
        for made in [Some(dir), dir.parent()].into_iter().flatten() {
            File::open(made)?.sync_all()?;
        }
        let files = Files {
            data: File::open(dir.join("db"))?,
            blobs: dir.join("blobs"),
            synced_blobs: Mutex::new(BTreeMap::new()),
        };
        Ok(Self {
            db,
            files: Arc::new(files),
        })
    }

    /// The tree `name`, created if it does not exist.
    ///
    /// # Errors
    ///
    /// sled failed.
    pub fn tree(&self, name: &str) -> Result<sled::Tree, sled::Error> {
        self.db.open_tree(name)
    }

    /// Makes every write so far durable: once this returns, a crash or a power loss keeps
    /// them.
    ///
    /// # Errors
    ///
    /// sled's flush or a sync failed.
    pub async fn flush(&self) -> io::Result<()> {
        // sled's own flush blocks too: both run on one blocking thread, in one hop.
        let (db, files) = (self.db.clone(), Arc::clone(&self.files));
        tokio::task::spawn_blocking(move || {
            db.flush().map_err(io::Error::other)?;
            files.sync()
        })
        .await
        .map_err(io::Error::other)?
    }
}

impl Files {
    fn sync(&self) -> io::Result<()> {
        self.data.sync_data()?;
        let mut synced = self
            .synced_blobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut present = BTreeMap::new();
        let mut new = false;
        // sled may remove a blob at any time: one gone since the listing keeps nothing.
        let gone = |error: &io::Error| error.kind() == io::ErrorKind::NotFound;
        let entries = match std::fs::read_dir(&self.blobs) {
            Ok(entries) => entries,
            // sled makes it when it opens: without it, there is nothing to sync.
            Err(error) if gone(&error) => return Ok(()),
            Err(error) => return Err(error),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let length = match entry.metadata() {
                Ok(metadata) => metadata.len(),
                Err(error) if gone(&error) => continue,
                Err(error) => return Err(error),
            };
            if synced.get(&name) != Some(&length) {
                match File::open(entry.path()) {
                    Ok(blob) => blob.sync_all()?,
                    Err(error) if gone(&error) => continue,
                    Err(error) => return Err(error),
                }
                new = true;
            }
            present.insert(name, length);
        }
        if new {
            File::open(&self.blobs)?.sync_all()?;
        }
        *synced = present;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flush_syncs_the_blob_files_sled_wrote_for_large_values() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::open(dir.path(), 1 << 24).unwrap();
        let tree = disk.tree("large").unwrap();
        tree.insert(b"small", vec![1u8; 64]).unwrap();
        disk.flush().await.unwrap();
        assert!(disk.files.synced_blobs.lock().unwrap().is_empty());

        // Larger than a quarter of sled's 512 KiB segment: written to a blob file.
        tree.insert(b"large", vec![2u8; 300 * 1024]).unwrap();
        disk.flush().await.unwrap();
        let on_disk: BTreeMap<String, u64> = std::fs::read_dir(dir.path().join("blobs"))
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().to_string_lossy().into_owned();
                (name, entry.metadata().unwrap().len())
            })
            .collect();
        assert!(!on_disk.is_empty(), "sled wrote the large value to a blob");
        assert_eq!(*disk.files.synced_blobs.lock().unwrap(), on_disk);
    }

    #[tokio::test]
    async fn a_blob_found_half_written_is_synced_again_once_it_is_longer() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::open(dir.path(), 1 << 24).unwrap();
        let blob = dir.path().join("blobs").join("999999");
        std::fs::write(&blob, [1u8; 10]).unwrap();
        disk.flush().await.unwrap();
        let synced = |disk: &Disk| disk.files.synced_blobs.lock().unwrap().clone();
        assert_eq!(synced(&disk), BTreeMap::from([("999999".to_owned(), 10)]));

        let mut written = std::fs::OpenOptions::new()
            .append(true)
            .open(&blob)
            .unwrap();
        std::io::Write::write_all(&mut written, &[2u8; 20]).unwrap();
        disk.flush().await.unwrap();
        assert_eq!(synced(&disk), BTreeMap::from([("999999".to_owned(), 30)]));

        std::fs::remove_file(&blob).unwrap();
        disk.flush().await.unwrap();
        assert!(synced(&disk).is_empty(), "a removed blob is forgotten");
    }
}
