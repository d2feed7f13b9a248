use std::path::PathBuf;

use almanac_domain::ProxyType;

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
        "{path}: the file is damaged or not a supported image or video ({reason}); it is skipped, and read again once it changes"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        reason: String,
    },
    /// A picture larger than `storage.max_image_megapixels` allows (a still's header, a video's frame): refused
    /// before it is decoded ([`MediaError::too_many_pixels`] words it).
    #[error("{path}: {reason}. The file is skipped, and read again once it changes or the limit does")]
    TooManyPixels {
        /// The file.
        path: PathBuf,
        /// The picture's size, the limit and what to do.
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
        /// The signal that ended it, when one did (not the Worker's: a cancel or a time limit answers otherwise):
        /// then its failure says nothing of the file.
        signal: Option<i32>,
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
    #[error(
        "{tool} took longer than {seconds} s on {path} and was stopped (a video's web transcode may take as long as \
         storage.transcode_limit allows: raise it for long videos on a slow machine)"
    )]
    TimedOut {
        /// The tool.
        tool: &'static str,
        /// The file.
        path: PathBuf,
        /// The limit.
        seconds: u64,
    },
    /// A proxy could not be written into its folder under the proxy root (a full or read-only volume, a
    /// folder the Worker may not write): nothing took the proxy's name.
    #[error(
        "could not write the proxy {path}: {source}. The proxy volume may be full, read-only or not writable by \
         the Worker's user: check storage.proxy_root. Nothing took the proxy's name; the file is tried again at \
         the next crawl"
    )]
    ProxyWrite {
        /// The file being written (its temporary name) or the folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A link (or a file) stands where one of the folders of a file's proxies should be: nothing is written through
    /// it.
    #[error(
        "{what} stands where the proxy folder {path} should be: the Worker writes proxies only into real folders \
         beneath storage.proxy_root, never through a link, and wrote nothing there. Remove it (a link: `rm` the link \
         itself, without -r; the Worker makes the folder again); to keep proxies on another disk, mount that disk \
         at storage.proxy_root instead of linking to it"
    )]
    ProxyFolderNotAFolder {
        /// The path where the folder should be.
        path: PathBuf,
        /// What stands there: "a link" or "a file".
        what: &'static str,
    },
    /// The folder of a file's proxies (or one above it) was moved, removed or swapped for a link while they were made:
    /// they went into the folder itself, wherever it is now, and nothing was written through what stands there.
    #[error(
        "the proxy folder {path} was moved, removed or replaced (by a link or another folder) while this file's \
         proxies were made: whatever was written went into the folder the Worker had made, never through what stands \
         there now, and the file was not recorded; it is tried again at the next crawl. If this comes back, something \
         other than the Worker changes storage.proxy_root, which must be the Worker's alone"
    )]
    ProxyFolderMoved {
        /// Where the folder was made.
        path: PathBuf,
    },
    /// The scratch folder of a file's proxies cannot be made the Worker's alone: what stands at its name is not the
    /// Worker's to empty, or the folder made is not (as the volume shows it) the Worker's alone. Nothing was written.
    #[error(
        "the proxies' scratch folder {path} was refused: {reason}. Nothing was written into it; the file is tried \
         again at the next crawl"
    )]
    ProxyScratchRefused {
        /// The scratch folder.
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// A tool failed while making a proxy, or what it (or we) made is not whole: nothing took the proxy's name.
    #[error(
        "the {proxy} of {path} was not made: {reason}. Nothing took its name in {dir}. If the file opens \
         elsewhere, the proxy volume (storage.proxy_root) may be full or failing: free space or check it; the file \
         is tried again at the next crawl"
    )]
    ProxyNotMade {
        /// The original.
        path: PathBuf,
        /// Which proxy.
        proxy: ProxyType,
        /// The proxy folder.
        dir: PathBuf,
        /// What the tool said, or what the check found.
        reason: String,
    },
    /// The proxy root cannot take a file at all ([`crate::check_proxy_root`]): no proxy can be written.
    #[error(
        "storage.proxy_root {root} cannot take a file ({source}): {}. No proxy can be written until then",
        remedy(.source)
    )]
    ProxyRootUnwritable {
        /// The proxy root.
        root: PathBuf,
        /// Why a file could not be written there.
        source: std::io::Error,
    },
    /// A folder of one config's proxies that this process may not write ([`crate::check_proxy_folders`]): no proxy
    /// that belongs in it can be written.
    #[error(
        "the proxy folder {folder} cannot be written by the Worker's user (uid {user}): {source}. {}",
        folder_remedy(*.owner, *.user, .config_dir, .source)
    )]
    ProxyFolderUnwritable {
        /// The folder.
        folder: PathBuf,
        /// The folder of the config's proxies it lies in (or is).
        config_dir: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// This process's effective uid.
        user: u32,
        /// What the check said.
        source: std::io::Error,
    },
    /// The work was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// What to do about a proxy root that cannot take a file, by the kind of error.
fn remedy(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::PermissionDenied => {
            "the Worker's user may not write there; give that user write access to the folder (owner or mode)"
        }
        ErrorKind::ReadOnlyFilesystem => "its volume is mounted read-only; mount it read-write",
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => "its volume is full; free space on it",
        ErrorKind::NotFound => "it does not exist; is its volume mounted?",
        ErrorKind::NotADirectory => "it is not a folder; point storage.proxy_root at a folder",
        _ => "check the folder and the volume it is on",
    }
}

/// What to do about a proxy folder the Worker's user may not write: one another user made (a Worker run once as
/// root from a shell) is given back; otherwise as for the proxy root.
fn folder_remedy(owner: u32, user: u32, config_dir: &std::path::Path, e: &std::io::Error) -> String {
    let denied = e.kind() == std::io::ErrorKind::PermissionDenied;
    if denied && user == 0 {
        // Root refused (a share that maps root to nobody): the folder is for the user who owns it.
        format!(
            "It belongs to uid {owner}, and root may not write it here (a share that maps root to another user): run \
             the Worker as uid {owner}, the service's user. No proxy of this config can be written there until then"
        )
    } else if denied && owner != user {
        format!(
            "It belongs to uid {owner}: a Worker (or a command) run once as another user, root from a shell say, \
             made it. Give the config's proxy folders back to the Worker's user (`chown -R {user} {}`), and run the \
             Worker as that user only. No proxy of this config can be written there until then",
            config_dir.display()
        )
    } else {
        format!("{}. No proxy of this config can be written there until then", remedy(e))
    }
}

#[cfg(test)]
#[test]
fn a_proxy_folder_of_another_user_is_given_back_and_one_of_ours_is_looked_at_as_the_proxy_root() {
    let dir = std::path::Path::new("/proxies/c0ffee");
    let denied = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
    let theirs = folder_remedy(0, 999, dir, &denied());
    assert!(theirs.contains("belongs to uid 0") && theirs.contains("chown -R 999 /proxies/c0ffee"), "{theirs}");
    let ours = folder_remedy(999, 999, dir, &std::io::Error::from(std::io::ErrorKind::ReadOnlyFilesystem));
    assert!(ours.contains("mounted read-only") && !ours.contains("chown"), "{ours}");
    let read_only = folder_remedy(0, 999, dir, &std::io::Error::from(std::io::ErrorKind::ReadOnlyFilesystem));
    assert!(read_only.contains("mounted read-only") && !read_only.contains("chown"), "{read_only}");
    let squashed = folder_remedy(999, 0, dir, &denied());
    assert!(squashed.contains("run the Worker as uid 999") && !squashed.contains("chown"), "{squashed}");
}

impl MediaError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        MediaError::Io { path: path.into(), source }
    }

    /// A write in a proxy folder failed.
    pub(crate) fn write(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        MediaError::ProxyWrite { path: path.into(), source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl ToString) -> Self {
        MediaError::Corrupt { path: path.into(), reason: reason.to_string() }
    }

    /// A picture of `width` × `height`, more pixels than `max_pixels` (setting `storage.max_image_megapixels`): a
    /// decompression bomb, or a genuine giant. The one wording of that refusal, for a still's header and for a
    /// video's frame.
    pub(crate) fn too_many_pixels(
        path: impl Into<PathBuf>,
        picture: Picture,
        width: u32,
        height: u32,
        max_pixels: u64,
    ) -> Self {
        let (claims, file) = match picture {
            Picture::Image => ("the image claims", "image"),
            Picture::VideoFrame => ("a frame of the video claims", "video"),
        };
        let pixels = u64::from(width) * u64::from(height);
        MediaError::TooManyPixels {
            path: path.into(),
            reason: format!(
                "{claims} {width}x{height} pixels ({} megapixels), more than the limit of {} (setting \
                 storage.max_image_megapixels); refused before decoding. Raise the limit if the {file} is genuine",
                megapixels(pixels),
                megapixels(max_pixels)
            ),
        }
    }
}

/// What a refusal for its pixels is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Picture {
    /// A still.
    Image,
    /// A frame of a video.
    VideoFrame,
}

/// Pixels as megapixels for a message: whole, or with one decimal below ten (a small limit set for a test, or
/// a 1.3 MP frame over a 1 MP limit, reads as what it is rather than as "1").
fn megapixels(pixels: u64) -> String {
    if pixels >= 10_000_000 || pixels.is_multiple_of(1_000_000) {
        (pixels / 1_000_000).to_string()
    } else {
        format!("{:.1}", pixels as f64 / 1_000_000.0)
    }
}
