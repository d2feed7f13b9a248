//! Quiet hours hold (issue #27, "A NAS left to rest"), and a watched config is crawled whole less often (ADR
//! 0014): the scheduler runs on paused time, against real PostgreSQL, through a store whose clock is tokio's
//! paused clock. The database work runs on a runtime of its
//! own (real time), so the paused clock only moves while the scheduler sleeps; each look stops at its end for
//! the test to see the queue as a claim would at that look's time, and to claim for real.

mod support;

use std::sync::{Arc, Mutex};

use almanac_domain::{
    NewWorkItem, QueueError, Scope, StorageConfigId, WorkKind, WorkQueue, WorkerId,
    ports::{
        CatalogueError, ClaimRequest, DatabaseClock, LeaseDuration, QueueMaintenance, ServedConfigs, WatchHolder,
        WatchMode, WatchReport, WatchState, WatchStore, WatchTarget,
    },
};
use almanac_handlers::{QuietHours, ScheduleSettings, Scheduler};
use almanac_store_pg::{NewStorageConfig, PgStore};
use chrono::{DateTime, Duration as Span, DurationRound, Utc};
use diesel::sql_query;
use diesel::sql_types::{Text, Timestamptz};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The end of one look of the scheduler: its time, and a way to let it go on.
struct Look {
    at: DateTime<Utc>,
    go_on: oneshot::Sender<()>,
}

/// The PostgreSQL store, on the real runtime, with the time of the paused one.
struct Clocked {
    store: Arc<PgStore>,
    real: tokio::runtime::Handle,
    base: DateTime<Utc>,
    started: tokio::time::Instant,
    last: Mutex<DateTime<Utc>>,
    looks: mpsc::UnboundedSender<Look>,
}

impl Clocked {
    async fn on_real<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> T {
        self.real.spawn(work).await.unwrap()
    }
}

impl DatabaseClock for Clocked {
    async fn db_now(&self) -> Result<DateTime<Utc>, CatalogueError> {
        let now = self.base + self.started.elapsed();
        *self.last.lock().unwrap() = now;
        Ok(now)
    }
}

impl QueueMaintenance for Clocked {
    async fn served_configs(&self, served: ServedConfigs) -> Result<Vec<StorageConfigId>, QueueError> {
        let store = self.store.clone();
        self.on_real(async move { store.served_configs(served).await }).await
    }

    async fn enqueue_once(&self, due: &[(String, NewWorkItem)]) -> Result<Vec<String>, QueueError> {
        let (store, due) = (self.store.clone(), due.to_vec());
        self.on_real(async move { store.enqueue_once(&due).await }).await
    }

    async fn defer_scheduled(&self, configs: &[StorageConfigId], until: DateTime<Utc>) -> Result<u64, QueueError> {
        let (store, configs) = (self.store.clone(), configs.to_vec());
        self.on_real(async move { store.defer_scheduled(&configs, until).await }).await
    }

    /// The last statement of a look: the test looks at the queue before the scheduler goes on.
    async fn cancel_queued_of_inactive(&self) -> Result<u64, QueueError> {
        let store = self.store.clone();
        let cancelled = self.on_real(async move { store.cancel_queued_of_inactive().await }).await;
        let (go_on, wait) = oneshot::channel();
        let at = *self.last.lock().unwrap();
        self.looks.send(Look { at, go_on }).unwrap();
        let _ = wait.await;
        cancelled
    }
}

/// The watches as stored (none is held in this test: every config is crawled at the unwatched interval).
impl WatchStore for Clocked {
    async fn watch_targets(&self, served: ServedConfigs) -> Result<Vec<WatchTarget>, QueueError> {
        let store = self.store.clone();
        self.on_real(async move { store.watch_targets(served).await }).await
    }

    async fn hold_watch(
        &self,
        config: StorageConfigId,
        holder: &WatchHolder,
        lease: std::time::Duration,
        report: &WatchReport,
    ) -> Result<bool, QueueError> {
        let (store, holder, report) = (self.store.clone(), holder.clone(), report.clone());
        self.on_real(async move { store.hold_watch(config, &holder, lease, &report).await }).await
    }

    async fn release_watch(&self, config: StorageConfigId, holder: &WatchHolder) -> Result<(), QueueError> {
        let (store, holder) = (self.store.clone(), holder.clone());
        self.on_real(async move { store.release_watch(config, &holder).await }).await
    }

    async fn watch_states(&self) -> Result<Vec<WatchState>, QueueError> {
        let store = self.store.clone();
        self.on_real(async move { store.watch_states().await }).await
    }
}

#[derive(diesel::QueryableByName, Debug)]
struct Queued {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Timestamptz)]
    run_after: DateTime<Utc>,
}

/// The kinds of the queued items a claim at `at` would find due (`run_after` at or before it).
async fn due_at(url: String, at: DateTime<Utc>) -> Vec<String> {
    use diesel_async::RunQueryDsl;
    let mut conn = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(&url).await.unwrap();
    let queued: Vec<Queued> = sql_query("SELECT kind, run_after FROM work_items WHERE status = 'queued' ORDER BY kind")
        .load(&mut conn)
        .await
        .unwrap();
    queued.into_iter().filter(|q| q.run_after <= at).map(|q| q.kind).collect()
}

/// With quiet hours 01:00-06:30 UTC and a look every ten minutes from 00:25: the day's work enqueued at 00:25
/// (before the window) does not start inside it, nothing is enqueued inside it, an operator's item runs all
/// along (and a held crawl the operator asks for stays due), and at 06:30 the held work is due again.
#[test]
fn no_scheduled_work_starts_inside_the_quiet_hours_and_it_resumes_at_their_end() {
    let real = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let lib = real.block_on(support::library());
    // Days ahead of the database's own clock, so that what the scheduler holds is not due for real either.
    let day = (Utc::now() + Span::days(3)).duration_trunc(Span::days(1)).unwrap();
    let (window_start, window_end) = (day + Span::hours(1), day + Span::minutes(390));
    let (looks_tx, mut looks) = mpsc::unbounded_channel();
    let paused = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let manual = real
        .block_on(lib.store.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()))
        .unwrap()
        .item
        .id;
    paused.block_on(async {
        let clocked = Clocked {
            store: lib.store.clone(),
            real: real.handle().clone(),
            base: day + Span::minutes(25),
            started: tokio::time::Instant::now(),
            last: Mutex::new(day),
            looks: looks_tx,
        };
        let settings = ScheduleSettings {
            tick: std::time::Duration::from_secs(600),
            quiet_hours: QuietHours::parse("01:00-06:30 UTC").unwrap(),
            ..ScheduleSettings::default()
        };
        let stop = CancellationToken::new();
        let run = Scheduler::new(Arc::new(clocked), ServedConfigs::All, settings).run(stop.clone());
        let scheduler = tokio::spawn(support::logs::capture(run));
        let url = lib.db.url().to_owned();
        let mut seen = Vec::new();
        let mut last_look = None;
        while let Some(look) = next_look(&mut looks, &mut last_look).await {
            let due = real.spawn(due_at(url.clone(), look.at)).await.unwrap();
            seen.push((look.at, due.clone()));
            if look.at == window_start {
                // A real claim, by the database's clock: only the operator's item is taken.
                let store = lib.store.clone();
                let claimed = real.spawn(async move { store.claim_many(&claim_everything(), 64).await }).await;
                let claimed: Vec<_> = claimed.unwrap().unwrap().into_iter().map(|c| c.item.id).collect();
                assert_eq!(claimed, vec![manual], "a claim at the window's start took scheduled work");
                // The operator asks for the held crawl ("crawl now" joins it): due now, and never held again.
                let crawl = real.spawn(queued_crawl(url.clone())).await.unwrap();
                let store = lib.store.clone();
                assert!(real.spawn(async move { store.run_now(crawl).await }).await.unwrap().unwrap());
            }
            if look.at == window_start + Span::minutes(30) {
                // The held purge is due again, as a retry backing off would be: the next look holds it.
                real.spawn(due_again(url.clone(), "purge", look.at)).await.unwrap();
            }
            let done = look.at >= window_end;
            let _ = look.go_on.send(());
            if done {
                break;
            }
        }
        stop.cancel();
        let (lines, ()) = scheduler.await.unwrap();
        check(&seen, window_start, window_end);
        // Their start and end are logged once each; held work once more, when a look held some (the purge).
        let events = |event| support::logs::events(&lines, event);
        assert_eq!(events("quiet_hours_began").len(), 1, "{lines:#?}");
        assert_eq!(events("quiet_hours_ended").len(), 1, "{lines:#?}");
        let held = events("scheduled_work_held");
        assert_eq!(held.len(), 1, "{lines:#?}");
        assert_eq!(held[0]["fields"]["held"], 1, "{lines:#?}");
    });
    real.block_on(async move { drop(lib) });
}

/// The schedule keys of the crawls recorded so far.
async fn crawl_keys(url: String) -> Vec<String> {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Key {
        #[diesel(sql_type = Text)]
        schedule_key: String,
    }
    let mut conn = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(&url).await.unwrap();
    let keys: Vec<Key> = sql_query("SELECT schedule_key FROM schedule_periods WHERE schedule_key LIKE 'crawl:%'")
        .load(&mut conn)
        .await
        .unwrap();
    keys.into_iter().map(|k| k.schedule_key).collect()
}

/// A config whose watch a Worker holds is crawled whole once a day (`schedule.watched_crawl_interval`), another
/// every four hours (`schedule.crawl_interval`); once the watch is given up (between the looks at 29:30 and
/// 30:00), the config's crawl is due at the next look and every four hours after. A look every 30 minutes over
/// two days.
#[test]
fn a_watched_config_is_crawled_whole_daily_and_every_crawl_interval_once_no_worker_watches_it() {
    let real = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let lib = real.block_on(support::library());
    let bob = NewStorageConfig { username: "bob".into(), root_path: lib.dir.path().join("bob") };
    let other = real.block_on(lib.store.add_storage_config(&bob)).unwrap().1.id;
    let watcher = WatchHolder::new(WorkerId::new("watcher").unwrap());
    let report = WatchReport { mode: WatchMode::Events, last_change_at: None, pending_files: 0, note: None };
    let hour = std::time::Duration::from_secs(3600);
    assert!(real.block_on(lib.store.hold_watch(lib.config, &watcher, hour, &report)).unwrap());
    let day = (Utc::now() + Span::days(3)).duration_trunc(Span::days(1)).unwrap();
    let (release, end) = (day + Span::minutes(29 * 60 + 30), day + Span::hours(48));
    let (looks_tx, mut looks) = mpsc::unbounded_channel();
    let paused = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let mut crawls: Vec<(String, i64)> = Vec::new();
    paused.block_on(async {
        let clocked = Clocked {
            store: lib.store.clone(),
            real: real.handle().clone(),
            base: day,
            started: tokio::time::Instant::now(),
            last: Mutex::new(day),
            looks: looks_tx,
        };
        let settings = ScheduleSettings { tick: std::time::Duration::from_secs(1800), ..ScheduleSettings::default() };
        assert_eq!(settings.watched_crawl_interval, 24 * hour, "the default");
        let stop = CancellationToken::new();
        let scheduler = tokio::spawn(Scheduler::new(Arc::new(clocked), ServedConfigs::All, settings).run(stop.clone()));
        let mut known = std::collections::HashSet::new();
        let mut last_look = None;
        while let Some(look) = next_look(&mut looks, &mut last_look).await {
            for key in real.spawn(crawl_keys(lib.db.url().to_owned())).await.unwrap() {
                if known.insert(key.clone()) {
                    crawls.push((key, (look.at - day).num_minutes()));
                }
            }
            if look.at == release {
                let (store, config, watcher) = (lib.store.clone(), lib.config, watcher.clone());
                real.spawn(async move { store.release_watch(config, &watcher).await }).await.unwrap().unwrap();
            }
            let done = look.at >= end;
            let _ = look.go_on.send(());
            if done {
                break;
            }
        }
        stop.cancel();
        scheduler.await.unwrap();
    });
    let hours_of = |config: StorageConfigId| {
        let prefix = format!("crawl:{config}:");
        crawls.iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(_, minutes)| minutes / 60).collect::<Vec<_>>()
    };
    assert_eq!(hours_of(lib.config), [0, 24, 30, 32, 36, 40, 44, 48], "{crawls:?}");
    assert_eq!(hours_of(other), (0..=12).map(|i| i * 4).collect::<Vec<_>>(), "{crawls:?}");
    assert!(crawls.iter().all(|(_, minutes)| minutes % 60 == 0), "each at the look that began its period: {crawls:?}");
    real.block_on(async move { drop(lib) });
}

fn claim_everything() -> ClaimRequest {
    ClaimRequest {
        worker_id: WorkerId::new("quiet").unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::DEFAULT,
    }
}

/// The queued crawl's id.
async fn queued_crawl(url: String) -> almanac_domain::WorkItemId {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Id {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        id: uuid::Uuid,
    }
    let mut conn = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(&url).await.unwrap();
    let row: Id = sql_query("SELECT id FROM work_items WHERE kind = 'crawl' AND status = 'queued'")
        .get_result(&mut conn)
        .await
        .unwrap();
    almanac_domain::WorkItemId::from_uuid(row.id)
}

/// The scheduler's next look, which comes after the last one: each waits for a tick (or the window's start), so
/// the clock moves on between them.
async fn next_look(looks: &mut mpsc::UnboundedReceiver<Look>, last: &mut Option<DateTime<Utc>>) -> Option<Look> {
    let look = looks.recv().await?;
    assert!(last.is_none_or(|last| look.at > last), "two looks at {}", look.at);
    *last = Some(look.at);
    Some(look)
}

/// Makes the queued item of `kind` due at `at`.
async fn due_again(url: String, kind: &str, at: DateTime<Utc>) {
    use diesel_async::RunQueryDsl;
    let mut conn = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(&url).await.unwrap();
    let updated = sql_query("UPDATE work_items SET run_after = $1 WHERE kind = $2 AND status = 'queued'")
        .bind::<Timestamptz, _>(at)
        .bind::<Text, _>(kind)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(updated, 1, "one queued {kind}");
}

/// What the looks saw.
fn check(seen: &[(DateTime<Utc>, Vec<String>)], start: DateTime<Utc>, end: DateTime<Utc>) {
    let inside: Vec<_> = seen.iter().filter(|(at, _)| *at >= start && *at < end).collect();
    assert_eq!(inside.first().map(|(at, _)| *at), Some(start), "the first look inside is at the window's start");
    assert!(inside.len() >= 30, "the scheduler looked every ten minutes inside the window: {}", inside.len());
    let before = &seen.iter().rfind(|(at, _)| *at < start).expect("a look before the window").1;
    for kind in ["crawl", "purge", "proxy_sweep", "work_item_retention"] {
        assert!(before.contains(&kind.to_owned()), "{kind} was due before the window: {before:?}");
    }
    for (at, due) in &inside {
        // At the start, the operator's token clean-up (then claimed); after it, the crawl the operator asked
        // for. Nothing scheduled is due inside.
        let operators: &[&str] = if *at == start { &["token_cleanup"] } else { &["crawl"] };
        assert_eq!(due, operators, "due at {at}");
    }
    let (at, after) = seen.last().unwrap();
    assert_eq!(*at, end, "the first look after the window is at its end");
    for kind in ["crawl", "purge", "proxy_sweep", "token_cleanup", "work_item_retention"] {
        assert!(after.contains(&kind.to_owned()), "{kind} is due again at the window's end: {after:?}");
    }
}
