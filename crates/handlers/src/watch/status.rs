//! A watcher's status, shared with its Worker, which reports it (`status`, the page, `/metrics`).

use std::sync::{Arc, Mutex};

use almanac_domain::ports::{WatchMode, WatchReport};
use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// What a watcher is doing, for its Worker's reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Status {
    pub mode: WatchMode,
    /// Why the mode is not the one chosen, if it is not.
    pub note: Option<String>,
    /// When it last saw a change (tokio's clock).
    pub last_change: Option<Instant>,
    /// Files seen changing and not yet handed to a crawl.
    pub pending_files: u64,
    /// Whether it watches: every folder's watch is set, or the polling baseline taken.
    pub ready: bool,
}

/// A watcher's status, as its Worker reports it.
#[derive(Debug, Clone)]
pub struct WatchStatus(pub(super) Arc<Mutex<Status>>);

impl WatchStatus {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Status> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the watcher is doing now.
    pub fn mode(&self) -> WatchMode {
        self.lock().mode
    }

    /// Whether it watches now: every folder's watch is set, or the polling baseline taken (a change made before
    /// may be missed, and is left to the scheduled crawl).
    pub fn is_ready(&self) -> bool {
        self.lock().ready
    }

    /// The report its Worker stores, the last change dated by the database's clock `now` (`None`: not dated).
    pub fn report(&self, now: Option<DateTime<Utc>>) -> WatchReport {
        let status = self.lock().clone();
        let last_change_at = status
            .last_change
            .zip(now)
            .map(|(at, now)| now - chrono::Duration::from_std(at.elapsed()).unwrap_or(chrono::Duration::zero()));
        WatchReport { mode: status.mode, last_change_at, pending_files: status.pending_files, note: status.note }
    }
}
