//! Many Workers on one database (issue #26 item 3), run through `cargo xtask bench workers`: JSON on stdout.
//!
//! For 1, 2, 4, 8 and 16 Worker processes (each run twice, each run on a fresh database): a queue of
//! `ALMANAC_BENCH_CONFIGS` configs (default 1,000) with `ALMANAC_BENCH_PER_CONFIG` items each (default 10), and
//! as many unscoped items, all due, is drained by that many processes of this same binary started as
//! `workers_bench worker` (below), and the run reports:
//! - items/s, from the first process started to the last item succeeded;
//! - claim latency p50/p99: each process's store is wrapped to time the calls the executor makes, claims of
//!   free slots (`claim_ms`, and how many found nothing) and batches of completions with the claim that follows
//!   them (`completions_and_claim_ms`), and to count items handed back unrun (`releases`);
//! - the CPU used per item by the Worker processes (their own, from `/proc/self/stat`) and by their sessions'
//!   server processes (read at the end of the run, while they are open);
//! - connections: the peak count of the database's sessions in `pg_stat_activity`, sampled every 50 ms;
//! - overlaps: pairs of attempts of one config whose handler runs intersect, from the start and end each
//!   handler noted (microseconds of the system clock, shared by the processes on this machine), written to the
//!   table `bench_attempts` at the end of the run;
//! - FIFO inversions: an item of a config whose handler started before that of an older item of the same
//!   config (all are due from the start);
//! - attempts beyond one per item (a stall or a retry would show here).
//!
//! A Worker process here is wired as `almanac-worker run` wires its executor: `PgStore::for_worker` with the
//! shipped connection sizing (`database.max_connections` and `database.connect_timeout` as the settings
//! table of docs/operations.md states them, which the Worker's settings test checks against its defaults;
//! `worker.slots + 1` reserved, as `worker_store` in crates/worker/src/commands/run.rs; the lease's default),
//! `ExecutorConfig` defaults but for `ALMANAC_BENCH_SLOTS` slots (default 4), and `listen_for_work` for
//! wake-ups; no scheduler, no HTTP endpoints (their connections are counted in operations.md, not here),
//! and handlers that do nothing but note their start and end.
//!
//! For a quick look or an experiment: `ALMANAC_BENCH_PROCESSES` (e.g. `8,16`) runs those counts only,
//! `ALMANAC_BENCH_ROUNDS` (default 2) sets the runs of each, and `ALMANAC_BENCH_SETUP_SQL` names a file of SQL
//! run on each fresh database before its queue is filled (to try a change of the schema's functions side by
//! side with the shipped one).

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use almanac_domain::{
    CancelOutcome, Enqueued, NewWorkItem, QueueError, Scope, StorageConfigId, WorkItem, WorkItemId, WorkKind,
    WorkQueue, WorkerId,
    ports::{
        ClaimRequest, ClaimedItem, CompletedMany, Completion, FailOutcome, Failure, Fence, Heartbeat, LeaseDuration,
        Recovered, ServedConfigs, WriteOutcome,
    },
};
use almanac_executor::{BoxFuture, Executor, ExecutorConfig, Handler, HandlerContext, HandlerError, HandlerRegistry};
use almanac_store_pg::{PgStore, WorkerConnections, listen_for_work};
use almanac_testdb::TestDatabase;
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use tokio_util::sync::CancellationToken;

/// The database a Worker process works on.
const URL_VARIABLE: &str = "ALMANAC_BENCH_WORKER_URL";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A handler's run as it noted it: the item, its config, the attempt, and the microseconds of its start and end.
type Noted = (uuid::Uuid, Option<uuid::Uuid>, i32, i64, i64);

fn micros_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// A handler that does nothing but note when it ran.
struct Noting {
    kind: WorkKind,
    runs: Arc<Mutex<Vec<Noted>>>,
}

impl Handler for Noting {
    fn kind(&self) -> WorkKind {
        self.kind
    }
    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let started = micros_now();
            let config = match ctx.item.scope {
                Scope::Config(c) => Some(c.as_uuid()),
                Scope::Unscoped => None,
            };
            let run = (ctx.item.id.as_uuid(), config, ctx.fence.attempt.get(), started, micros_now());
            self.runs.lock().unwrap().push(run);
            Ok(None)
        })
    }
}

/// What a Worker process's store was asked, and how long each took: a claim of free slots (`claim`), a batch
/// of completions with the claim that follows it (`complete_and_claim`), and releases (items handed back unrun).
#[derive(Default)]
struct Calls {
    claims: Vec<f64>,
    empty_claims: usize,
    batches: Vec<f64>,
    releases: usize,
    /// Items asked for and items got, by every claim (free slots' and completions').
    asked: usize,
    got: usize,
}

/// The Worker's store, timed: each call goes to `PgStore` unchanged (its own batched forms included), and
/// claims and completion batches are timed around it.
struct Timed {
    store: PgStore,
    calls: Arc<Mutex<Calls>>,
}

impl WorkQueue for Timed {
    async fn enqueue(&self, item: &NewWorkItem) -> Result<Enqueued, QueueError> {
        self.store.enqueue(item).await
    }
    async fn enqueue_many(&self, items: &[NewWorkItem]) -> Result<Vec<Enqueued>, QueueError> {
        self.store.enqueue_many(items).await
    }
    async fn claim(&self, request: &ClaimRequest) -> Result<Option<ClaimedItem>, QueueError> {
        Ok(self.claim_many(request, 1).await?.pop())
    }
    async fn claim_many(&self, request: &ClaimRequest, limit: usize) -> Result<Vec<ClaimedItem>, QueueError> {
        let sent = Instant::now();
        let claimed = self.store.claim_many(request, limit).await;
        let mut calls = self.calls.lock().unwrap();
        calls.claims.push(sent.elapsed().as_secs_f64() * 1e3);
        calls.empty_claims += usize::from(claimed.as_ref().is_ok_and(Vec::is_empty));
        calls.asked += limit;
        calls.got += claimed.as_ref().map_or(0, Vec::len);
        claimed
    }
    async fn succeeded_under(&self, fence: Fence) -> Result<bool, QueueError> {
        self.store.succeeded_under(fence).await
    }
    async fn heartbeat(
        &self,
        fence: Fence,
        lease: LeaseDuration,
        progress: Option<&serde_json::Value>,
    ) -> Result<Heartbeat, QueueError> {
        self.store.heartbeat(fence, lease, progress).await
    }
    async fn complete(&self, fence: Fence, result: Option<&serde_json::Value>) -> Result<WriteOutcome, QueueError> {
        self.store.complete(fence, result).await
    }
    async fn complete_many_and_claim(
        &self,
        done: &[Completion<'_>],
        next: &ClaimRequest,
        claim: usize,
    ) -> Result<CompletedMany, QueueError> {
        let sent = Instant::now();
        let answer = self.store.complete_many_and_claim(done, next, claim).await;
        let mut calls = self.calls.lock().unwrap();
        calls.batches.push(sent.elapsed().as_secs_f64() * 1e3);
        calls.asked += claim;
        calls.got += answer.as_ref().ok().and_then(|a| a.next.as_ref().ok()).map_or(0, Vec::len);
        drop(calls);
        answer
    }
    async fn fail(&self, fence: Fence, failure: &Failure) -> Result<FailOutcome, QueueError> {
        self.store.fail(fence, failure).await
    }
    async fn mark_cancelled(&self, fence: Fence) -> Result<WriteOutcome, QueueError> {
        self.store.mark_cancelled(fence).await
    }
    async fn release(&self, fence: Fence) -> Result<WriteOutcome, QueueError> {
        self.calls.lock().unwrap().releases += 1;
        self.store.release(fence).await
    }
    async fn request_cancel(&self, id: WorkItemId) -> Result<CancelOutcome, QueueError> {
        self.store.request_cancel(id).await
    }
    async fn recover_expired_leases(&self, max_stalls: i32) -> Result<Vec<Recovered>, QueueError> {
        self.store.recover_expired_leases(max_stalls).await
    }
    async fn get(&self, id: WorkItemId) -> Result<Option<WorkItem>, QueueError> {
        self.store.get(id).await
    }
}

/// A setting's default as the settings table of docs/operations.md states it (`| `key` | value | … |`).
fn shipped(key: &str) -> String {
    let guide = include_str!("../../../docs/operations.md");
    let row = format!("| `{key}` | ");
    let line = guide.lines().find(|l| l.starts_with(&row)).unwrap_or_else(|| panic!("operations.md states {key}"));
    line[row.len()..].split(" |").next().expect("a value").trim().to_owned()
}

/// `10s` as a duration (the settings table's form for whole seconds).
fn seconds(value: &str) -> Duration {
    let n = value.strip_suffix('s').and_then(|n| n.parse().ok());
    Duration::from_secs(n.unwrap_or_else(|| panic!("{value:?} is not a whole number of seconds")))
}

/// One Worker process: runs until its standard input closes, then prints what its handlers and its claims noted.
async fn worker(id: String) {
    let url = std::env::var(URL_VARIABLE).expect("the coordinator names the database");
    let slots = env_usize("ALMANAC_BENCH_SLOTS", 4);
    let connections = WorkerConnections {
        shared: shipped("database.max_connections").parse().expect("a number"),
        reserved: slots + 1,
        acquire_timeout: seconds(&shipped("database.connect_timeout")),
        lease: LeaseDuration::DEFAULT.get(),
    };
    let calls: Arc<Mutex<Calls>> = Arc::default();
    let store = Arc::new(Timed { store: PgStore::for_worker(&url, connections).unwrap(), calls: calls.clone() });
    let runs: Arc<Mutex<Vec<Noted>>> = Arc::default();
    let handlers =
        WorkKind::ALL.iter().fold(HandlerRegistry::new(), |r, k| r.register(Noting { kind: *k, runs: runs.clone() }));
    let mut config = ExecutorConfig::new(WorkerId::new(id).unwrap(), ServedConfigs::All);
    config.slots = slots;
    let executor = Executor::new(store, handlers, config).unwrap();
    let (stop, shutdown) = (CancellationToken::new(), CancellationToken::new());
    let listener = tokio::spawn(listen_for_work(url, executor.waker(), stop.clone()));
    let closed = shutdown.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        closed.cancel();
    });
    let report = executor.run(shutdown).await;
    stop.cancel();
    let _ = listener.await;
    let runs = std::mem::take(&mut *runs.lock().unwrap());
    let calls = std::mem::take(&mut *calls.lock().unwrap());
    // This process's CPU seconds (user and system) from /proc/self/stat, in ticks of 1/100 s.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu_seconds = (ticks(14) + ticks(15)) / 100.0;
    println!(
        "{}",
        serde_json::json!({
            "runs": runs, "claims": calls.claims, "empty_claims": calls.empty_claims, "batches": calls.batches,
            "releases": calls.releases, "asked": calls.asked, "got": calls.got, "clean": report.is_clean(),
            "cpu_seconds": cpu_seconds,
        })
    );
}

/// A fresh database with `configs` configs of `per_config` items each and as many unscoped items, all due,
/// enqueued oldest first (a config's items in order).
async fn database(configs: usize, per_config: usize) -> (TestDatabase, AsyncPgConnection, usize) {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(&format!(
        "INSERT INTO users (id, username) SELECT gen_random_uuid(), 'user' || g FROM generate_series(1, 5) g;
         INSERT INTO storage_configs (id, user_id, root_path, created_at)
         SELECT gen_random_uuid(), (SELECT id FROM users ORDER BY username OFFSET g % 5 LIMIT 1), '/lib/' || g,
                now() + g * interval '1 microsecond'
           FROM generate_series(1, {configs}) g;
         CREATE TABLE bench_attempts (item uuid, config uuid, attempt integer, started bigint, ended bigint);"
    ))
    .await
    .unwrap();
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = Uuid)]
        id: uuid::Uuid,
    }
    let ids: Vec<Id> = sql_query("SELECT id FROM storage_configs ORDER BY created_at").load(&mut conn).await.unwrap();
    let ids: Vec<StorageConfigId> = ids.into_iter().map(|r| StorageConfigId::from_uuid(r.id)).collect();
    // Interleaved: a config's item, then an unscoped one; config after config, round after round.
    let mut items = Vec::new();
    for _ in 0..per_config {
        for id in &ids {
            items.push(NewWorkItem::new(WorkKind::BurstDetection, Scope::Config(*id)).unwrap());
            items.push(NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap());
        }
    }
    if let Ok(path) = std::env::var("ALMANAC_BENCH_SETUP_SQL") {
        let sql = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
        conn.batch_execute(&sql).await.unwrap_or_else(|e| panic!("running {path}: {e}"));
    }
    let store = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
    store.enqueue_many(&items).await.unwrap();
    // One statement each: VACUUM runs outside a transaction only.
    for table in ["work_items", "queue_heads"] {
        conn.batch_execute(&format!("VACUUM ANALYZE {table}")).await.unwrap();
    }
    (db, conn, items.len())
}

/// Seconds since the oldest transaction open anywhere on the cluster (other than this session's) began: while
/// one is open, no row version that died after it began can be removed, in any database, and the claim walks
/// past every head version written since (docs/queue.md, "Many Workers").
async fn oldest_transaction_seconds(conn: &mut AsyncPgConnection) -> f64 {
    #[derive(QueryableByName)]
    struct Seconds {
        #[diesel(sql_type = diesel::sql_types::Double)]
        seconds: f64,
    }
    sql_query(
        "SELECT coalesce(extract(epoch FROM max(now() - xact_start)), 0)::float8 AS seconds FROM pg_stat_activity
          WHERE (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL) AND pid <> pg_backend_pid()",
    )
    .get_result::<Seconds>(conn)
    .await
    .unwrap()
    .seconds
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn count(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    sql_query(sql).get_result::<Count>(conn).await.unwrap().n
}

fn spawn_worker(url: &str, id: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["worker", id])
        .env(URL_VARIABLE, url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting a Worker process")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Writes what the handlers noted to `bench_attempts`.
async fn record(conn: &mut AsyncPgConnection, runs: &[Noted]) {
    for chunk in runs.chunks(10_000) {
        sql_query(
            "INSERT INTO bench_attempts (item, config, attempt, started, ended)
             SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::integer[], $4::bigint[], $5::bigint[])",
        )
        .bind::<Array<Uuid>, _>(chunk.iter().map(|r| r.0).collect::<Vec<_>>())
        .bind::<Array<Nullable<Uuid>>, _>(chunk.iter().map(|r| r.1).collect::<Vec<_>>())
        .bind::<Array<Integer>, _>(chunk.iter().map(|r| r.2).collect::<Vec<_>>())
        .bind::<Array<BigInt>, _>(chunk.iter().map(|r| r.3).collect::<Vec<_>>())
        .bind::<Array<BigInt>, _>(chunk.iter().map(|r| r.4).collect::<Vec<_>>())
        .execute(conn)
        .await
        .unwrap();
    }
}

/// Pairs of runs of one config that intersect; items of a config whose run started before an older item's;
/// items run more than once.
async fn checks(conn: &mut AsyncPgConnection) -> serde_json::Value {
    let overlaps = count(
        conn,
        "SELECT count(*) AS n FROM bench_attempts a JOIN bench_attempts b
            ON a.config = b.config AND a.item < b.item AND a.started < b.ended AND b.started < a.ended",
    )
    .await;
    let inversions = count(
        conn,
        "SELECT count(*) AS n FROM (
             SELECT w.requested_at, w.id,
                    lag(w.requested_at) OVER o AS prev_requested_at, lag(w.id) OVER o AS prev_id
               FROM bench_attempts a JOIN work_items w ON w.id = a.item
              WHERE a.config IS NOT NULL
             WINDOW o AS (PARTITION BY a.config ORDER BY a.started, a.item)) s
          WHERE (prev_requested_at, prev_id) > (requested_at, id)",
    )
    .await;
    let repeated = count(conn, "SELECT count(*) - count(DISTINCT item) AS n FROM bench_attempts").await;
    #[derive(QueryableByName)]
    struct Example {
        #[diesel(sql_type = diesel::sql_types::Text)]
        example: String,
    }
    // The first few inversions as they happened: the older item's and the newer one's queue rows and runs.
    let examples: Vec<Example> = sql_query(
        "SELECT concat_ws(' ', 'config', s.config, 'newer', s.prev_id, 'requested', s.prev_requested_at,
                          'attempt', s.prev_attempt, 'started', s.prev_started, 'before older', s.id, 'requested',
                          s.requested_at, 'attempt', s.attempt, 'started', s.started) AS example
           FROM (SELECT a.config, w.id, w.requested_at, w.attempt, a.started,
                        lag(w.requested_at) OVER o AS prev_requested_at, lag(w.id) OVER o AS prev_id,
                        lag(w.attempt) OVER o AS prev_attempt, lag(a.started) OVER o AS prev_started
                   FROM bench_attempts a JOIN work_items w ON w.id = a.item
                  WHERE a.config IS NOT NULL
                 WINDOW o AS (PARTITION BY a.config ORDER BY a.started, a.item)) s
          WHERE (s.prev_requested_at, s.prev_id) > (s.requested_at, s.id)
          LIMIT 3",
    )
    .load(conn)
    .await
    .unwrap();
    let examples: Vec<String> = examples.into_iter().map(|e| e.example).collect();
    serde_json::json!({
        "overlaps": overlaps, "fifo_inversions": inversions, "extra_attempts": repeated,
        "fifo_inversion_examples": examples,
    })
}

/// One run: `processes` Workers drain a fresh queue.
async fn run(processes: usize, configs: usize, per_config: usize) -> serde_json::Value {
    let (db, mut conn, items) = database(configs, per_config).await;
    let started = Instant::now();
    let mut children: Vec<Child> = (0..processes).map(|i| spawn_worker(db.url(), &format!("bench-{i}"))).collect();
    let (mut peak, mut oldest) = (0, 0.0_f64);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sessions = count(
            &mut conn,
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .await;
        peak = peak.max(sessions);
        oldest = oldest.max(oldest_transaction_seconds(&mut conn).await);
        let done = count(&mut conn, "SELECT count(*) AS n FROM work_items WHERE status = 'succeeded'").await;
        if done as usize >= items {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(600), "{done} of {items} items done after ten minutes");
    }
    let seconds = started.elapsed().as_secs_f64();
    let server_cpu = sessions_cpu_seconds(&mut conn).await;
    // Each process ends when its standard input closes, and says what it saw.
    for child in &mut children {
        drop(child.stdin.take());
    }
    let (mut runs, mut claims, mut batches, mut clean) = (Vec::new(), Vec::new(), Vec::new(), true);
    let (mut empty, mut releases, mut asked, mut got, mut cpu) = (0, 0, 0, 0, 0.0);
    for child in children {
        let output = child.wait_with_output().expect("a Worker process's report");
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a Worker process's JSON");
        runs.extend(serde_json::from_value::<Vec<Noted>>(report["runs"].clone()).unwrap());
        claims.extend(serde_json::from_value::<Vec<f64>>(report["claims"].clone()).unwrap());
        batches.extend(serde_json::from_value::<Vec<f64>>(report["batches"].clone()).unwrap());
        empty += report["empty_claims"].as_u64().unwrap_or(0);
        releases += report["releases"].as_u64().unwrap_or(0);
        asked += report["asked"].as_u64().unwrap_or(0);
        got += report["got"].as_u64().unwrap_or(0);
        cpu += report["cpu_seconds"].as_f64().unwrap_or(0.0);
        clean &= report["clean"].as_bool() == Some(true);
    }
    record(&mut conn, &runs).await;
    serde_json::json!({
        "processes": processes,
        "items": items,
        "seconds": seconds,
        "items_per_second": items as f64 / seconds,
        "claim_ms": latency(&mut claims),
        "empty_claims": empty,
        "completions_and_claim_ms": latency(&mut batches),
        "releases": releases,
        "items_asked_for": asked,
        "items_claimed": got,
        "worker_processes_cpu_ms_per_item": cpu * 1e3 / items as f64,
        "their_sessions_cpu_ms_per_item": server_cpu * 1e3 / items as f64,
        "peak_connections": peak,
        "oldest_open_transaction_on_the_cluster_seconds": oldest,
        "load_average_1min_at_end": load_average(),
        "checks": checks(&mut conn).await,
        "clean_shutdowns": clean,
    })
}

/// CPU seconds used so far by the server processes of this database's other sessions (the Workers'; from
/// `/proc/<pid>/stat`, in ticks of 1/100 s): read while they are still open, so a session a pool closed earlier
/// is missed.
async fn sessions_cpu_seconds(conn: &mut AsyncPgConnection) -> f64 {
    #[derive(QueryableByName)]
    struct Pid {
        #[diesel(sql_type = Integer)]
        pid: i32,
    }
    let pids: Vec<Pid> =
        sql_query("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
            .load(conn)
            .await
            .unwrap();
    let cpu = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        (ticks(14) + ticks(15)) / 100.0
    };
    pids.iter().map(|p| cpu(p.pid)).sum()
}

/// The machine's one-minute load average (`/proc/loadavg`): the benchmark shares its cores.
fn load_average() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(f64::NAN)
}

/// How many, p50 and p99 of `samples` (milliseconds).
fn latency(samples: &mut [f64]) -> serde_json::Value {
    samples.sort_by(f64::total_cmp);
    serde_json::json!({
        "count": samples.len(), "p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99),
    })
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, mode, id] = args.as_slice()
        && mode == "worker"
    {
        return worker(id.clone()).await;
    }
    let configs = env_usize("ALMANAC_BENCH_CONFIGS", 1_000);
    let per_config = env_usize("ALMANAC_BENCH_PER_CONFIG", 10);
    let repeats = env_usize("ALMANAC_BENCH_ROUNDS", 2).max(1);
    let mut runs = Vec::new();
    let counts: Vec<usize> = std::env::var("ALMANAC_BENCH_PROCESSES")
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|_| vec![1, 2, 4, 8, 16]);
    for processes in counts {
        for _ in 0..repeats {
            let run = run(processes, configs, per_config).await;
            eprintln!("{run}");
            runs.push(run);
        }
    }
    let report = serde_json::json!({
        "benchmark": "workers",
        "date": chrono::Utc::now().format("%Y-%m-%d").to_string(),
        "cores": std::thread::available_parallelism().map_or(2, usize::from),
        "configs": configs, "items_per_config": per_config, "unscoped_items": configs * per_config,
        "slots_per_process": env_usize("ALMANAC_BENCH_SLOTS", 4),
        "runs": runs,
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
