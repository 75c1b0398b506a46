//! The replica's sled database, and flushes that reach the disk.
//!
//! sled 0.34 makes its log durable on Linux with `sync_file_range`, which writes the pages
//! out but flushes neither the drive's volatile write cache nor the file's metadata. Items
//! too large for a quarter of a segment (about 128 KiB: a big batch of commands, a
//! snapshot) go to files of their own under `blobs/`, which sled never syncs. A power loss
//! could thus take writes that sled's flush had returned from. [`Disk::flush`] therefore
//! follows sled's flush with an `fdatasync` of its data file, and an `fsync` of each blob file
//! not synced before and of their directory, as etcd syncs its write-ahead log.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    /// The blob files synced so far, by name, among those that still exist.
    synced_blobs: Mutex<BTreeSet<String>>,
}

impl Disk {
    /// Opens (or creates) the database in `dir`, with at most `cache_bytes` of pages cached.
    /// sled's own periodic flusher is off: every write that must survive a crash is flushed
    /// before it is acknowledged, and the flusher would only compete for the disk.
    ///
    /// # Errors
    ///
    /// sled could not open the directory, or its data file cannot be opened.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self, sled::Error> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .open()?;
        let files = Files {
            data: File::open(dir.join("db"))?,
            blobs: dir.join("blobs"),
            synced_blobs: Mutex::new(BTreeSet::new()),
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
        let mut synced = self.synced_blobs.lock().expect("synced blobs lock");
        let mut present = BTreeSet::new();
        let mut new = false;
        let entries = match std::fs::read_dir(&self.blobs) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !synced.contains(&name) {
                match File::open(entry.path()) {
                    Ok(blob) => blob.sync_all()?,
                    // sled removed it since the listing: nothing to keep.
                    Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                    Err(error) => return Err(error),
                }
                new = true;
            }
            present.insert(name);
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
        let on_disk: BTreeSet<String> = std::fs::read_dir(dir.path().join("blobs"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!on_disk.is_empty(), "sled wrote the large value to a blob");
        assert_eq!(*disk.files.synced_blobs.lock().unwrap(), on_disk);
    }
}
