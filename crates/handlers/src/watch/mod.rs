//! Watching libraries (ADR 0014): each served, active config's root is watched by one Worker at a time (the
//! one holding its watch, a lease in the store), by the file system's change events where it reports them and
//! by polling the folders' mtimes where it does not. What a watcher sees becomes a crawl of the changed folders,
//! enqueued like any other work: a watcher never writes the catalogue.
//!
//! `mode.rs` decides events or polling, `tree.rs` sets the watches, `events.rs` reads an event, `exports.rs`
//! tells whether a file seen closed may be read at once, `poll.rs` polls, `window.rs` coalesces, `watcher.rs`
//! is one config's watcher, `sentinel.rs` hears a watched file system unmounted, and `supervisor.rs` the
//! Worker's supervisor of its watchers.

mod events;
mod exports;
mod mode;
mod poll;
mod sentinel;
mod status;
mod supervisor;
mod tree;
mod watcher;
mod window;

pub use events::{Found, Handled, appeared_folder, handle};
pub use exports::{EXPORT_LISTS, export_over, exported, exported_paths};
pub use mode::{decide, fs_type, mountinfo, polled_fs};
pub use poll::FolderTree;
pub use status::WatchStatus;
pub use supervisor::Watching;
pub use tree::WatchedTree;
pub use watcher::{ConfigWatcher, Events};
pub use window::{Batch, MAX_CLOSED, Window};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::QuietHours;

/// Whether watched changes ingest inside the quiet hours (`watch.in_quiet_hours`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InQuietHours {
    /// They ingest: quiet hours hold scheduled work only.
    #[default]
    Ingest,
    /// Their crawls wait for the end of the window.
    Wait,
}

impl InQuietHours {
    /// Every value, as the setting names them.
    pub const ALL: [InQuietHours; 2] = [InQuietHours::Ingest, InQuietHours::Wait];

    /// The setting's value.
    pub const fn name(self) -> &'static str {
        match self {
            InQuietHours::Ingest => "ingest",
            InQuietHours::Wait => "wait",
        }
    }

    /// Reads the setting's value.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == text)
    }
}

/// The watchers' settings (`watch.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSettings {
    /// A polled config's folders are stat'ed this often (default one minute).
    pub poll_interval: Duration,
    /// A window of changes closes when no change came for this long (default 1 s)…
    pub debounce: Duration,
    /// … or this long after its first change (default 2 s): photos synced half a second apart still appear
    /// within seconds. While the crawl enqueued last is still queued, a closed window waits for it to start.
    pub max_delay: Duration,
    /// A watch is held this long unless renewed; it is renewed every third of it (default 30 s).
    pub lease: Duration,
    /// Whether watched changes ingest inside the quiet hours.
    pub in_quiet_hours: InQuietHours,
    /// Whether a file seen closed after writing (and no longer open for writing) is read at once (default), or
    /// waits for the settle time like any other, as it always does in a library this machine exports over NFS.
    pub trust_closed_files: bool,
    /// The Worker's quiet hours (`schedule.quiet_hours`).
    pub quiet_hours: Option<QuietHours>,
    /// The crawl's settle time (`storage.settle_time`): a file seen being written has its folder crawled once no
    /// write came for this long (and the debounce), or when it is seen closed.
    pub settle_time: Duration,
}

impl WatchSettings {
    /// The default `poll_interval`.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(60);
    /// The default `debounce`.
    pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(1);
    /// The default `max_delay`.
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(2);
    /// The default `lease`.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            poll_interval: Self::DEFAULT_POLL_INTERVAL,
            debounce: Self::DEFAULT_DEBOUNCE,
            max_delay: Self::DEFAULT_MAX_DELAY,
            lease: Self::DEFAULT_LEASE,
            in_quiet_hours: InQuietHours::default(),
            trust_closed_files: true,
            quiet_hours: None,
            settle_time: crate::CrawlSettings::DEFAULT_SETTLE_TIME,
        }
    }
}

/// Reads a root's file system type (`statfs`'s `f_type`), or says why it could not. Blocking: a hung network
/// mount may block it for good.
pub type FsTypeFn = dyn Fn(&Path) -> Result<u32, String> + Send + Sync;

/// This process's mounts, as `/proc/self/mountinfo` lists them, or `None` when they cannot be read.
pub type MountinfoFn = dyn Fn() -> Option<String> + Send + Sync;

/// The NFS export of this machine through which a root may be written, if any. Blocking.
pub type ExportsFn = dyn Fn(&Path) -> Option<PathBuf> + Send + Sync;

/// One polling pass over a root, the folder whose identity is given (the proxy root) passed over: the baseline
/// when no tree is given, else the pass over it, answering the tree and the folders changed. Blocking; it returns
/// soon after the token is cancelled.
pub type PassFn = dyn Fn(&Path, Option<(u64, u64)>, Option<FolderTree>, &CancellationToken) -> (FolderTree, Vec<String>)
    + Send
    + Sync;

/// The blocking calls watching makes on the file system, each run on a blocking thread. The defaults are the
/// real ones ([`fs_type`], [`FolderTree`]); a test replaces one to make it hang or fail.
#[derive(Clone)]
pub struct WatchIo {
    /// Reads a root's file system type, for `auto`.
    pub fs_type: Arc<FsTypeFn>,
    /// Polls a root's folders.
    pub pass: Arc<PassFn>,
    /// Reads this machine's NFS exports, for a root watched by events.
    pub exports: Arc<ExportsFn>,
    /// Reads this process's mounts: for `auto`, and to see a file system mounted on, above or beneath a root.
    pub mountinfo: Arc<MountinfoFn>,
}

impl Default for WatchIo {
    fn default() -> Self {
        Self {
            fs_type: Arc::new(fs_type),
            pass: Arc::new(pass),
            exports: Arc::new(|root| exported(root, &EXPORT_LISTS)),
            mountinfo: Arc::new(mountinfo),
        }
    }
}

impl std::fmt::Debug for WatchIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchIo")
    }
}

/// The real polling pass.
fn pass(
    root: &Path,
    avoid: Option<(u64, u64)>,
    tree: Option<FolderTree>,
    stop: &CancellationToken,
) -> (FolderTree, Vec<String>) {
    match tree {
        None => (FolderTree::baseline(root, avoid, stop), Vec::new()),
        Some(mut tree) => {
            let changed = tree.pass(root, avoid, stop);
            (tree, changed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_quiet_hours_reads_the_names_the_guide_gives_and_nothing_else() {
        assert_eq!(InQuietHours::ALL.map(InQuietHours::name), ["ingest", "wait"]);
        for value in InQuietHours::ALL {
            assert_eq!(InQuietHours::parse(value.name()), Some(value));
        }
        for other in ["", "Wait", "ingest ", "hold"] {
            assert_eq!(InQuietHours::parse(other), None, "{other:?}");
        }
    }

    /// The file system's functions cannot show themselves: the settings that hold them show their name.
    #[test]
    fn the_watchers_io_shows_as_its_name() {
        assert_eq!(format!("{:?}", WatchIo::default()), "WatchIo");
    }
}
