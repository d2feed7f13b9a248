//! What the pool modes cost (ADR 0012): one client's enqueue, claim + complete and read, each timed over
//! `ALMANAC_BENCH_OPS` operations (default 2,000), in session mode and in transaction mode, straight to the
//! private cluster's socket and through a private PgBouncer 1.18 in transaction mode on loopback. Prints one JSON
//! object on stdout: per mode and path, the mean microseconds of each operation.
//!
//! `cargo run --release -p almanac-store-pg --example pooler_bench`

use std::time::{Duration, Instant};

use almanac_domain::ports::{ClaimRequest, LeaseDuration, ServedConfigs};
use almanac_domain::{NewWorkItem, Scope, WorkKind, WorkQueue, WorkerId};
use almanac_store_pg::{PgStore, PoolerMode, WorkerConnections};
use almanac_testdb::{PgBouncer, TestDatabase};

/// Mean microseconds per operation of enqueue, claim + complete, and a read (`get`), over `ops` of each.
async fn measure(store: &PgStore, ops: usize) -> serde_json::Value {
    let request = ClaimRequest {
        worker_id: WorkerId::new("bench").unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::new(Duration::from_secs(60)).unwrap(),
    };
    let item = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
    // Warm the connection (and, in session mode, its statement cache).
    let warm = store.enqueue(&item).await.unwrap().item.id;
    let claimed = store.claim(&request).await.unwrap().unwrap();
    store.complete(claimed.fence, None).await.unwrap();
    let per_op = |started: Instant| started.elapsed().as_secs_f64() * 1e6 / ops as f64;

    let started = Instant::now();
    for _ in 0..ops {
        store.enqueue(&item).await.unwrap();
    }
    let enqueue = per_op(started);
    let started = Instant::now();
    for _ in 0..ops {
        let claimed = store.claim(&request).await.unwrap().expect("an item enqueued above");
        store.complete(claimed.fence, None).await.unwrap();
    }
    let claim_complete = per_op(started);
    let started = Instant::now();
    for _ in 0..ops {
        store.get(warm).await.unwrap();
    }
    let read = per_op(started);
    serde_json::json!({
        "enqueue_us": enqueue.round(),
        "claim_and_complete_us": claim_complete.round(),
        "read_us": read.round(),
    })
}

#[tokio::main]
async fn main() {
    let ops = std::env::var("ALMANAC_BENCH_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let connections = WorkerConnections {
        shared: 1,
        reserved: 1,
        acquire_timeout: Duration::from_secs(10),
        lease: Duration::from_secs(60),
    };
    let bouncer = PgBouncer::start(2).unwrap();
    let mut report = serde_json::json!({ "benchmark": "pooler", "ops": ops });
    for (path, via_bouncer) in [("direct", false), ("pgbouncer_transaction_mode", true)] {
        for mode in PoolerMode::ALL {
            if via_bouncer && mode == PoolerMode::Session {
                // Breaks through a transaction pooler (the contract tests show how); nothing to time.
                continue;
            }
            let db = TestDatabase::create().await;
            let url = if via_bouncer { bouncer.url_of(&db) } else { db.url().to_owned() };
            let store = PgStore::for_worker_in_mode(&url, connections, mode).unwrap();
            let figures = measure(&store, ops).await;
            eprintln!("{path} {mode}: {figures}");
            report[path][mode.name()] = figures;
        }
    }
    println!("{report}");
}
