//! The claim at 10,000 configs (issue #26 item 5), run through `cargo xtask bench claim`: JSON on stdout.
//!
//! One database of 10,000 configs and 1,000,000 queued items (100 a config, half the configs busy with a running
//! item that never ends), loaded with set-based SQL, and a copy of its queue for the floor ([`FLOOR_SETUP`]: the
//! textbook `FOR UPDATE SKIP LOCKED` queue without the per-config rule, on the same rows, its statements prepared
//! as the store prepares its own). Four rounds, the store's claim and the floor in turn (store, floor, store,
//! floor), each starting from the same queue (the items the rounds before completed queued again, the rows they
//! left dead vacuumed away). What the store costs beyond the floor is what the rule costs; the floor's p99 back to
//! back is what eight claimers get on this machine from a claim without it. Until 2026-12-05 the baseline was the
//! claim before migration 000027 (`git show 21189ad:crates/store-pg/examples/claim_bench.rs`). Each round gives:
//! - for the store's rounds, `EXPLAIN (ANALYZE, BUFFERS)` of its claim of eight (the text the store prepares, read back from
//!   `pg_prepared_statements`), first on a new connection (`cold`: the functions' plans are made then) and
//!   then the median of five more on it (`warm`, as on a Worker's pooled connection), with the time spent in
//!   the heads' trigger and in the candidates' function (`pg_stat_xact_user_functions`);
//! - claim latency p50/p95/p99 of 8 concurrent claimers, each claiming eight (timed) and completing what it
//!   claimed (the store's: `claim_many`, then `complete_many_and_claim` claiming none), with the same of the claims that
//!   claimed something and how many claimed nothing (every candidate taken by the others), for
//!   `ALMANAC_BENCH_SECONDS` (default 10) each, back to back (a closed loop: on two cores each claim then
//!   queues for the CPU behind the others' claims and completions, so its latency is mostly that queue,
//!   `claimers` / rate);
//! - the same at a steady pace, a tenth and a quarter of the rate they reached back to back
//!   (`claimers_paced`, latency counted from each claim's turn, the first second not counted): the claim's
//!   latency at a load the machine can carry. Half the rate was measured too until 2026-12-05; on a machine
//!   whose speed swings by a third or more between minutes (this one), a phase offered half the rate of a fast
//!   minute could exceed what a slow one carries, and its latency measured the backlog of late turns (p99 of
//!   0.2 to 1.6 s in some rounds).
//!
//! Each phase notes the autovacuums and autoanalyses of the queue's tables it saw (an analyse makes every
//! connection plan the claim again).
//!
//! `ALMANAC_BENCH_SCALE_ITEMS` (default 1,000,000) shrinks the load for a quick run; `ALMANAC_BENCH_CLAIMERS`
//! (default 8) sets the number of claimers.

use std::time::{Duration, Instant};

use almanac_domain::{
    WorkKind, WorkQueue, WorkerId,
    ports::{ClaimRequest, LeaseDuration, ServedConfigs},
};
use std::sync::{Arc, OnceLock};

use almanac_store_pg::{Bind, PgStore, Prepared, claim_binds, claim_with};
use almanac_testdb::TestDatabase;
use diesel::sql_types::{BigInt, Double, Text};
use diesel::{QueryableByName, sql_query};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use tokio::sync::Mutex;

/// The floor: the textbook queue on the same data, without the per-config rule. A copy of `work_items` with its
/// columns, defaults, checks and foreign key, and the indexes that are not the rule's (the primary key, the
/// queued dedup keys, the finished and running items, the foreign key's, and the claim's own order of queued
/// items), but no heads, no triggers and no running-config index. Its claim takes the oldest due items of the
/// Worker's kinds `FOR UPDATE SKIP LOCKED`, whatever their configs; its completion ends them by id and token.
/// Both are prepared once per connection, as the store's statements are ([`Prepared`]). What the store's claim
/// and completions cost beyond these is the rule's cost; the p99 of the floor back to back is what eight
/// claimers queueing for this machine's two cores get from a claim without it. Analysed, as the load analyses the
/// queue.
const FLOOR_SETUP: &str = "
    CREATE TABLE floor_items (LIKE work_items INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
    INSERT INTO floor_items SELECT * FROM work_items;
    ALTER TABLE floor_items ADD PRIMARY KEY (id),
        ADD FOREIGN KEY (storage_config_id) REFERENCES storage_configs (id) ON DELETE CASCADE;
    CREATE INDEX ON floor_items (storage_config_id);
    CREATE UNIQUE INDEX ON floor_items (dedup_key) WHERE status = 'queued';
    CREATE INDEX ON floor_items (finished_at) WHERE status IN ('succeeded', 'failed', 'cancelled');
    CREATE INDEX ON floor_items (lease_expires_at) WHERE status = 'running';
    CREATE INDEX ON floor_items (requested_at, id) WHERE status = 'queued';
    ANALYZE floor_items;";

/// The floor's picks: the oldest due items of the Worker's kinds, whatever their config, `$4` the kinds as the
/// store binds them. The rest of its claim, what it sets and returns, is the store's own (see [`floor_claim`]).
const FLOOR_PICKS: &str = "WHERE w.id = ANY (ARRAY (
       SELECT q.id FROM floor_items AS q
        WHERE q.status = 'queued' AND q.run_after <= now() AND q.kind = ANY ($4)
        ORDER BY q.requested_at, q.id
        LIMIT {batch}
          FOR UPDATE SKIP LOCKED))
RETURNING w.*";

/// Where the store's claim (as a connection prepares it) stops setting and starts picking.
const STORE_PICKS: &str = "WHERE w.id = ANY (ARRAY (";

/// The floor's claim of [`BATCH`], made once from the store's claim text: its update of `floor_items` with the
/// store's own settings (status, attempt, worker, lease, token), bound by the store's own `claim_binds`, and
/// [`FLOOR_PICKS`] in place of the per-config candidates.
static FLOOR_CLAIM: OnceLock<String> = OnceLock::new();

/// The floor's completion of what one claim took: its ids and its token.
const FLOOR_COMPLETE: &str = "UPDATE floor_items AS w
   SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
 WHERE w.id = ANY ($1) AND w.claim_token = $2 AND w.status = 'running'";

/// The two sides of every run, each measured in two rounds, in turn: the store's claim and the floor.
const SIDES: [Side; 4] = [Side::Store, Side::Floor, Side::Store, Side::Floor];

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Store,
    Floor,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Store => "store",
            Side::Floor => "floor",
        }
    }
}

const CONFIGS: usize = 10_000;
const BATCH: usize = 8;
/// The loads the paced claimers offer, as shares of the rate the same claimers reached back to back.
const PACED_SHARES: [f64; 2] = [0.1, 0.25];
/// The paced claimers' first turns, not counted (see [`paced`]).
const WARM_UP: Duration = Duration::from_secs(1);

#[derive(QueryableByName)]
struct TextRow {
    #[diesel(sql_type = Text)]
    text: String,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct FunctionTime {
    #[diesel(sql_type = Double)]
    heads: f64,
    #[diesel(sql_type = Double)]
    candidates: f64,
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

/// The middle value, or the mean of the two middle values.
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// 10,000 configs of five users; `items` queued over them, the oldest first config by config; half the configs
/// busy (their oldest item running, its lease a day long).
async fn load(items: usize) -> (TestDatabase, AsyncPgConnection, f64) {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    let started = Instant::now();
    conn.batch_execute(&format!(
        "ALTER DATABASE \"{name}\" SET track_functions = 'all';
         INSERT INTO users (id, username) SELECT gen_random_uuid(), 'user' || g FROM generate_series(1, 5) g;
         INSERT INTO storage_configs (id, user_id, root_path, created_at)
         SELECT gen_random_uuid(), (SELECT id FROM users ORDER BY username OFFSET g % 5 LIMIT 1), '/lib/' || g,
                now() + g * interval '1 microsecond'
           FROM generate_series(1, {CONFIGS}) g;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection', c.id,
                now() - interval '1 day' + (g * {CONFIGS} + c.n) * interval '1 microsecond'
           FROM generate_series(1, {per_config}) g
          CROSS JOIN (SELECT id, row_number() OVER (ORDER BY created_at) AS n FROM storage_configs) c;
         UPDATE work_items w SET status = 'running', attempt = 1, worker_id = 'busy',
                lease_expires_at = now() + interval '1 day'
          WHERE w.id IN (SELECT DISTINCT ON (q.storage_config_id) q.id FROM work_items q
                          JOIN (SELECT id FROM storage_configs ORDER BY created_at LIMIT {half}) b
                            ON b.id = q.storage_config_id
                          ORDER BY q.storage_config_id, q.requested_at);",
        name = db.name(),
        per_config = (items / CONFIGS).max(1),
        half = CONFIGS / 2,
    ))
    .await
    .unwrap_or_else(|e| panic!("loading the scenario: {e}"));
    // One statement each: VACUUM runs outside a transaction only.
    for table in ["work_items", "queue_heads"] {
        conn.batch_execute(&format!("VACUUM ANALYZE {table}")).await.unwrap();
    }
    (db, conn, started.elapsed().as_secs_f64())
}

/// The store's claim of `BATCH` as a connection prepares it: claimed once on a connection of its own (rolled
/// back), its text read back from `pg_prepared_statements`.
async fn claim_text(db: &TestDatabase) -> String {
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute("BEGIN").await.unwrap();
    claim_with(&mut conn, &request("explain"), BATCH).await.unwrap();
    conn.batch_execute("ROLLBACK").await.unwrap();
    let row: TextRow = sql_query(
        "SELECT statement AS text FROM pg_prepared_statements
          WHERE statement LIKE '%almanac_claim_candidates%' AND statement NOT LIKE '%pg_prepared_statements%'",
    )
    .get_result(&mut conn)
    .await
    .unwrap();
    row.text
}

/// Milliseconds this session has spent so far in the heads' triggers and in the candidates' function. The view
/// also holds the session's counts of earlier transactions not yet reported: compare two readings.
async fn function_time(conn: &mut AsyncPgConnection) -> (f64, f64) {
    let spent: FunctionTime = sql_query(
        "SELECT coalesce(sum(total_time) FILTER (WHERE funcname LIKE 'almanac_queue_heads_%'), 0) AS heads,
                coalesce(sum(total_time) FILTER (WHERE funcname = 'almanac_claim_candidates'), 0) AS candidates
           FROM pg_stat_xact_user_functions",
    )
    .get_result(conn)
    .await
    .unwrap();
    (spent.heads, spent.candidates)
}

/// One `EXPLAIN (ANALYZE, BUFFERS)` of the prepared claim `c` in a transaction that is rolled back: the
/// statement's figures, and the milliseconds it spent in the heads' trigger and the candidates.
async fn explain_once(conn: &mut AsyncPgConnection) -> serde_json::Value {
    let kinds: Vec<String> = WorkKind::ALL.iter().map(|k| format!("'{}'", k.as_str())).collect();
    conn.batch_execute("BEGIN").await.unwrap();
    let before = function_time(conn).await;
    let plan: TextRow = sql_query(format!(
        "SELECT pg_temp.explained('EXECUTE c(''explain'', 60, gen_random_uuid(), ARRAY[{}])') AS text",
        kinds.join(", ").replace('\'', "''")
    ))
    .get_result(conn)
    .await
    .unwrap();
    let after = function_time(conn).await;
    let spent = FunctionTime { heads: after.0 - before.0, candidates: after.1 - before.1 };
    conn.batch_execute("ROLLBACK").await.unwrap();
    let plan: serde_json::Value = serde_json::from_str(&plan.text).unwrap();
    let top = &plan[0];
    let trigger_ms: f64 = top["Triggers"].as_array().into_iter().flatten().filter_map(|t| t["Time"].as_f64()).sum();
    serde_json::json!({
        "execution_ms": top["Execution Time"],
        "planning_ms": top["Planning Time"],
        "rows": top["Plan"]["Actual Rows"],
        "shared_buffers_hit": top["Plan"]["Shared Hit Blocks"],
        "shared_buffers_read": top["Plan"]["Shared Read Blocks"],
        "triggers_ms": trigger_ms,
        "heads_trigger_ms": spent.heads,
        "candidates_ms": spent.candidates,
    })
}

/// EXPLAIN of the claim of eight on a new connection (`cold`), then the median of five more (`warm`).
async fn explain(db: &TestDatabase, text: &str) -> serde_json::Value {
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(&format!(
        "CREATE FUNCTION pg_temp.explained(q text) RETURNS text LANGUAGE plpgsql AS $$
         DECLARE plan text;
         BEGIN
             EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || q INTO plan;
             RETURN plan;
         END $$;
         PREPARE c(text, double precision, uuid, text[]) AS {text};"
    ))
    .await
    .unwrap();
    let cold = explain_once(&mut conn).await;
    let mut warm = Vec::new();
    for _ in 0..5 {
        warm.push(explain_once(&mut conn).await);
    }
    let field = |name: &str| median(&warm.iter().filter_map(|w| w[name].as_f64()).collect::<Vec<_>>());
    serde_json::json!({
        "cold": cold,
        "warm_median": {
            "execution_ms": field("execution_ms"),
            "planning_ms": field("planning_ms"),
            "shared_buffers_hit": field("shared_buffers_hit"),
            "triggers_ms": field("triggers_ms"),
            "heads_trigger_ms": field("heads_trigger_ms"),
            "candidates_ms": field("candidates_ms"),
        },
    })
}

/// Seconds since the oldest transaction open anywhere on the cluster began (0 when none): while one is open, no
/// row version that died after it began can be removed or passed over cheaply, in any database, so the claim
/// walks past every head version written since (see docs/queue.md, "Many Workers").
async fn oldest_transaction_seconds(conn: &mut AsyncPgConnection) -> f64 {
    sql_query(
        "SELECT coalesce(extract(epoch FROM max(now() - xact_start)), 0)::float8 AS seconds FROM pg_stat_activity
          WHERE (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL) AND pid <> pg_backend_pid()",
    )
    .get_result::<Seconds>(conn)
    .await
    .unwrap()
    .seconds
}

/// The machine's one-minute load average (`/proc/loadavg`): the benchmark shares its cores.
fn load_average() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(f64::NAN)
}

#[derive(QueryableByName)]
struct AutovacuumCounts {
    #[diesel(sql_type = BigInt)]
    vacuums: i64,
    #[diesel(sql_type = BigInt)]
    analyzes: i64,
    #[diesel(sql_type = BigInt)]
    heads_vacuums: i64,
}

/// How many times autovacuum has vacuumed and analysed the queue's two tables so far, and how many times sessions
/// (the stores' upkeep, the rounds' setup) have vacuumed `queue_heads`. An analyse of a table invalidates every
/// plan that reads it, on every connection, so the claims after it are planned again.
async fn autovacuum_counts(conn: &mut AsyncPgConnection) -> (i64, i64, i64) {
    let counts: AutovacuumCounts = sql_query(
        "SELECT coalesce(sum(autovacuum_count), 0)::bigint AS vacuums,
                coalesce(sum(autoanalyze_count), 0)::bigint AS analyzes,
                coalesce(sum(vacuum_count) FILTER (WHERE relname = 'queue_heads'), 0)::bigint AS heads_vacuums
           FROM pg_stat_user_tables WHERE relname IN ('work_items', 'queue_heads')",
    )
    .get_result(conn)
    .await
    .unwrap();
    (counts.vacuums, counts.analyzes, counts.heads_vacuums)
}

/// Notes in `report` how many autovacuums and autoanalyses of the queue's tables, and vacuums of the heads by the
/// stores, ran since `before`; the counts now.
async fn note_autovacuum(
    conn: &mut AsyncPgConnection,
    report: &mut serde_json::Value,
    before: (i64, i64, i64),
) -> (i64, i64, i64) {
    let now = autovacuum_counts(conn).await;
    report["autovacuums_of_the_queue_tables"] = serde_json::json!(now.0 - before.0);
    report["autoanalyzes_of_the_queue_tables"] = serde_json::json!(now.1 - before.1);
    report["store_vacuums_of_the_heads"] = serde_json::json!(now.2 - before.2);
    now
}

#[derive(QueryableByName)]
struct Seconds {
    #[diesel(sql_type = Double)]
    seconds: f64,
}

/// A claimer: a store of its own, as a Worker keeps its pool, or a connection of its own for the floor.
#[derive(Clone)]
enum Claimer {
    Store(PgStore),
    Floor(Arc<Mutex<AsyncPgConnection>>),
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: uuid::Uuid,
}

/// One claim of `BATCH` and the completion of what it claimed: the claim's latency in milliseconds counted from
/// `since`, and how many items it claimed.
async fn claim_and_complete(claimer: &Claimer, request: &ClaimRequest, since: Instant) -> (f64, usize) {
    match claimer {
        Claimer::Store(store) => {
            let claimed = store.claim_many(request, BATCH).await.unwrap();
            let latency = since.elapsed().as_secs_f64() * 1000.0;
            let done: Vec<_> = claimed.iter().map(|c| (c.fence, None)).collect();
            if !done.is_empty() {
                store.complete_many_and_claim(&done, request, 0).await.unwrap();
            }
            (latency, claimed.len())
        }
        Claimer::Floor(conn) => {
            let mut conn = conn.lock().await;
            let (token, claim) = (uuid::Uuid::new_v4(), FLOOR_CLAIM.get().expect("made before the floor's rounds"));
            let claimed: Vec<Id> = Prepared::new(claim, claim_binds(request, token)).load(&mut *conn).await.unwrap();
            let latency = since.elapsed().as_secs_f64() * 1000.0;
            if !claimed.is_empty() {
                let ids = claimed.iter().map(|c| c.id).collect();
                Prepared::new(FLOOR_COMPLETE, vec![Bind::UuidArray(ids), Bind::Uuid(token)])
                    .execute(&mut *conn)
                    .await
                    .unwrap();
            }
            (latency, claimed.len())
        }
    }
}

/// Makes the floor's claim from `store`, the store's claim as a connection prepares it (see [`FLOOR_CLAIM`]).
fn floor_claim(store: &str) -> String {
    let (sets, _) = store.split_once(STORE_PICKS).expect("the store's claim sets its items, then picks them");
    assert!(sets.starts_with("UPDATE work_items AS w"), "the store's claim updates work_items: {sets}");
    let picks = FLOOR_PICKS.replace("{batch}", &BATCH.to_string());
    format!("{}{picks}", sets.replacen("UPDATE work_items", "UPDATE floor_items", 1))
}

/// One claim's latency in milliseconds and how many items it claimed.
type Sample = (f64, usize);

/// How many claims `samples` holds, with their p50, p95 and p99, over `seconds`; and the same of the claims that
/// claimed something. A claim that finds every candidate taken by the others is quick and claims nothing: the
/// more of those, the lower the percentiles of all claims, so they are not read alone.
fn summary(samples: Vec<Sample>, seconds: f64) -> serde_json::Value {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let with_items = sorted(samples.iter().filter(|(_, n)| *n > 0).map(|(ms, _)| *ms).collect());
    let all = sorted(samples.iter().map(|(ms, _)| *ms).collect());
    serde_json::json!({
        "claims": all.len(),
        "claims_per_second": all.len() as f64 / seconds,
        "claims_that_claimed_nothing": all.len() - with_items.len(),
        "p50_ms": percentile(&all, 0.5),
        "p95_ms": percentile(&all, 0.95),
        "p99_ms": percentile(&all, 0.99),
        "p50_ms_of_claims_with_items": percentile(&with_items, 0.5),
        "p99_ms_of_claims_with_items": percentile(&with_items, 0.99),
    })
}

/// `claimers` loops, each claiming `BATCH` (timed) and completing what it claimed, for `seconds`: the claims'
/// latencies and rates.
async fn latencies(stores: &[Claimer], seconds: u64) -> serde_json::Value {
    let started = Instant::now();
    let tasks: Vec<_> = (0..stores.len())
        .map(|w| {
            let store = stores[w].clone();
            tokio::spawn(async move {
                let request = request(&format!("claimer{w}"));
                let (mut samples, mut items) = (Vec::new(), 0usize);
                let deadline = Instant::now() + Duration::from_secs(seconds);
                while Instant::now() < deadline {
                    let (latency, claimed) = claim_and_complete(&store, &request, Instant::now()).await;
                    samples.push((latency, claimed));
                    items += claimed;
                }
                (samples, items)
            })
        })
        .collect();
    let (mut samples, mut items) = (Vec::new(), 0);
    for t in tasks {
        let (s, n) = t.await.unwrap();
        samples.extend(s);
        items += n;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut report = summary(samples, elapsed);
    report["items_per_second"] = serde_json::json!(items as f64 / elapsed);
    report
}

/// `claimers` claimers taking turns at a steady rate, `rate` claims a second in all (each claimer's turns a
/// fixed period apart, the claimers' turns spread evenly over it), each claiming `BATCH` and completing what it
/// claimed before its next turn, for `seconds`: the claims' latencies at that load. A claim's latency counts
/// from its turn, so a claim that starts late because the claimer's previous one ran long counts the wait
/// (no coordinated omission). The claimers' stores are those of the run back to back before, so their
/// connections have planned the queue's functions (a cold claim takes 7 to 11 ms on the server, once per
/// connection, where a Worker keeps its connections for hours); the turns of the first [`WARM_UP`] run but
/// are not counted all the same.
async fn paced(stores: &[Claimer], rate: f64, seconds: u64) -> serde_json::Value {
    let claimers = stores.len();
    let period = Duration::from_secs_f64(claimers as f64 / rate);
    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..claimers)
        .map(|w| {
            let store = stores[w].clone();
            tokio::spawn(async move {
                let request = request(&format!("paced{w}"));
                let mut samples = Vec::new();
                let mut turn = started + period.mul_f64(w as f64 / claimers as f64);
                while turn < end {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(turn)).await;
                    let (latency, claimed) = claim_and_complete(&store, &request, turn).await;
                    if turn >= started + WARM_UP {
                        samples.push((latency, claimed));
                    }
                    turn += period;
                }
                samples
            })
        })
        .collect();
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    let mut report = summary(samples, started.elapsed().as_secs_f64() - WARM_UP.as_secs_f64());
    report["offered_claims_per_second"] = serde_json::json!(rate);
    report
}

#[tokio::main]
async fn main() {
    let items = env_usize("ALMANAC_BENCH_SCALE_ITEMS", 1_000_000);
    let seconds = env_usize("ALMANAC_BENCH_SECONDS", 10) as u64;
    let claimers = env_usize("ALMANAC_BENCH_CLAIMERS", 8);
    let (db, mut conn, load_seconds) = load(items).await;
    let queued = sql_query("SELECT count(*) AS n FROM work_items WHERE status = 'queued'")
        .get_result::<Count>(&mut conn)
        .await
        .unwrap()
        .n;
    eprintln!("loaded {queued} queued items over {CONFIGS} configs in {load_seconds:.0} s");
    conn.batch_execute(FLOOR_SETUP).await.unwrap_or_else(|e| panic!("setting up the floor: {e}"));
    let store_claim = claim_text(&db).await;
    FLOOR_CLAIM.get_or_init(|| floor_claim(&store_claim));
    let mut rounds = Vec::new();
    for side in SIDES {
        // Every round starts from the queue the first started from: the items the rounds before completed are
        // queued again as they were loaded (the heads' triggers refresh their configs), and the row versions
        // left dead are vacuumed away. Otherwise a later round would walk more dead versions at the front of the
        // heads' walk than an earlier one, and the fourth would find the claimable items (half the configs' 100
        // each) running out.
        for table in ["work_items", "floor_items"] {
            conn.batch_execute(&format!(
                "UPDATE {table} SET status = 'queued', attempt = 0, worker_id = NULL, started_at = NULL,
                        heartbeat_at = NULL, finished_at = NULL, lease_expires_at = NULL, claim_token = NULL,
                        result = NULL
                  WHERE status = 'succeeded'"
            ))
            .await
            .unwrap_or_else(|e| panic!("queueing the items of the rounds before again: {e}"));
        }
        for table in ["work_items", "queue_heads", "floor_items"] {
            conn.batch_execute(&format!("VACUUM {table}")).await.unwrap();
        }
        let oldest = oldest_transaction_seconds(&mut conn).await;
        let explained = match side {
            Side::Store => explain(&db, &claim_text(&db).await).await,
            Side::Floor => serde_json::Value::Null,
        };
        // One store (or connection) per claimer for the whole round, as a Worker keeps its pool.
        let mut stores = Vec::new();
        for _ in 0..claimers {
            stores.push(match side {
                Side::Store => Claimer::Store(PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap()),
                Side::Floor => {
                    Claimer::Floor(Arc::new(Mutex::new(AsyncPgConnection::establish(db.url()).await.unwrap())))
                }
            });
        }
        let mut counts = autovacuum_counts(&mut conn).await;
        let mut closed = latencies(&stores, seconds).await;
        counts = note_autovacuum(&mut conn, &mut closed, counts).await;
        // The same claimers at shares of the rate they reached back to back.
        let capacity = closed["claims_per_second"].as_f64().unwrap_or(f64::NAN);
        let mut at_load = Vec::new();
        for share in PACED_SHARES {
            let mut run = paced(&stores, capacity * share, seconds).await;
            counts = note_autovacuum(&mut conn, &mut run, counts).await;
            at_load.push(run);
        }
        let round = serde_json::json!({
            "side": side.name(),
            "oldest_open_transaction_on_the_cluster_seconds": oldest,
            "load_average_1min": load_average(),
            "explain_claim_of_eight": explained,
            "claimers": closed,
            "claimers_paced": at_load,
        });
        eprintln!("{round}");
        rounds.push(round);
    }
    let of_side = |side: Side, field: &dyn Fn(&serde_json::Value) -> Option<f64>| {
        median(&rounds.iter().filter(|r| r["side"] == side.name()).filter_map(field).collect::<Vec<_>>())
    };
    let p99 = |side: Side| of_side(side, &|r| r["claimers"]["p99_ms"].as_f64());
    let rate = |side: Side| of_side(side, &|r| r["claimers"]["claims_per_second"].as_f64());
    let paced_p99 = |side: Side| {
        (0..PACED_SHARES.len())
            .map(|share| of_side(side, &|r| r["claimers_paced"][share]["p99_ms"].as_f64()))
            .collect::<Vec<_>>()
    };
    let report = serde_json::json!({
        "benchmark": "claim",
        "date": chrono::Utc::now().format("%Y-%m-%d").to_string(),
        "cores": std::thread::available_parallelism().map_or(2, usize::from),
        "configs": CONFIGS, "queued": queued, "busy_configs": CONFIGS / 2, "load_seconds": load_seconds,
        "claimers": claimers, "batch": BATCH, "seconds_per_round": seconds,
        "rounds": rounds,
        "p99_ms_store_median": p99(Side::Store),
        "p99_ms_floor_median": p99(Side::Floor),
        "p99_ratio_store_to_floor": p99(Side::Store) / p99(Side::Floor),
        "claims_per_second_store_median": rate(Side::Store),
        "claims_per_second_floor_median": rate(Side::Floor),
        "p99_ms_store_of_claims_with_items_median":
            of_side(Side::Store, &|r| r["claimers"]["p99_ms_of_claims_with_items"].as_f64()),
        "paced_shares_of_back_to_back_rate": PACED_SHARES,
        "p99_ms_store_paced_median": paced_p99(Side::Store),
        "p99_ms_floor_paced_median": paced_p99(Side::Floor),
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
