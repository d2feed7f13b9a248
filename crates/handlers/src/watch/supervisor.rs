//! The Worker's supervisor of its watchers (ADR 0014, decision 7): takes the watch of each config it may watch,
//! decides how to watch the configs it won, runs their watchers, renews their watches, and stops what it no
//! longer holds. Nothing it awaits can hold a look up for long: a hung network mount or a watcher that does not
//! stop delays no other config's renewal.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::ports::{ServedConfigs, WatchChoice, WatchHolder, WatchMode, WatchReport, WatchStore, WatchTarget};
use almanac_domain::{QueueError, StorageConfigId, WorkQueue, WorkerId};
use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::mode::{MountKey, decide_below, mount_keys, polled_mount_below, touches};
use super::sentinel::{Guarding, Sentinel};
use super::{ConfigWatcher, WatchIo, WatchSettings, WatchStatus, decide};

/// How long a look waits for the `statfs` calls it started (a local disk answers at once); one that takes longer
/// is picked up at a later look, and no second one is started for its config meanwhile.
const DECIDE_WAIT: Duration = Duration::from_secs(1);

/// How long stopping watchers waits for them to end (enqueuing what they saw) before leaving them to end on
/// their own: a polling pass or the queue may not answer.
const END_WAIT: Duration = Duration::from_secs(5);

/// The note of a watch held while its mode is being decided.
const DECIDING: &str = "deciding between events and polling: reading the root's file system";

/// How a root is watched, and why when it is not what was chosen.
type Decision = (WatchMode, Option<String>);

/// A watcher this Worker runs.
struct Running {
    target: WatchTarget,
    status: WatchStatus,
    stop: CancellationToken,
    task: JoinHandle<()>,
    /// When its watch was last renewed (tokio's clock).
    renewed: Instant,
}

/// What a root's file system says: its type (`statfs`), and a polled file system mounted below it.
type RootFs = (Result<u32, String>, Option<(PathBuf, String)>);

/// A `statfs` of a config's root under way on a blocking thread, for `auto` (at most one per config).
struct Deciding {
    root: PathBuf,
    task: JoinHandle<RootFs>,
}

/// A Worker's watchers: takes the watch of each config it may watch and no other Worker holds, runs a watcher
/// for each it holds, renews them with their reports, and stops a watcher whose watch it lost.
pub struct Watching<S> {
    store: Arc<S>,
    /// This Worker process, as the holder of its watches.
    holder: WatchHolder,
    served: ServedConfigs,
    settings: WatchSettings,
    io: WatchIo,
    running: HashMap<StorageConfigId, Running>,
    /// Configs whose watch it holds without a watcher (the choice is `off`, the root cannot be read, the mode is
    /// being decided): given up like the others.
    idle: HashSet<StorageConfigId>,
    deciding: HashMap<StorageConfigId, Deciding>,
    /// The modes `auto` decided, by config and root (forgotten when the config's choice is no longer `auto`).
    decided: HashMap<(StorageConfigId, PathBuf), Decision>,
    /// The mounts (mount point, file system type) seen at the last look, to see what was mounted or unmounted
    /// since; `None` before the first look, or while they cannot be read.
    mounts: Option<Arc<HashSet<MountKey>>>,
    /// The Worker's proxy root, which its watchers pass over.
    proxy_root: Option<Arc<Path>>,
    /// Hears a watched file system unmounted (`None` when the kernel refused it one).
    sentinel: Option<Arc<Sentinel>>,
}

/// Whether a watcher whose watch was last renewed `elapsed` ago must stop: at two thirds of the lease, so that
/// it has stopped before another Worker can take the watch (a whole lease after the last renewal, by the
/// database's clock).
fn must_stop(elapsed: Duration, lease: Duration) -> bool {
    elapsed >= lease * 2 / 3
}

fn report_of((mode, note): Decision) -> WatchReport {
    WatchReport { mode, last_change_at: None, pending_files: 0, note }
}

impl<S: WatchStore + WorkQueue + 'static> Watching<S> {
    /// The watchers of Worker `worker`, serving `served`.
    pub fn new(store: Arc<S>, worker: WorkerId, served: ServedConfigs, settings: WatchSettings) -> Self {
        let (running, idle, deciding, decided, mounts) = Default::default();
        let holder = WatchHolder::new(worker);
        let (io, proxy_root) = (WatchIo::default(), None);
        let sentinel = Sentinel::new()
            .map_err(|e| {
                warn!(event = "watch_sentinel_refused", error = %e,
                      "the kernel refused an inotify instance to hear watched file systems unmounted: a disk unmounted \
                       and mounted again between two looks goes unseen until the next whole crawl; raise \
                       fs.inotify.max_user_instances")
            })
            .ok();
        Self { store, holder, served, settings, io, running, idle, deciding, decided, mounts, proxy_root, sentinel }
    }

    /// The same, making `io`'s calls on the file system (a test's, to make one hang or fail).
    pub fn with_io(self, io: WatchIo) -> Self {
        Self { io, ..self }
    }

    /// The same, its watchers passing over the Worker's proxy root (and everything beneath it) where it is
    /// mounted inside a library, as the crawl does.
    pub fn avoiding(self, proxy_root: &Path) -> Self {
        Self { proxy_root: Some(proxy_root.into()), ..self }
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
        // All are told to stop at once, and waited for together.
        for running in self.running.values() {
            running.stop.cancel();
        }
        let deadline = Instant::now() + END_WAIT;
        let configs: Vec<StorageConfigId> = self.running.keys().chain(&self.idle).copied().collect();
        for config in configs {
            self.end_by(config, true, deadline).await;
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

    /// One look: stops the watchers of configs no longer to be watched (or whose root or choice changed) and
    /// those that ended on their own, takes or renews the watch of every config this Worker may watch (a config
    /// whose mode is not decided yet is taken reporting so), then decides the mode of those it won and starts
    /// their watchers.
    pub async fn look(&mut self) -> Result<(), QueueError> {
        let targets = self.store.watch_targets(self.served).await?;
        self.end_gone(&targets).await;
        self.end_remounted().await;
        let dead = self.end_dead().await;
        // Reports carry the database's time of the last change (the Worker's clock is never stored).
        let now = self.store.db_now().await.ok();
        let mut won = Vec::new();
        for target in targets.into_iter().filter(|t| !dead.contains(&t.config)) {
            let report = match (self.running.get(&target.config), self.decision(&target)) {
                (Some(running), _) => running.status.report(now),
                (None, Some(decision)) => report_of(decision),
                (None, None) => report_of((WatchMode::Off, Some(DECIDING.into()))),
            };
            let held = self.store.hold_watch(target.config, &self.holder, self.settings.lease, &report).await?;
            self.mark_idle(target.config, held && report.mode == WatchMode::Off);
            match (held, self.running.get_mut(&target.config)) {
                (true, Some(running)) => running.renewed = Instant::now(),
                (true, None) => won.push(target),
                (false, Some(_)) => {
                    info!(event = "watch_lost", config = %target.config, "another Worker holds the config's watch now");
                    self.end(target.config, false).await;
                }
                (false, None) => {}
            }
        }
        self.start_won(won, now).await
    }

    /// Marks a config as held without a watcher, or not: never one whose watcher runs.
    fn mark_idle(&mut self, config: StorageConfigId, idle: bool) {
        if idle {
            debug_assert!(!self.running.contains_key(&config), "a config whose watcher runs is not idle");
            self.idle.insert(config);
        } else {
            self.idle.remove(&config);
        }
    }

    /// Starts the watchers of the configs whose watch this look took (or holds without a watcher), deciding
    /// their mode first where it is not decided yet; a decision reached now is reported at once.
    async fn start_won(&mut self, won: Vec<WatchTarget>, now: Option<DateTime<Utc>>) -> Result<(), QueueError> {
        let until = Instant::now() + DECIDE_WAIT;
        for target in won {
            let (decision, new) = match self.decision(&target) {
                Some(decision) => (Some(decision), false),
                None => (self.answer(&target, until).await, true),
            };
            let Some(decision) = decision else { continue };
            let config = target.config;
            if decision.0 != WatchMode::Off {
                self.start(target, decision.clone());
            }
            if new {
                let report = self.running.get(&config).map_or_else(|| report_of(decision), |r| r.status.report(now));
                let idle = report.mode == WatchMode::Off;
                if self.store.hold_watch(config, &self.holder, self.settings.lease, &report).await? {
                    self.mark_idle(config, idle);
                } else {
                    self.end(config, false).await;
                }
            }
        }
        Ok(())
    }

    /// The mode of a target already known: its choice, or what `auto` decided for its root.
    fn decision(&self, target: &WatchTarget) -> Option<Decision> {
        match target.choice {
            WatchChoice::Auto => self.decided.get(&(target.config, target.root.clone())).cloned(),
            choice => Some(decide(choice, Ok(0))),
        }
    }

    /// What `auto` decides for a target's root: starts reading its file system and waits for it until `until`;
    /// a read started at an earlier look is not started again nor waited for. `None` while it has not answered
    /// (it is looked at again at the next look).
    async fn answer(&mut self, target: &WatchTarget, until: Instant) -> Option<Decision> {
        let (config, root) = (target.config, target.root.clone());
        let (mut deciding, until) = match self.deciding.remove(&config) {
            Some(d) if d.root == root => (d, Instant::now()),
            // None, or one of a root no longer the config's (left to end on its own).
            _ => {
                let (fs_type, mountinfo, at) = (self.io.fs_type.clone(), self.io.mountinfo.clone(), root.clone());
                let task = tokio::task::spawn_blocking(move || {
                    let f_type = fs_type(&at);
                    let below = if f_type.is_ok() { polled_mount_below(&at, mountinfo().as_deref()) } else { None };
                    (f_type, below)
                });
                (Deciding { root: root.clone(), task }, until)
            }
        };
        let (f_type, below) = match tokio::time::timeout_at(until, &mut deciding.task).await {
            Ok(Ok(root_fs)) => root_fs,
            Ok(Err(e)) => (Err(format!("reading the root's file system failed: {e}")), None),
            Err(_) => {
                self.deciding.insert(config, deciding);
                return None;
            }
        };
        let read = f_type.is_ok();
        let decision = decide_below(WatchChoice::Auto, f_type, below);
        // A root that could not be read is read again at the next look.
        if read {
            self.decided.insert((config, root), decision.clone());
        }
        Some(decision)
    }

    fn start(&mut self, target: WatchTarget, (mode, note): Decision) {
        info!(event = "watch_started", config = %target.config, mode = %mode, root = %target.root.display(),
              "watching the config's root");
        let watch =
            ConfigWatcher::new(self.store.clone(), target.config, target.root.clone(), self.settings, (mode, note))
                .with_io(self.io.clone())
                .avoiding(self.proxy_root.clone())
                .guarded_by(self.sentinel.clone().map(|s| Guarding::new(s, self.mounts.clone())));
        let (status, stop) = (watch.status_handle(), CancellationToken::new());
        let task = tokio::spawn(watch.run(stop.clone()));
        self.idle.remove(&target.config);
        self.running.insert(target.config, Running { target, status, stop, task, renewed: Instant::now() });
    }

    /// Stops the watchers of configs no longer to be watched, or whose root or choice changed, and forgets what
    /// was decided for configs gone.
    async fn end_gone(&mut self, targets: &[WatchTarget]) {
        let listed = |c: &StorageConfigId| targets.iter().any(|t| t.config == *c);
        let idle_gone = self.idle.iter().filter(|c| !listed(c));
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
        self.deciding.retain(|c, _| listed(c));
        self.decided.retain(|(c, root), _| {
            targets.iter().any(|t| (t.config, &t.root, t.choice) == (*c, root, WatchChoice::Auto))
        });
    }

    /// Stops the watchers of the roots that a file system mounted or unmounted since the last look touches (on
    /// the root, beneath it, or on a folder holding it), and of those whose file system (or one beneath) the
    /// sentinel heard unmounted, and forgets what `auto` decided for them: the watches of a folder a share was
    /// mounted over see nothing written to the share, a share mounted beneath a root raises no event for other
    /// machines' writes, and the watches on a file system unmounted are gone, even if it was mounted again before
    /// this look. Their watches stay held; the look decides their mode again and starts them anew (a whole-root
    /// crawl catches up).
    async fn end_remounted(&mut self) {
        let mut touched: HashMap<StorageConfigId, (PathBuf, bool)> =
            self.mount_table_changes().into_iter().map(|(config, point)| (config, (point, false))).collect();
        let lost = self.sentinel.as_ref().map(|s| s.lost()).unwrap_or_default();
        for (config, folder) in lost.into_iter().filter(|(c, _)| self.running.contains_key(c)) {
            touched.entry(config).or_insert((folder, true));
        }
        for (config, (point, heard)) in touched {
            if heard {
                info!(event = "watch_remounted", config = %config, mount = %point.display(),
                      "the watches on the root's file system (or one beneath it) were lost, as an unmount removes \
                       them: watching it anew");
            } else {
                info!(event = "watch_remounted", config = %config, mount = %point.display(),
                      "a file system was mounted or unmounted on, above or beneath the root: watching it anew");
            }
            self.decided.retain(|(c, _), _| *c != config);
            self.deciding.remove(&config);
            if self.running.contains_key(&config) {
                self.end(config, false).await;
            }
        }
    }

    /// The configs (running, or whose mode `auto` decided) whose root a mount made or gone since the last look
    /// touches, each with that mount's point.
    fn mount_table_changes(&mut self) -> HashMap<StorageConfigId, PathBuf> {
        // `/proc/self/mountinfo` never waits on a mount.
        let Some(now) = (self.io.mountinfo)().map(|text| Arc::new(mount_keys(&text))) else {
            return HashMap::new();
        };
        let Some(before) = self.mounts.replace(now.clone()) else { return HashMap::new() };
        let changed: Vec<&PathBuf> = now.symmetric_difference(&before).map(|(point, _, _)| point).collect();
        if changed.is_empty() {
            return HashMap::new();
        }
        let roots = self.running.iter().map(|(c, r)| (*c, r.target.root.clone()));
        let decided = self.decided.keys().cloned();
        roots
            .chain(decided)
            .filter_map(|(config, root)| changed.iter().find(|p| touches(p, &root)).map(|p| (config, (*p).clone())))
            .collect()
    }

    /// Ends the watchers that ended on their own (a polling pass that failed) and gives their watches up, to be
    /// taken again (by this Worker, at its next look, if no other takes it first). Answers their configs.
    async fn end_dead(&mut self) -> HashSet<StorageConfigId> {
        let dead: HashSet<StorageConfigId> =
            self.running.iter().filter(|(_, r)| r.task.is_finished()).map(|(c, _)| *c).collect();
        for config in &dead {
            warn!(event = "watch_failed", config = %config,
                  "the config's watcher ended on its own: its watch is given up, to be taken again");
            self.end(*config, true).await;
        }
        dead
    }

    /// Stops a config's watcher (what it saw is enqueued first) and, when `release`, gives its watch up.
    async fn end(&mut self, config: StorageConfigId, release: bool) {
        self.end_by(config, release, Instant::now() + END_WAIT).await;
    }

    /// [`Watching::end`], waiting for the watcher until `deadline` at most: one that has not ended by then is
    /// left to end on its own (it was told to stop, and its polling pass looks at that between folders).
    async fn end_by(&mut self, config: StorageConfigId, release: bool, deadline: Instant) {
        if let Some(mut running) = self.running.remove(&config) {
            running.stop.cancel();
            if tokio::time::timeout_at(deadline, &mut running.task).await.is_err() {
                warn!(event = "watch_failed", config = %config,
                      "the config's watcher did not stop in time (its polling pass or the queue does not answer): \
                       left to end on its own");
            }
        } else if !self.idle.remove(&config) {
            return;
        }
        if release && let Err(e) = self.store.release_watch(config, &self.holder).await {
            warn!(event = "watch_failed", config = %config, error = %e,
                  "the watch could not be given up; it lapses at the end of its lease");
        }
    }

    /// Stops the watchers whose watch was not renewed within two thirds of a lease: another Worker may take it
    /// once the lease has run out.
    async fn stop_unrenewed(&mut self) {
        let lease = self.settings.lease;
        let lapsed: Vec<StorageConfigId> =
            self.running.iter().filter(|(_, r)| must_stop(r.renewed.elapsed(), lease)).map(|(c, _)| *c).collect();
        for config in lapsed {
            warn!(event = "watch_lost", config = %config, "the config's watch could not be renewed in time");
            self.end(config, false).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watcher_stops_at_two_thirds_of_its_lease_without_renewal() {
        let lease = Duration::from_secs(30);
        assert!(!must_stop(Duration::from_secs(10), lease), "one look late is no reason");
        assert!(!must_stop(Duration::from_millis(19_999), lease));
        assert!(must_stop(Duration::from_secs(20), lease), "stopped ten seconds before another can take it");
    }
}
