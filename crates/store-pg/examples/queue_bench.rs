//! Queue benchmarks (run through `cargo xtask bench queue`): JSON on stdout.
//!
//! The scenarios of issues 13 and 26, each through the executor **as shipped** (the Worker's defaults: its
//! `ExecutorConfig::new`, slots, poll interval and items claimed ahead, and the store sized as
//! `almanac-worker run` sizes it; a no-op handler) and through the store alone (8 raw loops of one claim and
//! one completion, the baseline), with the same counts:
//! - drain: 20,000 unscoped no-op items;
//! - keyed: 20,000 items over 50 configs (one running per config);
//! - one config: 2,000 items of one config, which run one at a time (rule 2);
//! - hot config: 1,000 items over 100 configs queued behind a busy config's 49,000;
//! - scale: 10,000 configs, 1,000,000 queued items, half the configs busy, 32 concurrent claimers: claim
//!   latency p50/p95/p99 of our claim and, as the baseline in the same run, the claim before `queue_heads`.
//!
//! `ALMANAC_BENCH_SLOTS` and `ALMANAC_BENCH_PREFETCH` run the executor with that many slots, or items claimed
//! ahead, instead of the defaults (a variation for a comparison, labelled `as_shipped: false` in the report;
//! the figures recorded in docs/benchmarks/queue.json are as shipped).
//!
//! Drain, keyed and hot config also say where the time goes, per item: the CPU used by this process (the
//! executor or the raw loops) and by the PostgreSQL cluster (its backends, from `/proc`), each slot's
//! wall-clock milliseconds, and the server's milliseconds in the heads' triggers (`queue_heads` kept on every
//! claim, completion and enqueue) and in the claim's candidates function (`track_functions`). On a machine
//! whose cores are all busy, the two CPU figures bound what any change of the SQL or the executor can gain.
//!
//! `ALMANAC_BENCH_SCALE_ITEMS` (default 1,000,000) shrinks the scale scenario for a quick run;
//! `ALMANAC_BENCH_ONLY` runs one scenario (`drain`, `keyed`, `one_config`, `hot_config`, `scale`);
//! `ALMANAC_BENCH_ROUNDS`
//! (default 3) sets how many rounds the throughput scenarios run (their medians are reported).

use std::sync::Arc;
use std::time::{Duration, Instant};

use almanac_domain::{
    NewWorkItem, Scope, StorageConfigId, WorkKind, WorkQueue, WorkerId,
    ports::{ClaimRequest, LeaseDuration, ServedConfigs},
};
use almanac_executor::{BoxFuture, Executor, ExecutorConfig, Handler, HandlerContext, HandlerError, HandlerRegistry};
use almanac_store_pg::{PgStore, WorkerConnections};
use almanac_testdb::TestDatabase;
use diesel::QueryableByName;
use diesel::sql_query;
use diesel::sql_types::{Array, BigInt, Double, Nullable, Text, Uuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use tokio_util::sync::CancellationToken;

/// The claim as it was before `queue_heads` (it probes every active config): the baseline.
const CLAIM_BEFORE: &str = "\
UPDATE work_items AS w
   SET status = 'running', attempt = w.attempt + 1, claim_token = gen_random_uuid(), worker_id = $1,
       started_at = now(), heartbeat_at = now(), lease_expires_at = now() + $2 * interval '1 second', progress = NULL
 WHERE w.id = (
       SELECT q.id FROM work_items AS q
        WHERE q.id IN (
                (SELECT u.id FROM work_items AS u
                  WHERE u.status = 'queued' AND u.storage_config_id IS NULL
                    AND u.run_after <= now() AND u.kind = ANY($3)
                  ORDER BY u.requested_at, u.id LIMIT 64)
                UNION ALL
                SELECT n.id FROM storage_configs AS s
                 CROSS JOIN LATERAL (
                       SELECT x.id FROM work_items AS x
                        WHERE x.storage_config_id = s.id AND x.status = 'queued'
                          AND x.run_after <= now() AND x.kind = ANY($3)
                        ORDER BY x.requested_at, x.id LIMIT 1) AS n
                 WHERE s.is_active AND ($4::uuid IS NULL OR s.user_id = $4)
                   AND NOT EXISTS (SELECT 1 FROM work_items AS r
                                    WHERE r.storage_config_id = s.id AND r.status = 'running'))
          AND q.status = 'queued'
        ORDER BY q.requested_at, q.id LIMIT 1
          FOR UPDATE SKIP LOCKED)
RETURNING w.id, w.attempt, w.claim_token";

#[derive(QueryableByName)]
struct ClaimedRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    attempt: i32,
    #[diesel(sql_type = Uuid)]
    claim_token: uuid::Uuid,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn request(worker: &str) -> ClaimRequest {
    ClaimRequest {
        worker_id: WorkerId::new(worker).unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::DEFAULT,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn latency_json(samples: &mut [f64]) -> serde_json::Value {
    samples.sort_by(f64::total_cmp);
    serde_json::json!({
        "samples": samples.len(),
        "p50": percentile(samples, 0.5),
        "p95": percentile(samples, 0.95),
        "p99": percentile(samples, 0.99),
    })
}

/// A handler that does nothing, for every kind.
struct NoOp(WorkKind);

impl Handler for NoOp {
    fn kind(&self) -> WorkKind {
        self.0
    }
    fn run(&self, _ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async { Ok(None) })
    }
}

/// A fresh database with `configs` storage configs (one user each of five), returned in creation order.
async fn database(configs: usize) -> (TestDatabase, AsyncPgConnection, Vec<StorageConfigId>) {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(&format!(
        "ALTER DATABASE \"{name}\" SET track_functions = 'all';
         INSERT INTO users (id, username) SELECT gen_random_uuid(), 'user' || g FROM generate_series(1, 5) g;
         INSERT INTO storage_configs (id, user_id, root_path, created_at)
         SELECT gen_random_uuid(), (SELECT id FROM users ORDER BY username OFFSET g % 5 LIMIT 1), '/lib/' || g,
                now() + g * interval '1 microsecond'
           FROM generate_series(1, {configs}) g;",
        name = db.name()
    ))
    .await
    .unwrap();
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = Uuid)]
        id: uuid::Uuid,
    }
    let ids: Vec<Id> = sql_query("SELECT id FROM storage_configs ORDER BY created_at").load(&mut conn).await.unwrap();
    (db, conn, ids.into_iter().map(|r| StorageConfigId::from_uuid(r.id)).collect())
}

fn store_for(db: &TestDatabase, slots: usize) -> Arc<PgStore> {
    Arc::new(
        PgStore::for_worker(
            db.url(),
            WorkerConnections {
                shared: slots + 2,
                reserved: slots + 1,
                acquire_timeout: Duration::from_secs(10),
                lease: Duration::from_secs(60),
            },
        )
        .unwrap(),
    )
}

/// The executor as a Worker runs it by default: `ExecutorConfig::new`'s knobs, and its store sized as
/// `almanac-worker run` sizes it (the default shared pool, and the connections reserved for its slots).
/// `ALMANAC_BENCH_SLOTS` and `ALMANAC_BENCH_PREFETCH` vary it (labelled, never the recorded figures).
fn shipped() -> ExecutorConfig {
    let mut config = ExecutorConfig::new(WorkerId::new("executor").unwrap(), ServedConfigs::All);
    if let Ok(slots) = std::env::var("ALMANAC_BENCH_SLOTS") {
        config.slots = slots.parse().expect("ALMANAC_BENCH_SLOTS: a number of slots");
    }
    if let Ok(prefetch) = std::env::var("ALMANAC_BENCH_PREFETCH") {
        config.prefetch = prefetch.parse().expect("ALMANAC_BENCH_PREFETCH: a number of items");
    }
    config
}

/// A Worker's store for `config`, sized as `almanac-worker run` sizes it.
fn worker_store(db: &TestDatabase, config: &ExecutorConfig) -> Arc<PgStore> {
    let connections = WorkerConnections {
        shared: ExecutorConfig::DEFAULT_SHARED_CONNECTIONS,
        reserved: ExecutorConfig::reserved_connections(config.slots),
        // Only how long a request may wait for a connection: not a factor of the rates here.
        acquire_timeout: Duration::from_secs(10),
        lease: config.lease.get(),
    };
    Arc::new(PgStore::for_worker(db.url(), connections).unwrap())
}

/// What the executor was run with, for the report.
fn settings_json(config: &ExecutorConfig) -> serde_json::Value {
    let as_shipped = ["ALMANAC_BENCH_SLOTS", "ALMANAC_BENCH_PREFETCH"].iter().all(|v| std::env::var(v).is_err());
    serde_json::json!({
        "as_shipped": as_shipped,
        "slots": config.slots,
        "poll_interval_ms": config.poll_interval.as_millis() as u64,
        "prefetch": config.prefetch,
        "prefetch_wait_ms": config.prefetch_wait.as_millis() as u64,
        "shared_connections": ExecutorConfig::DEFAULT_SHARED_CONNECTIONS,
        "reserved_connections": ExecutorConfig::reserved_connections(config.slots),
    })
}

async fn count(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    sql_query(sql).get_result::<Count>(conn).await.unwrap().n
}

/// Runs an executor as shipped over the queue until `target` items of `worker` succeeded.
async fn through_executor(db: &TestDatabase, target: i64) -> f64 {
    let config = shipped();
    let store = worker_store(db, &config);
    let handlers = WorkKind::ALL.iter().fold(HandlerRegistry::new(), |r, k| r.register(NoOp(*k)));
    let executor = Executor::new(store, handlers, config).unwrap();
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let run = tokio::spawn(executor.run(shutdown.clone()));
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let done = count(
            &mut conn,
            "SELECT count(*) AS n FROM work_items WHERE worker_id = 'executor' AND status = 'succeeded'",
        )
        .await;
        if done >= target {
            break;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    shutdown.cancel();
    run.await.unwrap();
    seconds
}

/// `claimers` raw claim+complete loops on the store until `target` items of theirs succeeded.
async fn through_store(db: &TestDatabase, claimers: usize, target: i64) -> f64 {
    let store = store_for(db, claimers);
    let done = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..claimers)
        .map(|w| {
            let (store, done) = (store.clone(), done.clone());
            tokio::spawn(async move {
                let request = request(&format!("store{w}"));
                while std::sync::atomic::AtomicI64::load(&done, std::sync::atomic::Ordering::Relaxed) < target {
                    match store.claim(&request).await.unwrap() {
                        Some(claimed) => {
                            store.complete(claimed.fence, None).await.unwrap();
                            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        None => tokio::time::sleep(Duration::from_millis(2)).await,
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    started.elapsed().as_secs_f64()
}

/// CPU seconds of process `pid` from `/proc/<pid>/stat` (user and system; with its reaped children when
/// `children`), in clock ticks of 1/100 s (Linux's `USER_HZ` on every platform it runs on).
fn cpu_seconds(pid: u32, children: bool) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // The fields after the command's closing parenthesis: state is field 3, utime 14 ... cstime 17.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    let own = ticks(14) + ticks(15);
    (if children { own + ticks(16) + ticks(17) } else { own }) / 100.0
}

/// CPU seconds used so far by the cluster whose postmaster is `postmaster`: its own, its reaped backends' and
/// its live children's.
fn cluster_cpu_seconds(postmaster: u32) -> f64 {
    let live: f64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)) == Some(&postmaster.to_string())
            })
        })
        .map(|pid| cpu_seconds(pid, false))
        .sum();
    cpu_seconds(postmaster, true) + live
}

/// The cluster's postmaster, from `postmaster.pid` in its data directory.
async fn postmaster(conn: &mut AsyncPgConnection) -> u32 {
    #[derive(QueryableByName)]
    struct Dir {
        #[diesel(sql_type = Text)]
        data_directory: String,
    }
    let dir: Dir =
        sql_query("SELECT current_setting('data_directory') AS data_directory").get_result(conn).await.unwrap();
    let pid = std::fs::read_to_string(std::path::Path::new(&dir.data_directory).join("postmaster.pid"))
        .unwrap_or_else(|e| panic!("reading the cluster's postmaster.pid in {}: {e}", dir.data_directory));
    pid.lines().next().and_then(|l| l.trim().parse().ok()).expect("postmaster.pid starts with the pid")
}

#[derive(QueryableByName)]
struct FunctionTime {
    #[diesel(sql_type = Double)]
    heads: f64,
    #[diesel(sql_type = Double)]
    candidates: f64,
}

/// Milliseconds spent so far in the heads' triggers and in the claim's candidates, by sessions that ended (a
/// session's function statistics reach the view when it ends: call after a phase's pool is gone).
async fn function_time(conn: &mut AsyncPgConnection) -> (f64, f64) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t: FunctionTime = sql_query(
        "SELECT coalesce(sum(total_time) FILTER (WHERE funcname LIKE 'almanac_queue_heads_%'), 0) AS heads,
                coalesce(sum(total_time) FILTER (WHERE funcname = 'almanac_claim_candidates'), 0) AS candidates
           FROM pg_stat_user_functions",
    )
    .get_result(conn)
    .await
    .unwrap();
    (t.heads, t.candidates)
}

/// Where one phase's time went (its rounds summed): per item, each slot's wall-clock milliseconds and the
/// server's milliseconds in the heads' triggers and in the claim's candidates.
#[derive(Default)]
struct TimeSpent {
    items: usize,
    slot_ms: f64,
    client_cpu_ms: f64,
    server_cpu_ms: f64,
    heads_ms: f64,
    candidates_ms: f64,
}

impl TimeSpent {
    /// Runs `phase` (which answers its seconds) for `items` items with `slots` slots, and adds what it spent.
    async fn measure(
        &mut self,
        conn: &mut AsyncPgConnection,
        items: usize,
        slots: usize,
        phase: impl std::future::Future<Output = f64>,
    ) -> f64 {
        let postmaster = postmaster(conn).await;
        let before = function_time(conn).await;
        let cpu_before = (cpu_seconds(std::process::id(), false), cluster_cpu_seconds(postmaster));
        let seconds = phase.await;
        // The phase's backends end with its pool: wait for them to be reaped (and their statistics sent).
        let after = function_time(conn).await;
        let cpu_after = (cpu_seconds(std::process::id(), false), cluster_cpu_seconds(postmaster));
        self.items += items;
        self.slot_ms += seconds * 1000.0 * slots as f64;
        self.client_cpu_ms += (cpu_after.0 - cpu_before.0) * 1000.0;
        self.server_cpu_ms += (cpu_after.1 - cpu_before.1) * 1000.0;
        self.heads_ms += after.0 - before.0;
        self.candidates_ms += after.1 - before.1;
        seconds
    }

    fn json(&self) -> serde_json::Value {
        let per_item = |ms: f64| ms / self.items.max(1) as f64;
        serde_json::json!({
            "slot_ms": per_item(self.slot_ms),
            "client_cpu_ms": per_item(self.client_cpu_ms),
            "server_cpu_ms": per_item(self.server_cpu_ms),
            "heads_triggers_ms": per_item(self.heads_ms),
            "claim_candidates_ms": per_item(self.candidates_ms),
        })
    }
}

/// Enqueues `n` items, spread over `configs` (or unscoped when empty), with `enqueue_many`.
async fn fill(store: &PgStore, n: usize, configs: &[StorageConfigId]) {
    let items: Vec<NewWorkItem> = (0..n)
        .map(|i| match configs {
            [] => NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap(),
            _ => NewWorkItem::new(WorkKind::BurstDetection, Scope::Config(configs[i % configs.len()])).unwrap(),
        })
        .collect();
    store.enqueue_many(&items).await.unwrap();
}

/// Rates of several rounds: the median, and each.
fn rounds_json(items: usize, seconds: &[f64]) -> serde_json::Value {
    let mut rates: Vec<f64> = seconds.iter().map(|s| items as f64 / s).collect();
    let each = rates.clone();
    rates.sort_by(f64::total_cmp);
    serde_json::json!({"items": items, "items_per_second": rates[rates.len() / 2], "items_per_second_each_round": each})
}

/// Drain, keyed and one config: the queue drained through the executor, then refilled and drained by raw loops
/// (`concurrency` of them), `rounds` times (one round varies by up to 2x on this machine, with the table's dead
/// rows and autovacuum's timing).
async fn drain(name: &str, items: usize, configs: usize, concurrency: usize, rounds: usize) -> serde_json::Value {
    let (db, mut conn, ids) = database(configs).await;
    let store = store_for(&db, 2);
    let (mut enqueue, mut executor, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    let (mut executor_spent, mut raw_spent) = (TimeSpent::default(), TimeSpent::default());
    for round in 0..rounds {
        let enqueue_started = Instant::now();
        fill(&store, items, &ids).await;
        enqueue.push(enqueue_started.elapsed().as_secs_f64());
        let phase = through_executor(&db, ((round + 1) * items) as i64);
        executor.push(executor_spent.measure(&mut conn, items, shipped().slots, phase).await);
        fill(&store, items, &ids).await;
        let phase = through_store(&db, concurrency, items as i64);
        raw.push(raw_spent.measure(&mut conn, items, concurrency, phase).await);
    }
    serde_json::json!({
        "scenario": name, "items": items, "configs": configs, "rounds": rounds,
        "executor_settings": settings_json(&shipped()), "store_loops": concurrency,
        "enqueue_many": rounds_json(items, &enqueue),
        "executor": rounds_json(items, &executor),
        "store": rounds_json(items, &raw),
        "executor_time_per_item": executor_spent.json(),
        "store_time_per_item": raw_spent.json(),
    })
}

/// A busy config (one running item that never ends, 49,000 queued behind it, all older) and 1,000 items over
/// 100 other configs: how fast the 1,000 go.
async fn hot_config(concurrency: usize, rounds: usize) -> serde_json::Value {
    let (db, mut conn, ids) = database(101).await;
    let store = store_for(&db, 2);
    let busy = ids[0];
    fill(&store, 49_001, &[busy]).await;
    store.claim(&request("busy")).await.unwrap().expect("the busy config's running item");
    let others = &ids[1..];
    conn.batch_execute("ANALYZE work_items").await.unwrap();
    let (mut executor, mut raw) = (Vec::new(), Vec::new());
    let (mut executor_spent, mut raw_spent) = (TimeSpent::default(), TimeSpent::default());
    for round in 0..rounds {
        fill(&store, 1_000, others).await;
        let phase = through_executor(&db, ((round + 1) * 1_000) as i64);
        executor.push(executor_spent.measure(&mut conn, 1_000, shipped().slots, phase).await);
        fill(&store, 1_000, others).await;
        let phase = through_store(&db, concurrency, 1_000);
        raw.push(raw_spent.measure(&mut conn, 1_000, concurrency, phase).await);
    }
    serde_json::json!({
        "scenario": "hot_config", "items": 1_000, "behind": 49_000, "configs": 101, "rounds": rounds,
        "executor_settings": settings_json(&shipped()), "store_loops": concurrency,
        "executor": rounds_json(1_000, &executor),
        "store": rounds_json(1_000, &raw),
        "executor_time_per_item": executor_spent.json(),
        "store_time_per_item": raw_spent.json(),
    })
}

/// 10,000 configs, 1,000,000 queued, half the configs busy; 32 claimers claim and complete for a while with
/// our claim, then with the claim before `queue_heads`.
async fn scale(items: usize, claimers: usize) -> serde_json::Value {
    let configs = 10_000;
    let (db, mut conn, _) = database(configs).await;
    let per_config = (items / configs).max(1);
    let started = Instant::now();
    conn.batch_execute(&format!(
        "INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection', c.id, now() - interval '1 day' + (g * {configs} + c.n) * interval '1 microsecond'
           FROM generate_series(1, {per_config}) g
          CROSS JOIN (SELECT id, row_number() OVER (ORDER BY created_at) AS n FROM storage_configs) c;
         UPDATE work_items w SET status = 'running', attempt = 1, worker_id = 'busy',
                lease_expires_at = now() + interval '1 day'
          WHERE w.id IN (SELECT DISTINCT ON (q.storage_config_id) q.id FROM work_items q
                          JOIN (SELECT id FROM storage_configs ORDER BY created_at LIMIT {half}) b
                            ON b.id = q.storage_config_id
                          ORDER BY q.storage_config_id, q.requested_at);",
        half = configs / 2,
    ))
    .await
    .unwrap_or_else(|e| panic!("loading the scale scenario: {e}"));
    conn.batch_execute("VACUUM ANALYZE work_items").await.unwrap();
    conn.batch_execute("VACUUM ANALYZE queue_heads").await.unwrap();
    let load_seconds = started.elapsed().as_secs_f64();
    let queued = count(&mut conn, "SELECT count(*) AS n FROM work_items WHERE status = 'queued'").await;
    let ours = claim_latencies(&db, claimers, false).await;
    let before = claim_latencies(&db, claimers, true).await;
    serde_json::json!({
        "scenario": "scale", "configs": configs, "queued": queued, "busy_configs": configs / 2,
        "claimers": claimers, "load_seconds": load_seconds,
        "claim_ms": ours.0, "claims_per_second": ours.1,
        "baseline_claim_before_queue_heads_ms": before.0, "baseline_claims_per_second": before.1,
    })
}

/// `claimers` loops, each claiming (timed) and completing for about five seconds, on connections of their own.
async fn claim_latencies(db: &TestDatabase, claimers: usize, baseline: bool) -> (serde_json::Value, f64) {
    let store = store_for(db, claimers);
    let kinds: Vec<String> = WorkKind::ALL.iter().map(|k| k.as_str().to_owned()).collect();
    let started = Instant::now();
    let tasks: Vec<_> = (0..claimers)
        .map(|w| {
            let (store, url, kinds) = (store.clone(), db.url().to_owned(), kinds.clone());
            tokio::spawn(async move {
                let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
                let request = request(&format!("scale{w}"));
                let mut samples = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let fence = if baseline {
                        conn.batch_execute("BEGIN").await.unwrap();
                        let rows: Vec<ClaimedRow> = sql_query(CLAIM_BEFORE)
                            .bind::<Text, _>(request.worker_id.as_str())
                            .bind::<Double, _>(60.0)
                            .bind::<Array<Text>, _>(&kinds)
                            .bind::<Nullable<Uuid>, _>(None::<uuid::Uuid>)
                            .load(&mut conn)
                            .await
                            .unwrap_or_default();
                        conn.batch_execute("COMMIT").await.unwrap();
                        rows.into_iter().next().map(|r| {
                            almanac_domain::ports::Fence::new(
                                almanac_domain::WorkItemId::from_uuid(r.id),
                                almanac_domain::ports::Attempt::new(r.attempt).unwrap(),
                                almanac_domain::ports::ClaimToken::from_uuid(r.claim_token),
                            )
                        })
                    } else {
                        store.claim(&request).await.unwrap().map(|c| c.fence)
                    };
                    samples.push(t.elapsed().as_secs_f64() * 1000.0);
                    if let Some(fence) = fence {
                        store.complete(fence, None).await.unwrap();
                    }
                }
                samples
            })
        })
        .collect();
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    let per_second = samples.len() as f64 / started.elapsed().as_secs_f64();
    (latency_json(&mut samples), per_second)
}

#[tokio::main]
async fn main() {
    let scale_items = env_usize("ALMANAC_BENCH_SCALE_ITEMS", 1_000_000);
    let rounds = env_usize("ALMANAC_BENCH_ROUNDS", 3).max(1);
    // Each scenario is also written to stderr as it ends.
    let show = |v: serde_json::Value| {
        eprintln!("{v}");
        v
    };
    // `ALMANAC_BENCH_ONLY=keyed` (or drain, hot_config, scale) runs one scenario, for a quick look.
    let only = std::env::var("ALMANAC_BENCH_ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let mut report = serde_json::json!({
        "benchmark": "queue",
        "date": chrono::Utc::now().format("%Y-%m-%d").to_string(),
        "cores": std::thread::available_parallelism().map_or(2, usize::from),
    });
    if wanted("drain") {
        report["drain"] = show(drain("drain", 20_000, 0, 8, rounds).await);
    }
    if wanted("keyed") {
        report["keyed"] = show(drain("keyed", 20_000, 50, 8, rounds).await);
    }
    if wanted("one_config") {
        report["one_config"] = show(drain("one_config", 2_000, 1, 8, rounds).await);
    }
    if wanted("hot_config") {
        report["hot_config"] = show(hot_config(4, rounds).await);
    }
    if wanted("scale") {
        report["scale"] = show(scale(scale_items, 32).await);
    }
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
