//! The executor over the real PostgreSQL store: two Workers, three configs with a backlog each.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use almanac_domain::{
    NewWorkItem, Scope, Status, StorageConfigId, WorkKind, WorkQueue, WorkerId,
    ports::{LeaseDuration, ServedConfigs},
};
use almanac_executor::{BoxFuture, Executor, ExecutorConfig, Handler, HandlerContext, HandlerError, HandlerRegistry};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use tokio_util::sync::CancellationToken;

type Intervals = Arc<Mutex<Vec<(Option<StorageConfigId>, Instant, Instant)>>>;

/// Records the start and end instants of every run, by config, in the handler's own clock.
#[derive(Clone)]
struct Recorder {
    kind: WorkKind,
    intervals: Intervals,
}

impl Handler for Recorder {
    fn kind(&self) -> WorkKind {
        self.kind
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(40)).await;
            let end = Instant::now();
            self.intervals.lock().unwrap().push((ctx.item.scope.storage_config(), start, end));
            Ok(None)
        })
    }
}

fn worker_config(name: &str) -> ExecutorConfig {
    let mut c = ExecutorConfig::new(WorkerId::new(name).unwrap(), ServedConfigs::All);
    c.lease = LeaseDuration::new(Duration::from_secs(4)).unwrap();
    c.heartbeat_interval = Duration::from_millis(500);
    c.poll_interval = Duration::from_millis(30);
    c.recovery_interval = Duration::from_secs(1);
    c.slots = 2;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_never_overlap_a_config_and_run_unscoped_work_beside_it() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), 8, Duration::from_secs(10)).unwrap();
    let mut configs = Vec::new();
    for i in 0..3 {
        let new = NewStorageConfig { username: format!("user{i}"), root_path: PathBuf::from(format!("/lib/{i}")) };
        configs.push(store.add_storage_config(&new).await.unwrap().1.id);
    }
    let mut ids = Vec::new();
    for round in 0..6 {
        for c in &configs {
            let kind = if round % 2 == 0 { WorkKind::Crawl } else { WorkKind::BurstDetection };
            ids.push(store.enqueue(&NewWorkItem::new(kind, Scope::Config(*c)).unwrap()).await.unwrap().item.id);
        }
        let unscoped = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
        ids.push(store.enqueue(&unscoped).await.unwrap().item.id);
    }

    let intervals: Intervals = Arc::default();
    let shutdown = CancellationToken::new();
    let mut workers = Vec::new();
    for name in ["worker-a", "worker-b"] {
        let registry = [WorkKind::Crawl, WorkKind::BurstDetection, WorkKind::TokenCleanup]
            .into_iter()
            .fold(HandlerRegistry::new(), |r, kind| r.register(Recorder { kind, intervals: intervals.clone() }));
        let own_store = PgStore::new(db.url(), 4, Duration::from_secs(10)).unwrap();
        let executor = Executor::new(Arc::new(own_store), registry, worker_config(name)).unwrap();
        workers.push(tokio::spawn(executor.run(shutdown.clone())));
    }

    let deadline = almanac_testdb::Deadline::after(Duration::from_secs(60));
    loop {
        let mut done = 0;
        for id in &ids {
            if store.get(*id).await.unwrap().unwrap().status == Status::Succeeded {
                done += 1;
            }
        }
        if done == ids.len() {
            break;
        }
        if deadline.passed() {
            deadline.fail(format_args!("every item to finish (only {done} of {} did)", ids.len()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    for w in workers {
        assert!(w.await.unwrap().is_clean());
    }

    let intervals = intervals.lock().unwrap().clone();
    assert_eq!(intervals.len(), ids.len(), "every item ran exactly once");
    for c in &configs {
        let mut runs: Vec<_> = intervals.iter().filter(|(s, _, _)| s == &Some(*c)).map(|(_, a, b)| (*a, *b)).collect();
        runs.sort();
        assert_eq!(runs.len(), 6);
        for pair in runs.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "two items of config {c} overlapped: {pair:?}");
        }
    }
    let scoped: Vec<_> = intervals.iter().filter(|(s, _, _)| s.is_some()).collect();
    let beside =
        intervals.iter().filter(|(s, _, _)| s.is_none()).any(|(_, a, b)| scoped.iter().any(|(_, c, d)| a < d && c < b));
    assert!(beside, "unscoped work ran beside a config's item");
}

/// Runs its kind's items for `run`, recording which Worker ran which item.
#[derive(Clone)]
struct Timed {
    kind: WorkKind,
    run: Duration,
    worker: &'static str,
    ran: Arc<Mutex<Vec<(almanac_domain::WorkItemId, &'static str)>>>,
}

impl Handler for Timed {
    fn kind(&self) -> WorkKind {
        self.kind
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            tokio::time::sleep(self.run).await;
            self.ran.lock().unwrap().push((ctx.item.id, self.worker));
            Ok(None)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_a_busy_worker_claimed_ahead_go_back_unrun_and_another_worker_runs_them() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), 4, Duration::from_secs(10)).unwrap();
    // Quick items first (they open Worker A's window of items claimed ahead), then four long ones: A's one slot
    // runs the first; the others wait in its line, and go back to the queue when they have waited too long.
    let mut quick = Vec::new();
    for _ in 0..12 {
        let new = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
        quick.push(store.enqueue(&new).await.unwrap().item.id);
    }
    let mut long = Vec::new();
    for _ in 0..4 {
        let new = NewWorkItem::new(WorkKind::ProxySweep, Scope::Unscoped).unwrap();
        long.push(store.enqueue(&new).await.unwrap().item.id);
    }
    let ran = Arc::default();
    let shutdown = CancellationToken::new();
    let start = |worker: &'static str| {
        let mut c = ExecutorConfig::new(WorkerId::new(worker).unwrap(), ServedConfigs::All);
        c.prefetch_wait = Duration::from_millis(300);
        let registry = HandlerRegistry::new()
            .register(Timed {
                kind: WorkKind::TokenCleanup,
                run: Duration::from_millis(5),
                worker,
                ran: Arc::clone(&ran),
            })
            .register(Timed { kind: WorkKind::ProxySweep, run: Duration::from_secs(2), worker, ran: Arc::clone(&ran) });
        let own_store = PgStore::new(db.url(), 4, Duration::from_secs(10)).unwrap();
        tokio::spawn(Executor::new(Arc::new(own_store), registry, c).unwrap().run(shutdown.clone()))
    };
    let a = start("worker-a");
    // A claimed long items ahead and handed them back: queued again, their attempt counted.
    let deadline = almanac_testdb::Deadline::after(Duration::from_secs(30));
    loop {
        let mut handed_back = 0;
        for id in &long {
            let item = store.get(*id).await.unwrap().unwrap();
            handed_back += usize::from(item.status == Status::Queued && item.attempt == 1);
        }
        if handed_back > 0 {
            break;
        }
        if deadline.passed() {
            deadline.fail("worker A to hand back a long item it claimed ahead");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = start("worker-b");
    loop {
        let mut done = 0;
        for id in quick.iter().chain(&long) {
            done += usize::from(store.get(*id).await.unwrap().unwrap().status == Status::Succeeded);
        }
        if done == quick.len() + long.len() {
            break;
        }
        if deadline.passed() {
            deadline.fail(format_args!("every item to finish (only {done} did)"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    assert!(a.await.unwrap().is_clean());
    assert!(b.await.unwrap().is_clean());
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.len(), quick.len() + long.len(), "every item ran exactly once: {ran:?}");
    assert!(ran.iter().any(|(id, w)| long.contains(id) && *w == "worker-b"), "B ran what A handed back: {ran:?}");
    for id in &long {
        let item = store.get(*id).await.unwrap().unwrap();
        assert_eq!((item.failures, item.stalls), (0, 0), "handing back counts no failure, no stall");
    }
}
