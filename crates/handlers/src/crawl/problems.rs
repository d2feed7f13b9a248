//! Why one file of a crawl was not ingested ([`FileProblem`]), and what the media crate's and the catalogue's errors
//! come to.

use std::path::PathBuf;

use almanac_domain::ports::CatalogueError;
use almanac_media::{MediaError, ReadError};

/// Why one file was not ingested.
pub(super) enum FileProblem {
    /// Not media after all, or empty: passed over.
    Skipped(String),
    /// Unreadable, or failed for a reason that is not its content: recorded with its reason; the crawl goes on.
    Failed(String),
    /// Failed for its content (damaged, not what its name says, over the pixel limit): recorded like `Failed`,
    /// and remembered, so that it is not read again while unchanged ([`super::failed`]).
    Damaged(String),
    /// Remembered as failed for its content and unchanged since: not read again; recorded like `Failed`.
    FailedBefore(String),
    /// A proxy could not be written, or what was made is not whole (`at`: the proxy or its folder): recorded like
    /// `Failed`, unless the proxy root can take no file at all, or a folder on the way to the proxy may not be
    /// written by the Worker's user, which stop the crawl.
    ProxyNotWritten {
        reason: String,
        at: Option<PathBuf>,
    },
    /// The proxy volume refused a write (full, read-only, over its quota): no later file can fare better, so
    /// the crawl stops with one error naming `storage.proxy_root`, however much room a small check still finds.
    ProxyVolume(MediaError),
    /// More assets lost their paths to files of other content than the mass-deletion guard lets go at once: the
    /// crawl stops before this file takes one (its words say why).
    Replacing(String),
    /// The catalogue did not answer, or failed: the crawl stops (retryable), naming the file. A refusal of the
    /// file's values ([`CatalogueError::Refused`]) fails that file only.
    Catalogue(CatalogueError),
    /// Still being written: modified within the settle time, or changed between the walk and the end of its
    /// hashing. Nothing is written for it; a crawl later reads it.
    Settling,
    Cancelled,
}

impl From<CatalogueError> for FileProblem {
    fn from(e: CatalogueError) -> Self {
        FileProblem::Catalogue(e)
    }
}

impl From<MediaError> for FileProblem {
    fn from(e: MediaError) -> Self {
        match e {
            MediaError::Cancelled => FileProblem::Cancelled,
            MediaError::ProxyWrite { ref source, .. } if refused_by_the_volume(source) => FileProblem::ProxyVolume(e),
            MediaError::ProxyWrite { ref path, .. } | MediaError::ProxyNotMade { dir: ref path, .. } => {
                FileProblem::ProxyNotWritten { at: Some(path.clone()), reason: e.to_string() }
            }
            MediaError::ProxyRootUnwritable { .. } => FileProblem::ProxyNotWritten { reason: e.to_string(), at: None },
            // What the file holds decided it: a tool that ended of its own accord with an error (not one killed by a
            // signal: the out-of-memory killer's say nothing of the file).
            MediaError::Corrupt { .. } | MediaError::TooManyPixels { .. } => FileProblem::Damaged(e.to_string()),
            MediaError::Tool { ref message, .. } if !message.starts_with("signal") => {
                FileProblem::Damaged(e.to_string())
            }
            other => FileProblem::Failed(other.to_string()),
        }
    }
}

/// Whether a write was refused by the volume itself rather than for one file: it is full, read-only or over
/// its quota.
fn refused_by_the_volume(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{QuotaExceeded, ReadOnlyFilesystem, StorageFull};
    matches!(e.kind(), StorageFull | ReadOnlyFilesystem | QuotaExceeded)
}

impl From<ReadError> for FileProblem {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Vanished | ReadError::NotMedia => FileProblem::Skipped(e.to_string()),
            ReadError::Unreadable(reason) => FileProblem::Failed(reason),
            ReadError::Cancelled => FileProblem::Cancelled,
        }
    }
}
