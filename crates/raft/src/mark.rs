//! What a replica has made durable, kept beside sled: the term of its vote and the last log
//! index it acknowledged.
//!
//! sled recovers a damaged file to its last intact segment without an error, so a replica
//! whose files were damaged would start with a forgotten vote or a shorter log, vote again
//! in a term it voted in, and serve as if acknowledged entries had never been written. The
//! mark catches that: it is written (to a new file, synced, then renamed over the old one)
//! whenever the vote changes or the log is truncated, and at most once a second as the log
//! grows, so it never claims more than the log made durable. On open, a log that holds less
//! than its mark is refused.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the mark follows a growing log.
const EVERY: Duration = Duration::from_secs(1);

/// The durable high-water marks of one replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    /// The term of the last vote saved.
    pub(crate) term: u64,
    /// The last log index acknowledged, if any.
    pub(crate) index: Option<u64>,
}

/// Why a replica's data was refused at open.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    /// The mark file cannot be read or written.
    #[error("cannot read or write {path}: {source}")]
    Io {
        /// The mark file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The mark file holds something else.
    #[error("{path} is not a durability mark: {content:?}")]
    Malformed {
        /// The mark file.
        path: PathBuf,
        /// What it holds.
        content: String,
    },
    /// The log holds less than the replica made durable.
    #[error(
        "the Raft data holds less than this replica made durable (vote of term {found_term}, \
         log up to {found_index}; it had reached term {term} and {index}): its files are \
         damaged. A replica must not vote or serve with a forgotten log: remove it from the \
         group (muster members remove ID) and add it back under a new id with an empty data \
         dir, or restore the cluster from a snapshot"
    )]
    Lost {
        /// The term of the vote it had saved.
        term: u64,
        /// The last index it had acknowledged, as text.
        index: String,
        /// The term of the vote found.
        found_term: u64,
        /// The last index found, as text.
        found_index: String,
    },
}

/// The mark file of one replica and the mark last written to it.
#[derive(Debug)]
pub(crate) struct MarkFile {
    path: PathBuf,
    written: Mark,
    written_at: Instant,
}

fn index_text(index: Option<u64>) -> String {
    index.map_or_else(|| "no entry".to_owned(), |i| format!("index {i}"))
}

impl MarkFile {
    /// Checks `found` (what the log holds) against the mark at `path`, then records it there:
    /// a replica opened for the first time, or whose mark predates this check, starts its
    /// mark from what it holds.
    ///
    /// # Errors
    ///
    /// [`MarkError::Lost`] when `found` is behind the mark; the file cannot be read, parsed
    /// or written.
    pub(crate) fn open(path: &Path, found: Mark) -> Result<Self, MarkError> {
        if let Some(mark) = read(path)?
            && (found.term < mark.term || found.index < mark.index)
        {
            return Err(MarkError::Lost {
                term: mark.term,
                index: index_text(mark.index),
                found_term: found.term,
                found_index: index_text(found.index),
            });
        }
        let mut file = Self {
            path: path.to_owned(),
            written: found,
            written_at: Instant::now(),
        };
        file.write(found)?;
        Ok(file)
    }

    /// The mark last written.
    pub(crate) fn current(&self) -> Mark {
        self.written
    }

    /// Writes `mark` now.
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub(crate) fn write(&mut self, mark: Mark) -> Result<(), MarkError> {
        let io = |source| MarkError::Io {
            path: self.path.clone(),
            source,
        };
        let fresh = self.path.with_extension("new");
        let text = format!(
            "term {}\nindex {}\n",
            mark.term,
            mark.index
                .map_or_else(|| "none".to_owned(), |i| i.to_string())
        );
        let mut file = fs::File::create(&fresh).map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        fs::rename(&fresh, &self.path).map_err(io)?;
        self.written = mark;
        self.written_at = Instant::now();
        Ok(())
    }

    /// Writes `mark` if the last write is a second old or more.
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub(crate) fn follow(&mut self, mark: Mark) -> Result<(), MarkError> {
        if mark != self.written && self.written_at.elapsed() >= EVERY {
            self.write(mark)?;
        }
        Ok(())
    }
}

/// The mark at `path`, if there is one.
fn read(path: &Path) -> Result<Option<Mark>, MarkError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(MarkError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let malformed = || MarkError::Malformed {
        path: path.to_owned(),
        content: text.clone(),
    };
    let mut lines = text.lines();
    let term = lines
        .next()
        .and_then(|l| l.strip_prefix("term "))
        .and_then(|t| t.parse().ok())
        .ok_or_else(malformed)?;
    let index = match lines.next().and_then(|l| l.strip_prefix("index ")) {
        Some("none") => None,
        Some(i) => Some(i.parse().map_err(|_| malformed())?),
        None => return Err(malformed()),
    };
    Ok(Some(Mark { term, index }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_behind_its_mark_is_refused_and_one_at_or_past_it_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft-mark");
        let reached = Mark {
            term: 3,
            index: Some(17),
        };
        MarkFile::open(&path, reached).unwrap();
        for behind in [
            Mark {
                term: 2,
                index: Some(17),
            },
            Mark {
                term: 3,
                index: Some(16),
            },
            Mark::default(),
        ] {
            let error = MarkFile::open(&path, behind).unwrap_err();
            assert!(matches!(error, MarkError::Lost { term: 3, .. }), "{error}");
            assert!(error.to_string().contains("index 17"), "{error}");
        }
        let ahead = Mark {
            term: 4,
            index: Some(20),
        };
        assert_eq!(MarkFile::open(&path, ahead).unwrap().current(), ahead);
        std::fs::write(&path, "nonsense").unwrap();
        assert!(matches!(
            MarkFile::open(&path, ahead),
            Err(MarkError::Malformed { .. })
        ));
    }

    #[test]
    fn a_growing_log_is_followed_at_most_once_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft-mark");
        let mut file = MarkFile::open(&path, Mark::default()).unwrap();
        let grown = Mark {
            term: 1,
            index: Some(5),
        };
        file.follow(grown).unwrap();
        assert_eq!(read(&path).unwrap(), Some(Mark::default()), "not yet");
        file.write(grown).unwrap();
        assert_eq!(read(&path).unwrap(), Some(grown));
    }
}
