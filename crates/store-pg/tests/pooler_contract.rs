//! The store through PgBouncer 1.18 in transaction mode (ADR 0012, issue #26): a PgBouncer of each test's own
//! (`almanac_testdb::PgBouncer`) in front of the test server, with few server connections, so that
//! transactions of different clients take turns on them.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use almanac_domain::ports::{CatalogueStore, ClaimRequest, Heartbeat, LeaseDuration, ServedConfigs, WriteOutcome};
use almanac_domain::{NewWorkItem, Scope, Status, StorageConfigId, WorkKind, WorkQueue, WorkerId};
use almanac_store_pg::{NewStorageConfig, PgStore, PoolerMode, WorkerConnections};
use almanac_testdb::{Deadline, PgBouncer, TestDatabase};
use tokio_postgres::{Client, NoTls};

fn claimer(worker: &str) -> ClaimRequest {
    ClaimRequest {
        worker_id: WorkerId::new(worker).unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::new(Duration::from_secs(60)).unwrap(),
    }
}

fn connections(shared: usize, lease: Duration) -> WorkerConnections {
    WorkerConnections {
        shared,
        reserved: shared + 1,
        acquire_timeout: almanac_testdb::patience(Duration::from_secs(2)),
        lease,
    }
}

/// A plain client (simple queries only, no statement of its own kept) on `url`.
async fn plain(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn show(client: &Client, setting: &str) -> String {
    first(client, &format!("SHOW {setting}")).await
}

/// The first column of the first row of `sql`, run as a simple query (no statement of the client's kept).
async fn first(client: &Client, sql: &str) -> String {
    let rows = client.simple_query(sql).await.unwrap();
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap()
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

fn asset(config: StorageConfigId, n: u8) -> almanac_domain::ports::NewAsset {
    use almanac_domain::{
        AssetMetadata, CaptureSource, CaptureTime, ContentHash, MediaType,
        ports::{FileFacts, NewAsset},
    };
    let at = chrono::Utc::now();
    let name = format!("IMG_{n:03}.jpg");
    NewAsset {
        storage_config_id: config,
        facts: FileFacts { file_path: name.clone().into_bytes(), display_path: name, size: 1, mtime: at },
        content_hash: ContentHash::from_bytes([n; 32]),
        media_type: MediaType::Image,
        capture: CaptureTime { at, offset_minutes: None, source: CaptureSource::FileMtime },
        metadata: AssetMetadata::default(),
        proxies: Vec::new(),
        replaces: None,
        sidecar: None,
    }
}

/// Eight clients claim, beat, write the catalogue (fenced) and complete 32 items of 8 configs through a
/// PgBouncer with two server connections: every statement answers, every item succeeds, each catalogue write
/// lands, and the server never sees more than two sessions of the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_clients_share_two_server_sessions_for_the_queue_and_the_catalogue() {
    let db = TestDatabase::create().await;
    let bouncer = PgBouncer::start(2).unwrap();
    let lease = Duration::from_secs(60);
    let store = Arc::new(
        PgStore::for_worker_in_mode(&bouncer.url_of(&db), connections(8, lease), PoolerMode::Transaction).unwrap(),
    );
    let mut configs = Vec::new();
    for n in 0..8 {
        let new = NewStorageConfig { username: format!("user{n}"), root_path: PathBuf::from(format!("/photos/{n}")) };
        configs.push(store.add_storage_config(&new).await.unwrap().1.id);
    }
    let enqueues: Vec<_> = configs
        .iter()
        .map(|config| {
            let (store, config) = (store.clone(), *config);
            tokio::spawn(async move {
                for _ in 0..4 {
                    store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap();
                }
            })
        })
        .collect();
    for e in enqueues {
        e.await.unwrap();
    }
    let direct = plain(db.url()).await;
    // Client sessions only: an autovacuum worker of the database (the enqueues above can start one) is listed
    // under its name too, and counted it made a third session under a loaded test run.
    let sessions = format!(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = '{}' AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
        db.name()
    );
    let most_sessions = Arc::new(AtomicI64::new(0));
    let written = Arc::new(AtomicI64::new(0));
    let clients: Vec<_> = (0..8u8)
        .map(|n| {
            let (store, written) = (store.clone(), written.clone());
            tokio::spawn(async move {
                let deadline = Deadline::after(Duration::from_secs(20));
                let mut next = n;
                while !deadline.passed() {
                    let Some(claimed) = store.claim(&claimer(&format!("w{n}"))).await.unwrap() else {
                        if store.queue_summary().await.unwrap().iter().all(|r| r.status != Status::Queued) {
                            return;
                        }
                        tokio::task::yield_now().await;
                        continue;
                    };
                    let fence = claimed.fence;
                    let lease = LeaseDuration::new(lease).unwrap();
                    let beat = store.heartbeat(fence, lease, Some(&serde_json::json!({"done": 1}))).await.unwrap();
                    assert!(matches!(beat, Heartbeat::Renewed { .. }), "{beat:?}");
                    let config = claimed.item.scope.storage_config().unwrap();
                    store.ingest(fence, &asset(config, next)).await.unwrap();
                    next += 8;
                    written.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(store.complete(fence, None).await.unwrap(), WriteOutcome::Written);
                }
                panic!("client {n} still found work to do when its patience ran out");
            })
        })
        .collect();
    let watch = {
        let most = most_sessions.clone();
        tokio::spawn(async move {
            loop {
                most.fetch_max(count(&direct, &sessions).await, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    for client in clients {
        client.await.unwrap();
    }
    watch.abort();
    let check = plain(db.url()).await;
    assert_eq!(count(&check, "SELECT count(*) FROM work_items WHERE status = 'succeeded'").await, 32);
    assert_eq!(count(&check, "SELECT count(*) FROM media_assets").await, written.load(Ordering::Relaxed));
    assert_eq!(written.load(Ordering::Relaxed), 32);
    let most = most_sessions.load(Ordering::Relaxed);
    assert!((1..=2).contains(&most), "the server saw {most} sessions of the database at once");
}

/// Our limits hold in our transactions (the server ends one of ours left idle), and nothing of ours is left on
/// the server session we shared: a plain client of the same PgBouncer (one server session, so the very one
/// ours ran on) sees the server's defaults and no prepared statement. The same store in session mode leaves
/// its limits and its cached statements there, which is what this test would catch.
#[tokio::test]
async fn our_limits_hold_in_our_transactions_and_none_is_left_on_the_shared_session() {
    let db = TestDatabase::create().await;
    // A database whose transactions default to SERIALIZABLE: ours run at READ COMMITTED, others at its default.
    let default = format!("ALTER DATABASE {} SET default_transaction_isolation = 'serializable'", db.name());
    plain(db.url()).await.batch_execute(&default).await.unwrap();
    let bouncer = PgBouncer::start(1).unwrap();
    let url = bouncer.url_of(&db);
    let lease = Duration::from_secs(2);
    let store = PgStore::for_worker_in_mode(&url, connections(2, lease), PoolerMode::Transaction).unwrap();
    let names = ["statement_timeout", "idle_in_transaction_session_timeout", "TimeZone", "transaction_isolation"];
    let ours = store.settings_in_transaction(&names).await.unwrap();
    assert_eq!(ours, ["2s", "1s", "UTC", "read committed"]);
    let direct = plain(db.url()).await;
    let other = plain(&url).await;
    for name in names {
        assert_eq!(show(&other, name).await, show(&direct, name).await, "{name} was left on the shared session");
    }
    // No named statement outlives its transaction, the hot ones (enqueue, claim) included.
    let item = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
    store.enqueue(&item).await.unwrap();
    store.claim(&claimer("w")).await.unwrap().unwrap();
    let prepared = "SELECT count(*) FROM pg_prepared_statements";
    assert_eq!(first(&other, prepared).await, "0", "a statement of ours was left on the shared session");
    // Idle for three times the limit (half the lease): the server ends the transaction.
    let ended = store.idle_in_transaction(lease.mul_f64(1.5)).await;
    assert!(ended.is_err(), "our transaction outlived its idle limit through the pooler");
    // The store goes on, on another server session.
    assert!(store.queue_summary().await.is_ok());

    let session = PgStore::for_worker_in_mode(&url, connections(2, lease), PoolerMode::Session).unwrap();
    session.enqueue(&item).await.unwrap();
    assert_eq!(session.settings_in_transaction(&["transaction_isolation"]).await.unwrap(), ["read committed"]);
    assert_eq!(show(&other, "statement_timeout").await, "2s", "session mode sets its limits on the session");
    assert_ne!(first(&other, prepared).await, "0", "session mode keeps its statements on the session");
}

/// The statement cache is what breaks through a transaction pooler: a statement cached on one server session
/// is executed on another. Each round, the store runs an enqueue; a plain client then begins a transaction and
/// so holds the server session the store just let go (PgBouncer hands out the latest first); the store's next
/// enqueue runs on the other one. In session mode (statement cache on) that fails; in transaction mode never.
#[tokio::test]
async fn cached_statements_fail_through_a_transaction_pooler_and_transaction_mode_prepares_none() {
    let db = TestDatabase::create().await;
    let bouncer = PgBouncer::start(2).unwrap();
    let url = bouncer.url_of(&db);
    let lease = Duration::from_secs(30);
    let mut failures = Vec::new();
    for mode in PoolerMode::ALL {
        let store = PgStore::in_mode(&url, 1, almanac_testdb::patience(Duration::from_secs(2)), lease, mode).unwrap();
        let holder = plain(&url).await;
        let mut failed = Vec::new();
        for _ in 0..4 {
            let item = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
            if let Err(e) = store.enqueue(&item).await {
                failed.push(e.to_string());
            }
            holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
            if let Err(e) = store.enqueue(&item).await {
                failed.push(e.to_string());
            }
            holder.batch_execute("COMMIT").await.unwrap();
        }
        failures.push((mode, failed));
    }
    let [(_, session), (_, transaction)] = &failures[..] else { unreachable!() };
    assert!(transaction.is_empty(), "transaction mode failed: {transaction:?}\n{}", bouncer.log());
    assert!(
        session.iter().any(|e| e.contains("prepared statement")),
        "session mode's cached statements should fail through a transaction pooler: {session:?}"
    );
}

/// Migrations through the pooler: three at once on an empty database apply each migration once, and the
/// migration lock is gone when they return, though the server sessions they ran on live on in PgBouncer (a
/// session lock would stay with one of them, and block every later migration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_through_a_transaction_pooler_and_leave_no_lock_behind() {
    let server = almanac_testdb::server_url().unwrap();
    let admin = plain(&server).await;
    let db = TestDatabase::create_empty().await;
    let name = db.name();
    let bouncer = PgBouncer::start(2).unwrap();
    let url = bouncer.url_of(&db);
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { almanac_store_pg::migrate(&url).await })
        })
        .collect();
    let mut applied = Vec::new();
    for run in runs {
        applied.push(run.await.unwrap().unwrap());
    }
    applied.sort_by_key(Vec::len);
    assert!(applied[0].is_empty() && applied[1].is_empty(), "{applied:?}");
    let state = almanac_store_pg::schema_state(&url).await.unwrap();
    assert!(state.pending.is_empty() && state.unknown.is_empty(), "{state:?}");
    assert!(applied[2].contains(&state.newest_known), "one run applied them all: {applied:?}");
    let locks = format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
          WHERE l.locktype = 'advisory' AND d.datname = '{name}'"
    );
    assert_eq!(count(&admin, &locks).await, 0, "an advisory lock outlived the migrations");
    let used = format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'");
    assert!(count(&admin, &used).await >= 1, "PgBouncer keeps the server sessions the migrations used");
    drop(bouncer);
}

/// Wake-ups need a direct connection: an enqueue through PgBouncer wakes a listener on the database's own URL
/// (`database.listen_url`), while a listener through PgBouncer, whose LISTEN went to a server session the pooler
/// then handed to others, hears nothing. One server session, so the enqueue's NOTIFY is sent from the very
/// session that LISTENed through the pooler: PgBouncer hands it to the client holding that session then (the
/// enqueuer), never to the listener.
#[tokio::test]
async fn an_enqueue_through_the_pooler_wakes_a_direct_listener_and_never_one_through_the_pooler() {
    use almanac_store_pg::listen_for_work;
    use tokio::sync::Notify;
    use tokio_util::sync::CancellationToken;

    let db = TestDatabase::create().await;
    let bouncer = PgBouncer::start(1).unwrap();
    let url = bouncer.url_of(&db);
    let store =
        PgStore::in_mode(&url, 2, Duration::from_secs(10), Duration::from_secs(60), PoolerMode::Transaction).unwrap();
    let stop = CancellationToken::new();
    let (direct, pooled) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let listeners = [
        tokio::spawn(listen_for_work(db.url().to_owned(), direct.clone(), stop.clone())),
        tokio::spawn(listen_for_work(url.clone(), pooled.clone(), stop.clone())),
    ];
    // Each wakes once when its LISTEN is done (it may have missed something while connecting).
    let connected = almanac_testdb::patience(Duration::from_secs(2));
    tokio::time::timeout(connected, direct.notified()).await.expect("the direct listener connected");
    tokio::time::timeout(connected, pooled.notified()).await.expect("the pooled listener connected");

    store.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()).await.unwrap();
    tokio::time::timeout(almanac_testdb::patience(Duration::from_secs(2)), direct.notified())
        .await
        .expect("the direct listener was woken by an enqueue through the pooler");
    // The notification has been delivered (the direct listener has it): the pooled one would have it by now.
    let heard = tokio::time::timeout(Duration::from_millis(500), pooled.notified()).await;
    assert!(heard.is_err(), "a LISTEN through a transaction pooler heard an enqueue");
    stop.cancel();
    for listener in listeners {
        listener.await.unwrap();
    }
}

/// A connection of ours left unused for a while is checked before it is handed out again (its peer may have
/// gone silently), and through a transaction pooler that check prepares nothing. A statement prepared in one
/// transaction is not there in the next when the pooler resets its server sessions between transactions (or
/// hands out another one): a check that prepared one would fail, and every connection unused for a second would
/// be thrown away and made again, a login each time. Here the one server session is reset after every
/// transaction, and the store's connection, used twice over a second apart, is checked and kept: one login.
#[tokio::test]
async fn a_connection_unused_for_a_while_is_kept_through_a_pooler_that_resets_its_sessions() {
    let db = TestDatabase::create().await;
    let bouncer = PgBouncer::start_resetting(1).unwrap();
    let store = PgStore::in_mode(
        &bouncer.url_of(&db),
        1,
        almanac_testdb::patience(Duration::from_secs(2)),
        Duration::from_secs(30),
        PoolerMode::Transaction,
    )
    .unwrap();
    store.queue_summary().await.unwrap();
    // Unused for longer than a connection is handed out unchecked.
    tokio::time::sleep(almanac_store_pg::UNCHECKED_WITHIN + Duration::from_millis(500)).await;
    store.queue_summary().await.unwrap();
    let log = bouncer.log();
    assert_eq!(log.matches("login attempt").count(), 1, "the connection was made again:\n{log}");
}

/// A claim its caller gave up on behind a transaction pooler commits nothing: there the claim keeps its explicit
/// transaction, its `BEGIN` pipelined with it and its `COMMIT` never sent (ADR 0008, amendment "a claim given up
/// on is handed back"). It waits on its config's head, which the test holds on a direct connection, and is
/// aborted; once the head is let go the item is still queued, its attempt number unused.
#[tokio::test]
async fn a_claim_given_up_on_through_a_transaction_pooler_commits_nothing() {
    let db = TestDatabase::create().await;
    let bouncer = PgBouncer::start(2).unwrap();
    let url = bouncer.url_of(&db);
    let store = Arc::new(
        PgStore::in_mode(&url, 1, Duration::from_secs(10), Duration::from_secs(60), PoolerMode::Transaction).unwrap(),
    );
    let new = NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/photos/ann") };
    let config = store.add_storage_config(&new).await.unwrap().1.id;
    let id = store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap().item.id;
    let holder = plain(db.url()).await;
    holder
        .batch_execute(&format!("BEGIN; SELECT 1 FROM queue_heads WHERE storage_config_id = '{config}' FOR UPDATE"))
        .await
        .unwrap();
    let claimer_store = store.clone();
    let claim = tokio::spawn(async move { claimer_store.claim_many(&claimer("w"), 1).await });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the claim never waited on the head's row");
    claim.abort();
    assert!(claim.await.unwrap_err().is_cancelled());

    holder.batch_execute("COMMIT").await.unwrap();
    let observer = plain(db.url()).await;
    let busy = "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND state IN ('active', 'idle in transaction')";
    let deadline = Deadline::after(Duration::from_secs(2));
    while count(&observer, busy).await > 0 {
        assert!(!deadline.passed(), "the abandoned claim's session never settled");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let item = format!("SELECT status || ' ' || attempt FROM work_items WHERE id = '{id}'");
    assert_eq!(first(&observer, &item).await, "queued 0", "still queued, its attempt number unused");
    let claimed = store.claim(&claimer("w")).await.unwrap().expect("the item is claimable");
    assert_eq!(claimed.fence.attempt.get(), 1);
}

/// The heads' vacuum (docs/queue.md, "The store vacuums the heads it churns") runs through a pooler in transaction
/// mode: the store asks for its rights in a transaction and sends `VACUUM` alone, outside one, as a simple query.
/// A store vacuuming after every item it claims claims four items, one at a time, beside another client's
/// statements on the same two server sessions; the table is vacuumed (counted on a direct connection), and the
/// other client's prepared statements still work.
#[tokio::test]
async fn the_heads_vacuum_runs_through_a_transaction_pooler() {
    let db = TestDatabase::create().await;
    let bouncer = PgBouncer::start(2).unwrap();
    let url = bouncer.url_of(&db);
    let lease = Duration::from_secs(60);
    let store = PgStore::for_worker_in_mode(&url, connections(2, lease), PoolerMode::Transaction)
        .unwrap()
        .vacuuming_heads_every(1);
    let other = PgStore::for_worker_in_mode(&url, connections(2, lease), PoolerMode::Transaction).unwrap();
    for n in 0..4u8 {
        let new = NewStorageConfig { username: format!("user{n}"), root_path: PathBuf::from(format!("/photos/{n}")) };
        let config = store.add_storage_config(&new).await.unwrap().1.id;
        store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap();
    }
    let direct = plain(db.url()).await;
    let vacuums = "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'queue_heads'";
    let before = count(&direct, vacuums).await;
    let deadline = Deadline::after(Duration::from_secs(10));
    let mut claimed = 0;
    while count(&direct, vacuums).await == before {
        deadline.check("a vacuum of queue_heads through the pooler");
        if claimed < 4 && store.claim(&claimer("vacuuming")).await.unwrap().is_some() {
            claimed += 1;
        }
        assert!(other.queue_summary().await.is_ok(), "the other client's statements work beside the vacuum");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(claimed >= 1);
}
