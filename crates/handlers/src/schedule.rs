//! The scheduler: every Worker runs one; it makes sure the periodic items exist, exactly once per period
//! however many Workers run (the `schedule_periods` insert that wins enqueues). In the Worker's quiet hours it
//! enqueues nothing and holds the scheduled items already queued until the window ends (`quiet.rs`). A config
//! whose root a Worker watches (ADR 0014) is crawled whole less often: the crawl is then only the safety net.

mod quiet;

pub use quiet::QuietHours;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use almanac_domain::{
    DedupKey, NewWorkItem, QueueError, Scope, StorageConfigId, WorkKind,
    ports::{CatalogueError, QueueMaintenance, ServedConfigs, WatchMode, WatchStore},
};
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

const DAY: Duration = Duration::from_secs(86_400);

/// Why the scheduler could not look this time (it tries again at its next tick).
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The database's clock could not be read.
    #[error(transparent)]
    Clock(#[from] CatalogueError),
    /// The queue did not answer.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// The scheduler's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleSettings {
    /// A crawl per served active config every this long (default 4 h).
    pub crawl_interval: Duration,
    /// A crawl of the whole root every this long instead, for a config whose watch a Worker holds with events
    /// or polling (default 24 h): the watcher finds changes sooner; this crawl is the safety net.
    pub watched_crawl_interval: Duration,
    /// How often the scheduler looks (default one minute).
    pub tick: Duration,
    /// A daily window in which no scheduled work starts (default none).
    pub quiet_hours: Option<QuietHours>,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        Self {
            crawl_interval: Duration::from_secs(4 * 3600),
            watched_crawl_interval: DAY,
            tick: Duration::from_secs(60),
            quiet_hours: None,
        }
    }
}

/// The period number of `at` for an interval: whole intervals since the epoch.
pub fn period(at: DateTime<Utc>, interval: Duration) -> i64 {
    at.timestamp().div_euclid(i64::try_from(interval.as_secs().max(1)).unwrap_or(i64::MAX))
}

/// The periodic work due at `now` for these configs, of which those in `watched` have their roots watched
/// (since when its holder took the watch): (schedule key, item). A watched config's crawl has periods of
/// `watched_crawl_interval` (its own keys), the others' of `crawl_interval`. A watch taken in the current
/// period has its whole-root crawl already: its watcher enqueues one when it becomes ready (ADR 0014), so
/// that config's crawl is due from the next period (a config that becomes watched is not crawled twice).
pub fn due(
    now: DateTime<Utc>,
    configs: &[StorageConfigId],
    watched: &HashMap<StorageConfigId, DateTime<Utc>>,
    settings: ScheduleSettings,
) -> Vec<(String, NewWorkItem)> {
    let day = period(now, DAY);
    let crawl_key = |c: &StorageConfigId| match watched.get(c) {
        Some(since) => {
            let current = period(now, settings.watched_crawl_interval);
            (period(*since, settings.watched_crawl_interval) < current).then(|| format!("crawl:{c}:watched:{current}"))
        }
        None => Some(format!("crawl:{c}:{}", period(now, settings.crawl_interval))),
    };
    let item = |kind: WorkKind, scope: Scope| {
        NewWorkItem::new(kind, scope).expect("kinds get their scopes").with_dedup_key(DedupKey::for_work(kind, scope))
    };
    let mut out = Vec::new();
    for c in configs {
        if let Some(key) = crawl_key(c) {
            out.push((key, item(WorkKind::Crawl, Scope::Config(*c))));
        }
        out.push((format!("purge:{c}:{day}"), item(WorkKind::Purge, Scope::Config(*c))));
    }
    for kind in [WorkKind::ProxySweep, WorkKind::TokenCleanup, WorkKind::WorkItemRetention] {
        out.push((format!("{kind}:{day}"), item(kind, Scope::Unscoped)));
    }
    out
}

/// Ensures the periodic items of this Worker's served configs exist.
pub struct Scheduler<M> {
    store: Arc<M>,
    served: ServedConfigs,
    settings: ScheduleSettings,
    /// Whether the last look was inside the quiet hours (to log their start and end once).
    quiet: AtomicBool,
}

impl<M: QueueMaintenance + WatchStore> Scheduler<M> {
    /// A scheduler for the configs a Worker serves.
    pub fn new(store: Arc<M>, served: ServedConfigs, settings: ScheduleSettings) -> Self {
        Self { store, served, settings, quiet: AtomicBool::new(false) }
    }

    /// One look: enqueue what is due and not yet enqueued for its period (in quiet hours: hold what is queued
    /// instead); cancel queued items of inactive configs. Returns how many items this call enqueued.
    pub async fn tick(&self) -> Result<usize, ScheduleError> {
        self.look().await.map(|(enqueued, _)| enqueued)
    }

    /// [`Scheduler::tick`], answering also the database's time it looked at.
    async fn look(&self) -> Result<(usize, DateTime<Utc>), ScheduleError> {
        let now = self.store.db_now().await?;
        let configs = self.store.served_configs(self.served).await?;
        let quiet_until = self.settings.quiet_hours.and_then(|q| q.ends(now));
        let enqueued = match quiet_until {
            Some(until) => {
                self.hold(&configs, until).await?;
                Vec::new()
            }
            None => {
                if self.quiet.swap(false, Ordering::Relaxed) {
                    info!(event = "quiet_hours_ended", "quiet hours ended: scheduled work runs again");
                }
                let watched = self.watched().await?;
                // One batch for every config (thousands of configs are two statements, not thousands).
                self.store.enqueue_once(&due(now, &configs, &watched, self.settings)).await?
            }
        };
        for key in &enqueued {
            info!(event = "scheduled", key, "periodic work enqueued");
        }
        // Deactivating a config cancels its queue already; this catches work enqueued for it since.
        let cancelled = self.store.cancel_queued_of_inactive().await?;
        tracing::debug!(event = "cancelled_inactive", cancelled, "queued work of inactive storage configs cancelled");
        Ok((enqueued.len(), now))
    }

    /// The configs whose watch a Worker holds now (unexpired), following changes by events or polling, and
    /// since when that Worker holds it.
    async fn watched(&self) -> Result<HashMap<StorageConfigId, DateTime<Utc>>, ScheduleError> {
        let states = self.store.watch_states().await?;
        let following = |s: &almanac_domain::ports::WatchState| {
            s.held.as_ref().filter(|h| matches!(h.report.mode, WatchMode::Events | WatchMode::Polling)).map(|h| h.since)
        };
        Ok(states.iter().filter_map(|s| following(s).map(|since| (s.config, since))).collect())
    }

    /// In quiet hours: the scheduled items queued (retries included) wait until `until`.
    async fn hold(&self, configs: &[StorageConfigId], until: DateTime<Utc>) -> Result<(), ScheduleError> {
        let held = self.store.defer_scheduled(configs, until).await?;
        if !self.quiet.swap(true, Ordering::Relaxed) {
            info!(event = "quiet_hours_began", %until, held, "quiet hours: no scheduled work starts until they end");
        } else if held > 0 {
            info!(event = "scheduled_work_held", %until, held, "scheduled work queued in quiet hours waits for their end");
        }
        Ok(())
    }

    /// How long to wait after a look at `now`: a tick, or less when quiet hours begin sooner (so that they
    /// hold from their first second, not from the next tick).
    fn wait_after(&self, now: Option<DateTime<Utc>>) -> Duration {
        let until_quiet =
            self.settings.quiet_hours.zip(now).and_then(|(q, now)| (q.next_start(now) - now).to_std().ok());
        until_quiet.map_or(self.settings.tick, |d| d.min(self.settings.tick))
    }

    /// Ticks until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            let now = match self.look().await {
                Ok((_, now)) => Some(now),
                Err(e) => {
                    warn!(event = "schedule_failed", error = %e, "the scheduler could not look; trying again at the next tick");
                    None
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.wait_after(now)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn periods_are_whole_intervals_since_the_epoch() {
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 3, 59, 59).unwrap();
        let four_hours = Duration::from_secs(4 * 3600);
        assert_eq!(period(at, four_hours) + 1, period(at + chrono::Duration::seconds(1), four_hours));
        assert_eq!(period(at, DAY), period(at - chrono::Duration::hours(3), DAY));
        assert_eq!(period(Utc.timestamp_opt(0, 0).unwrap(), DAY), 0);
    }

    #[test]
    fn due_work_is_a_crawl_and_purge_per_config_and_three_daily_chores() {
        let configs = [StorageConfigId::new(), StorageConfigId::new()];
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        let work = due(at, &configs, &HashMap::new(), ScheduleSettings::default());
        let kinds: Vec<WorkKind> = work.iter().map(|(_, i)| i.kind()).collect();
        assert_eq!(kinds.iter().filter(|k| **k == WorkKind::Crawl).count(), 2);
        assert_eq!(kinds.iter().filter(|k| **k == WorkKind::Purge).count(), 2);
        for k in [WorkKind::ProxySweep, WorkKind::TokenCleanup, WorkKind::WorkItemRetention] {
            assert_eq!(kinds.iter().filter(|x| **x == k).count(), 1);
        }
        let keys: std::collections::HashSet<&str> = work.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys.len(), work.len(), "every key names one item");
        assert!(work[0].0.starts_with(&format!("crawl:{}:", configs[0])));
    }

    #[test]
    fn a_watched_config_s_crawl_has_periods_of_the_watched_interval_and_keys_of_its_own() {
        let (watched, unwatched) = (StorageConfigId::new(), StorageConfigId::new());
        let settings = ScheduleSettings::default();
        let key = |at: DateTime<Utc>, c: StorageConfigId| {
            let since = Utc.with_ymd_and_hms(2026, 11, 20, 9, 0, 0).unwrap();
            let work = due(at, &[watched, unwatched], &HashMap::from([(watched, since)]), settings);
            let crawl = work.iter().find(|(_, i)| i.kind() == WorkKind::Crawl && i.scope() == Scope::Config(c));
            crawl.expect("a crawl per config").0.clone()
        };
        let morning = Utc.with_ymd_and_hms(2026, 11, 29, 1, 0, 0).unwrap();
        let evening = Utc.with_ymd_and_hms(2026, 11, 29, 23, 0, 0).unwrap();
        assert_eq!(key(morning, watched), key(evening, watched), "one watched crawl a day");
        assert_ne!(key(morning, unwatched), key(evening, unwatched), "crawls every four hours otherwise");
        assert_ne!(key(morning, watched), key(evening + chrono::Duration::hours(2), watched), "the next day's");
        assert!(key(morning, watched).starts_with(&format!("crawl:{watched}:watched:")), "{}", key(morning, watched));
        assert_eq!(key(morning, unwatched), format!("crawl:{unwatched}:{}", period(morning, settings.crawl_interval)));
    }

    /// A watcher crawls its whole root when it becomes ready: a config whose watch was taken in this period gets
    /// no scheduled crawl until the next, where one taken before it gets its period's crawl.
    #[test]
    fn a_watch_taken_in_this_period_has_its_crawl_from_the_watcher_and_the_next_period_s_from_the_scheduler() {
        let (config, settings) = (StorageConfigId::new(), ScheduleSettings::default());
        let noon = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        let crawls = |at: DateTime<Utc>, since: DateTime<Utc>| {
            let work = due(at, &[config], &HashMap::from([(config, since)]), settings);
            work.into_iter().filter(|(_, i)| i.kind() == WorkKind::Crawl).map(|(k, _)| k).collect::<Vec<_>>()
        };
        let this_morning = noon - chrono::Duration::hours(3);
        assert_eq!(crawls(noon, this_morning), Vec::<String>::new(), "the watcher's start crawled it this period");
        let tomorrow = noon + chrono::Duration::days(1);
        assert_eq!(
            crawls(tomorrow, this_morning),
            [format!("crawl:{config}:watched:{}", period(tomorrow, settings.watched_crawl_interval))],
            "the next period's crawl"
        );
        let yesterday = noon - chrono::Duration::days(1);
        assert_eq!(crawls(noon, yesterday).len(), 1, "a watch taken in an earlier period: this period's crawl");
        let unwatched = due(noon, &[config], &HashMap::new(), settings);
        assert_eq!(unwatched.iter().filter(|(_, i)| i.kind() == WorkKind::Crawl).count(), 1, "no watch: crawled");
    }
}
