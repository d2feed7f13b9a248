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

impl FileProblem {
    /// This problem, met reading a file whose content is a known asset's (moved, revived, dated again): never
    /// remembered as damaged. A file passed over is not hashed, so a remembered failure would hide the asset's
    /// file from later crawls, which would then take the asset for gone.
    pub(super) fn of_known_content(self) -> Self {
        match self {
            FileProblem::Damaged(reason) => FileProblem::Failed(reason),
            other => other,
        }
    }
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
            // What the file holds decided it: a decoder's refusal, or a reader's that ended of its own accord with an
            // error (not one killed by a signal: the out-of-memory killer says nothing of the file). heif-convert
            // and ffmpeg write into the proxy volume: their failures may be the volume's, and are not remembered.
            MediaError::Corrupt { .. } | MediaError::TooManyPixels { .. } => FileProblem::Damaged(e.to_string()),
            MediaError::Tool { tool: "ffprobe" | "libjpeg-turbo", signal: None, .. } => {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(tool: &'static str, message: &str) -> FileProblem {
        let signal = message.starts_with("signal: 9").then_some(9);
        FileProblem::from(MediaError::Tool { tool, path: "/lib/a.mp4".into(), message: message.into(), signal })
    }

    /// Only what the file holds makes a failure one to remember; met reading a known asset's content, never.
    #[test]
    fn only_failures_decided_by_a_new_files_content_are_remembered() {
        let corrupt = FileProblem::from(MediaError::Corrupt { path: "/lib/a.jpg".into(), reason: "cut".into() });
        assert!(matches!(corrupt, FileProblem::Damaged(_)));
        assert!(matches!(corrupt.of_known_content(), FileProblem::Failed(_)), "a moved asset's file");
        assert!(matches!(tool("ffprobe", "exit status: 1: Invalid data found"), FileProblem::Damaged(_)));
        assert!(matches!(tool("ffprobe", "signal: 9 (SIGKILL): probing"), FileProblem::Failed(_)), "killed");
        assert!(matches!(tool("heif-convert", "exit status: 1: could not write"), FileProblem::Failed(_)));
        assert!(matches!(tool("ffmpeg", "exit status: 1: Conversion failed!"), FileProblem::Failed(_)));
        let timed_out = FileProblem::from(MediaError::TimedOut { tool: "ffprobe", path: "/a".into(), seconds: 1 });
        assert!(matches!(timed_out, FileProblem::Failed(_)));
        assert!(matches!(FileProblem::from(ReadError::Unreadable("EIO".into())), FileProblem::Failed(_)));
    }
}
