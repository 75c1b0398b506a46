//! What processes wrote: a process's `stdout` and `stderr` in its directory, read a part at a
//! time for the leader, which relays the parts to `muster logs`.

use std::io::SeekFrom;
use std::path::Path;

use muster_core::limits::MAX_LOG_CHUNK_BYTES;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// One of a process's two output files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

impl Stream {
    /// The file's name in the process's directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// Up to `max_bytes` (capped at [`MAX_LOG_CHUNK_BYTES`]) of the file at `path` from `offset`
/// on, and the file's size; nothing past its end.
///
/// # Errors
///
/// The file cannot be opened or read.
pub async fn read_chunk(
    path: &Path,
    offset: u64,
    max_bytes: u32,
) -> std::io::Result<(Vec<u8>, u64)> {
    let mut file = tokio::fs::File::open(path).await?;
    let size = file.metadata().await?.len();
    let mut data = Vec::new();
    if offset < size {
        file.seek(SeekFrom::Start(offset)).await?;
        let wanted = u64::from(max_bytes.min(MAX_LOG_CHUNK_BYTES)).min(size - offset);
        file.take(wanted).read_to_end(&mut data).await?;
    }
    Ok((data, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_from_an_offset_up_to_the_limit_and_nothing_past_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout");
        std::fs::write(&path, b"hello world").unwrap();
        assert_eq!(
            read_chunk(&path, 0, 5).await.unwrap(),
            (b"hello".to_vec(), 11)
        );
        assert_eq!(
            read_chunk(&path, 6, 100).await.unwrap(),
            (b"world".to_vec(), 11)
        );
        assert_eq!(read_chunk(&path, 11, 100).await.unwrap(), (Vec::new(), 11));
        assert_eq!(read_chunk(&path, 50, 100).await.unwrap(), (Vec::new(), 11));
        assert!(read_chunk(&dir.path().join("stderr"), 0, 1).await.is_err());
    }

    #[tokio::test]
    async fn a_read_is_capped_at_the_chunk_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout");
        let size = 2 * MAX_LOG_CHUNK_BYTES as usize + 3;
        std::fs::write(&path, vec![b'x'; size]).unwrap();
        let (data, total) = read_chunk(&path, 1, u32::MAX).await.unwrap();
        assert_eq!(data.len(), MAX_LOG_CHUNK_BYTES as usize);
        assert_eq!(total, size as u64);
    }
}
