//! Watching a config's root (ADR 0014): how the operator chose to watch each config, which Worker holds its
//! watch (one at a time, by a lease like a work item's), and what that watcher last reported, for `status`,
//! `/metrics` and the page. A watcher never writes the catalogue: what it sees becomes a crawl of the changed
//! folders (`CrawlArgs::folders`), enqueued like any other work.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ports::{DatabaseClock, ServedConfigs};
use crate::{HolderId, QueueError, StorageConfigId, WorkerId};

/// How the operator chose to watch a config's root (`storage_configs.watch`; `config watch` sets it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchChoice {
    /// Events where the root's file system reports changes (local file systems), polling where it does not
    /// (NFS, SMB/CIFS, FUSE, …), judged from the root's file system type.
    #[default]
    Auto,
    /// Events, whatever the file system (the operator knows changes are made on this machine).
    Events,
    /// Polling the folders' mtimes, whatever the file system.
    Polling,
    /// Not watched: only the scheduled crawl finds changes.
    Off,
}

impl WatchChoice {
    /// Every choice, in a stable order.
    pub const ALL: [WatchChoice; 4] = [WatchChoice::Auto, WatchChoice::Events, WatchChoice::Polling, WatchChoice::Off];

    /// The choice as stored and as typed on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            WatchChoice::Auto => "auto",
            WatchChoice::Events => "events",
            WatchChoice::Polling => "polling",
            WatchChoice::Off => "off",
        }
    }
}

impl fmt::Display for WatchChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WatchChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|c| c.as_str() == s).ok_or_else(|| {
            format!("unknown watch choice {s:?}: use one of {}", Self::ALL.map(WatchChoice::as_str).join(", "))
        })
    }
}

/// What a watcher is doing with a config's root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchMode {
    /// Following the file system's change events.
    Events,
    /// Polling the folders' mtimes (a network file system, an overflow, or the operator's choice).
    Polling,
    /// Not watching (the operator's choice, or the root cannot be watched: the note says why).
    Off,
}

impl WatchMode {
    /// Every mode, in a stable order (a metric's label values).
    pub const ALL: [WatchMode; 3] = [WatchMode::Events, WatchMode::Polling, WatchMode::Off];

    /// The mode as stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            WatchMode::Events => "events",
            WatchMode::Polling => "polling",
            WatchMode::Off => "off",
        }
    }
}

impl fmt::Display for WatchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WatchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown watch mode {s:?}: one of {}", Self::ALL.map(WatchMode::as_str).join(", ")))
    }
}

/// A config a Worker may watch: active, served by it, with its root and the operator's choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchTarget {
    /// The config.
    pub config: StorageConfigId,
    /// Its root, as registered.
    pub root: std::path::PathBuf,
    /// How the operator chose to watch it.
    pub choice: WatchChoice,
}

/// What the Worker holding a config's watch reports each time it renews its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchReport {
    /// What it is doing.
    pub mode: WatchMode,
    /// When it last saw a change (by the Worker's clock: shown, never compared), if it has.
    pub last_change_at: Option<DateTime<Utc>>,
    /// Files seen changing and not yet handed to a crawl (still being written, or waiting for the window to
    /// close).
    pub pending_files: u64,
    /// Why the mode is not what was chosen (an overflow, the watch limit, an unreadable root), if it is not.
    pub note: Option<String>,
}

/// A config's watch as stored: who holds it and what it last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchState {
    /// The config.
    pub config: StorageConfigId,
    /// How the operator chose to watch it.
    pub choice: WatchChoice,
    /// The Worker holding its watch, and what it reported; `None` when no Worker holds it now (expired leases
    /// count as none).
    pub held: Option<HeldWatch>,
}

/// A watch held by a Worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldWatch {
    /// The Worker.
    pub worker_id: WorkerId,
    /// Its last report.
    pub report: WatchReport,
    /// When the Worker took the watch (database clock).
    pub since: DateTime<Utc>,
    /// When the lease runs out unless renewed (database clock).
    pub lease_expires_at: DateTime<Utc>,
}

/// A Worker process that may hold watches: its Worker id (shown) and a token it drew when it started, which the
/// lease is keyed by, so that two Workers given the same id are two holders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchHolder {
    worker: WorkerId,
    token: HolderId,
}

impl WatchHolder {
    /// A holder for this process's Worker `worker`, with a token of its own.
    pub fn new(worker: WorkerId) -> Self {
        Self { worker, token: HolderId::new() }
    }

    /// Its Worker id.
    pub fn worker(&self) -> &WorkerId {
        &self.worker
    }

    /// Its token.
    pub fn token(&self) -> HolderId {
        self.token
    }
}

/// The statements watching needs. Unfenced: no attempt makes them; the lease decides which Worker watches.
pub trait WatchStore: DatabaseClock {
    /// The active configs a Worker serving `served` may watch, with their roots and the operator's choices.
    fn watch_targets(&self, served: ServedConfigs)
    -> impl Future<Output = Result<Vec<WatchTarget>, QueueError>> + Send;

    /// Takes or renews `holder`'s watch of `config` until `lease` from now (database clock), storing `report`:
    /// true when `holder` holds it now (it held it, no one did, or the holder's lease ran out). Exactly one of
    /// any number of concurrent callers holds a config's watch at a time, whatever their Worker ids.
    fn hold_watch(
        &self,
        config: StorageConfigId,
        holder: &WatchHolder,
        lease: Duration,
        report: &WatchReport,
    ) -> impl Future<Output = Result<bool, QueueError>> + Send;

    /// Gives `holder`'s watch of `config` up (shutdown, the config no longer served); nothing if it holds none.
    fn release_watch(
        &self,
        config: StorageConfigId,
        holder: &WatchHolder,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;

    /// Every config's watch, for `status`, `/metrics` and the page.
    fn watch_states(&self) -> impl Future<Output = Result<Vec<WatchState>, QueueError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_reads_back_from_its_name_and_an_unknown_one_lists_the_choices() {
        for choice in WatchChoice::ALL {
            assert_eq!(choice.as_str().parse::<WatchChoice>(), Ok(choice));
        }
        let e = "inotify".parse::<WatchChoice>().unwrap_err();
        assert!(e.contains("auto, events, polling, off"), "{e}");
        for mode in WatchMode::ALL {
            assert_eq!(mode.as_str().parse::<WatchMode>(), Ok(mode));
        }
        assert!("inotify".parse::<WatchMode>().unwrap_err().contains("events, polling, off"));
    }

    #[test]
    fn choices_and_modes_are_shown_by_their_names() {
        for choice in WatchChoice::ALL {
            assert_eq!(choice.to_string(), choice.as_str());
        }
        for mode in WatchMode::ALL {
            assert_eq!(mode.to_string(), mode.as_str());
        }
        assert_eq!(WatchMode::Polling.to_string(), "polling");
    }

    #[test]
    fn a_holder_keeps_its_worker_and_a_token_of_its_own() {
        let worker = WorkerId::new("nas-1").unwrap();
        let (one, two) = (WatchHolder::new(worker.clone()), WatchHolder::new(worker.clone()));
        assert_eq!(one.worker(), &worker);
        assert_eq!(one.token(), one.token(), "the same token every time it is asked");
        assert_ne!(one.token(), two.token(), "each holder its own, even of one Worker");
    }
}
