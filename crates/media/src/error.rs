use std::path::PathBuf;

/// Why a media file could not be read or its proxies made. Each message names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file's content is broken (truncated, not what its name says).
    #[error(
        "{path}: the file is damaged or not a supported image or video ({reason}); it is skipped, and tried again at the next crawl"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        reason: String,
    },
    /// An external tool (ffmpeg, ffprobe, heif-convert) failed.
    #[error("{tool} failed on {path}: {message}")]
    Tool {
        /// The tool.
        tool: &'static str,
        /// The file.
        path: PathBuf,
        /// Its last words.
        message: String,
    },
    /// An external tool is not installed.
    #[error(
        "{tool} is not installed, so {path} cannot be processed: install it (Debian: `apt-get install -y {package}`)"
    )]
    ToolMissing {
        /// The tool.
        tool: &'static str,
        /// The Debian package that has it.
        package: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// An external tool ran past its time limit and was killed.
    #[error("{tool} took longer than {seconds} s on {path} and was stopped")]
    TimedOut {
        /// The tool.
        tool: &'static str,
        /// The file.
        path: PathBuf,
        /// The limit.
        seconds: u64,
    },
    /// The work was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl MediaError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        MediaError::Io { path: path.into(), source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl ToString) -> Self {
        MediaError::Corrupt { path: path.into(), reason: reason.to_string() }
    }
}
