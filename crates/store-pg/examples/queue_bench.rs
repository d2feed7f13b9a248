//! Queue benchmarks (run through `cargo xtask bench queue`): JSON on stdout.
//!
//! - claim+complete throughput with no-op work for 1 and 8 concurrent claimers;
//! - claim latency (p50/p99) with 100,000 queued items of which 90% belong to one busy config, for our claim
//!   and, as the baseline measured in the same run, the textbook claim that scans the queue in order.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use almanac_domain::{ClaimRequest, LeaseDuration, NewWorkItem, Scope, ServedConfigs, WorkKind, WorkQueue, WorkerId};
use almanac_store_pg::{NewStorageConfig, PgStore, claim_with};
use almanac_testdb::TestDatabase;
use diesel::sql_query;
use diesel::sql_types::{Array, Double, Nullable, Text, Uuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

const TEXTBOOK_CLAIM: &str = "\
UPDATE work_items AS w
   SET status = 'running', attempt = w.attempt + 1, worker_id = $1, started_at = now(), heartbeat_at = now(),
       lease_expires_at = now() + $2 * interval '1 second', progress = NULL
 WHERE w.id = (
       SELECT q.id FROM work_items AS q
        WHERE q.status = 'queued' AND q.run_after <= now() AND q.kind = ANY($3)
          AND (q.storage_config_id IS NULL OR (
                EXISTS (SELECT 1 FROM storage_configs s WHERE s.id = q.storage_config_id AND s.is_active
                          AND ($4::uuid IS NULL OR s.user_id = $4))
                AND NOT EXISTS (SELECT 1 FROM work_items r
                                 WHERE r.storage_config_id = q.storage_config_id AND r.status = 'running')))
        ORDER BY q.requested_at, q.id
        LIMIT 1
          FOR UPDATE SKIP LOCKED)
RETURNING w.id";

fn request(worker: &str) -> ClaimRequest {
    ClaimRequest {
        worker_id: WorkerId::new(worker).unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::DEFAULT,
    }
}

async fn configs(store: &PgStore, n: usize) -> Vec<almanac_domain::StorageConfigId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let new =
            NewStorageConfig { username: format!("user{}", i % 5), root_path: PathBuf::from(format!("/lib/{i}")) };
        ids.push(store.add_storage_config(&new).await.unwrap().1.id);
    }
    ids
}

async fn throughput(claimers: usize) -> serde_json::Value {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), claimers + 2, Duration::from_secs(10)).unwrap();
    let ids = configs(&store, 50).await;
    let total = 2000;
    for i in 0..total {
        let scope = if i % 5 == 0 { Scope::Unscoped } else { Scope::Config(ids[i % ids.len()]) };
        let kind = if i % 5 == 0 { WorkKind::TokenCleanup } else { WorkKind::BurstDetection };
        store.enqueue(&NewWorkItem::new(kind, scope).unwrap()).await.unwrap();
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..claimers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut done = 0u32;
                let mut empty = 0;
                while empty < 3 {
                    match store.claim(&request(&format!("w{w}"))).await.unwrap() {
                        Some(item) => {
                            store.complete(item.fence, None).await.unwrap();
                            done += 1;
                            empty = 0;
                        }
                        None => {
                            empty += 1;
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                    }
                }
                done
            })
        })
        .collect();
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    serde_json::json!({"claimers": claimers, "items": done, "seconds": secs, "items_per_second": f64::from(done) / secs})
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn latency() -> serde_json::Value {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), 4, Duration::from_secs(10)).unwrap();
    let ids = configs(&store, 101).await;
    let busy = ids[0];
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    // 90,000 items of the busy config (oldest first), 9,000 over 100 other configs, 1,000 unscoped.
    conn.batch_execute(&format!(
        "INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection', '{busy}', now() - interval '1 day' + g * interval '1 ms'
           FROM generate_series(1, 90000) g;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection', c.id, now() - interval '1 hour' + g * interval '1 ms'
           FROM generate_series(1, 90) g CROSS JOIN storage_configs c WHERE c.id <> '{busy}';
         INSERT INTO work_items (id, kind, requested_at)
         SELECT gen_random_uuid(), 'token_cleanup', now() - interval '1 hour' + g * interval '1 ms'
           FROM generate_series(1, 1000) g;
         ANALYZE work_items;"
    ))
    .await
    .unwrap();
    // The busy config's one running item.
    store.claim(&request("busy")).await.unwrap().expect("claims the busy config's oldest item");
    let queued: i64 = 99_999;
    let samples = 300;
    let mut ours = Vec::new();
    let mut textbook = Vec::new();
    for _ in 0..samples {
        conn.batch_execute("BEGIN").await.unwrap();
        let t = Instant::now();
        let claimed = claim_with(&mut conn, &request("bench")).await.unwrap();
        ours.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(claimed.is_some_and(|c| c.item.scope != Scope::Config(busy)));
        conn.batch_execute("ROLLBACK").await.unwrap();

        conn.batch_execute("BEGIN").await.unwrap();
        let kinds: Vec<String> = WorkKind::ALL.iter().map(|k| k.as_str().to_owned()).collect();
        let t = Instant::now();
        sql_query(TEXTBOOK_CLAIM)
            .bind::<Text, _>("bench")
            .bind::<Double, _>(60.0)
            .bind::<Array<Text>, _>(kinds)
            .bind::<Nullable<Uuid>, _>(None::<uuid::Uuid>)
            .execute(&mut conn)
            .await
            .unwrap();
        textbook.push(t.elapsed().as_secs_f64() * 1000.0);
        conn.batch_execute("ROLLBACK").await.unwrap();
    }
    ours.sort_by(f64::total_cmp);
    textbook.sort_by(f64::total_cmp);
    let ours_p50 = percentile(&ours, 0.5);
    let textbook_p50 = percentile(&textbook, 0.5);
    serde_json::json!({
        "queued": queued,
        "busy_config_share": 0.9,
        "samples": samples,
        "claim_ms": {"p50": ours_p50, "p99": percentile(&ours, 0.99)},
        "textbook_claim_ms": {"p50": textbook_p50, "p99": percentile(&textbook, 0.99)},
        "textbook_over_ours_p50": textbook_p50 / ours_p50,
    })
}

#[tokio::main]
async fn main() {
    let report = serde_json::json!({
        "benchmark": "queue",
        "throughput": [throughput(1).await, throughput(8).await],
        "claim_latency_with_busy_backlog": latency().await,
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
