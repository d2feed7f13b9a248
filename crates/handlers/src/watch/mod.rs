//! Watching libraries (ADR 0014): each served, active config's root is watched by one Worker at a time (the
//! one holding its watch, a lease in the store), by the file system's change events where it reports them and
//! by polling the folders' mtimes where it does not. What a watcher sees becomes a crawl of the changed folders,
//! enqueued like any other work: a watcher never writes the catalogue.
//!
//! `mode.rs` decides events or polling, `events.rs` reads an event, `poll.rs` polls, `window.rs` coalesces,
//! `watcher.rs` is one config's watcher, and this file the Worker's supervisor of its watchers.

mod events;
mod mode;
mod poll;
mod watcher;
mod window;

pub use events::{Handled, handle};
pub use mode::{decide, fs_type, polled_fs};
pub use poll::FolderTree;
pub use watcher::{ConfigWatcher, Events, WatchStatus};
pub use window::{Batch, MAX_CLOSED, Window};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::ports::{ServedConfigs, WatchChoice, WatchMode, WatchReport, WatchStore, WatchTarget};
use almanac_domain::{QueueError, StorageConfigId, WorkQueue, WorkerId};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

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
    /// The Worker's quiet hours (`schedule.quiet_hours`).
    pub quiet_hours: Option<QuietHours>,
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
            quiet_hours: None,
        }
    }
}

/// How long deciding a root's mode may take (`statfs` of a hung network mount blocks).
const STATFS_LIMIT: Duration = Duration::from_secs(10);

/// A watcher this Worker runs.
struct Running {
    target: WatchTarget,
    status: WatchStatus,
    stop: CancellationToken,
    task: JoinHandle<()>,
    /// When its watch was last renewed (tokio's clock).
    renewed: Instant,
}

/// A Worker's watchers: takes the watch of each config it may watch and no other Worker holds, runs a watcher
/// for each it holds, renews them with their reports, and stops a watcher whose watch it lost.
pub struct Watching<S> {
    store: Arc<S>,
    worker: WorkerId,
    served: ServedConfigs,
    settings: WatchSettings,
    running: HashMap<StorageConfigId, Running>,
    /// Configs whose watch it holds without a watcher (the choice is `off`, or the root cannot be read): given up
    /// like the others.
    idle: HashSet<StorageConfigId>,
}

impl<S: WatchStore + WorkQueue + 'static> Watching<S> {
    /// The watchers of Worker `worker`, serving `served`.
    pub fn new(store: Arc<S>, worker: WorkerId, served: ServedConfigs, settings: WatchSettings) -> Self {
        Self { store, worker, served, settings, running: HashMap::new(), idle: HashSet::new() }
    }

    /// Looks every third of the lease until `stop`, then stops every watcher and gives their watches up.
    pub async fn run(mut self, stop: CancellationToken) {
        loop {
            if let Err(e) = self.look().await {
                warn!(event = "watch_failed", error = %e, "the watches could not be renewed; trying again");
            }
            self.stop_unrenewed().await;
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(self.settings.lease / 3) => {}
            }
        }
        let configs: Vec<StorageConfigId> = self.running.keys().chain(&self.idle).copied().collect();
        for config in configs {
            self.end(config, true).await;
        }
    }

    /// The configs whose watchers run now.
    pub fn watching(&self) -> Vec<StorageConfigId> {
        self.running.keys().copied().collect()
    }

    /// The status of this Worker's watcher of `config`, if it runs one.
    pub fn status(&self, config: StorageConfigId) -> Option<WatchStatus> {
        self.running.get(&config).map(|r| r.status.clone())
    }

    /// One look: stops the watchers of configs no longer to be watched (or whose root or choice changed), then
    /// takes or renews the watch of every config this Worker may watch, starting or stopping its watcher.
    pub async fn look(&mut self) -> Result<(), QueueError> {
        let targets = self.store.watch_targets(self.served).await?;
        let idle_gone = self.idle.iter().filter(|c| !targets.iter().any(|t| t.config == **c));
        let gone: Vec<StorageConfigId> = self
            .running
            .iter()
            .filter(|(_, r)| !targets.contains(&r.target))
            .map(|(c, _)| *c)
            .chain(idle_gone.copied())
            .collect();
        for config in gone {
            self.end(config, true).await;
        }
        // Reports carry the database's time of the last change (the Worker's clock is never stored).
        let now = self.store.db_now().await.ok();
        for target in targets {
            let report = match self.running.get(&target.config) {
                Some(running) => running.status.report(now),
                None => initial_report(&target).await,
            };
            let held = self.store.hold_watch(target.config, &self.worker, self.settings.lease, &report).await?;
            if held && report.mode == WatchMode::Off {
                self.idle.insert(target.config);
            } else {
                self.idle.remove(&target.config);
            }
            match (held, self.running.get_mut(&target.config)) {
                (true, Some(running)) => running.renewed = Instant::now(),
                (true, None) if report.mode != WatchMode::Off => self.start(target, report),
                (false, Some(_)) => {
                    info!(event = "watch_lost", config = %target.config, "another Worker holds the config's watch now");
                    self.end(target.config, false).await;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn start(&mut self, target: WatchTarget, report: WatchReport) {
        info!(event = "watch_started", config = %target.config, mode = %report.mode, root = %target.root.display(),
              "watching the config's root");
        let mode = (report.mode, report.note);
        let watch = ConfigWatcher::new(self.store.clone(), target.config, target.root.clone(), self.settings, mode);
        let (status, stop) = (watch.status_handle(), CancellationToken::new());
        let task = tokio::spawn(watch.run(stop.clone()));
        self.running.insert(target.config, Running { target, status, stop, task, renewed: Instant::now() });
    }

    /// Stops a config's watcher (what it saw is enqueued first) and, when `release`, gives its watch up.
    async fn end(&mut self, config: StorageConfigId, release: bool) {
        if let Some(running) = self.running.remove(&config) {
            running.stop.cancel();
            let _ = running.task.await;
        } else if !self.idle.remove(&config) {
            return;
        }
        if release && let Err(e) = self.store.release_watch(config, &self.worker).await {
            warn!(event = "watch_failed", config = %config, error = %e,
                  "the watch could not be given up; it lapses at the end of its lease");
        }
    }

    /// Stops the watchers whose watch was not renewed within a lease: another Worker may hold it by now.
    async fn stop_unrenewed(&mut self) {
        let lease = self.settings.lease;
        let lapsed: Vec<StorageConfigId> =
            self.running.iter().filter(|(_, r)| r.renewed.elapsed() >= lease).map(|(c, _)| *c).collect();
        for config in lapsed {
            warn!(event = "watch_lost", config = %config, "the config's watch could not be renewed within its lease");
            self.end(config, false).await;
        }
    }
}

/// The report of a config not watched here yet: the mode its choice and root's file system give.
async fn initial_report(target: &WatchTarget) -> WatchReport {
    let (mode, note) = match target.choice {
        WatchChoice::Auto => {
            let root = target.root.clone();
            let f_type =
                match tokio::time::timeout(STATFS_LIMIT, tokio::task::spawn_blocking(move || fs_type(&root))).await {
                    Ok(Ok(f_type)) => f_type,
                    Ok(Err(e)) => Err(format!("cannot read the root's file system: {e}")),
                    Err(_) => Err(format!("the root's file system did not answer within {STATFS_LIMIT:?}")),
                };
            decide(target.choice, f_type)
        }
        choice => decide(choice, Ok(0)),
    };
    WatchReport { mode, last_change_at: None, pending_files: 0, note }
}
