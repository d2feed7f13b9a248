//! Contract tests of the work queue rules (ADR 0008) on real PostgreSQL: one fresh database per test.

mod support;

use support::{config, setup};

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use almanac_domain::{
    CancelOutcome, DedupKey, NewWorkItem, QueueError, Scope, Status, StorageConfig, StorageConfigId, WorkItemId,
    WorkKind, WorkQueue, WorkerId,
    ports::{
        ClaimRequest, FailOutcome, Failure, Heartbeat, LeaseDuration, QueueMaintenance, ServedConfigs, WatchStore,
        WriteOutcome,
    },
};
use almanac_store_pg::{PgStore, WorkerConnections, claim_with, configs_taken};
use almanac_testdb::TestDatabase;
use diesel::sql_query;
use diesel::sql_types::Uuid;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

fn lease() -> LeaseDuration {
    LeaseDuration::new(Duration::from_secs(60)).unwrap()
}

fn claimer(worker: &str, kinds: &[WorkKind]) -> ClaimRequest {
    ClaimRequest { kinds: kinds.to_vec(), ..support::claimer(worker) }
}

fn all_kinds(worker: &str) -> ClaimRequest {
    support::claimer(worker)
}

async fn enqueue(store: &PgStore, kind: WorkKind, scope: Scope) -> WorkItemId {
    store.enqueue(&NewWorkItem::new(kind, scope).unwrap()).await.expect("enqueue").item.id
}

async fn raw(db: &TestDatabase) -> AsyncPgConnection {
    AsyncPgConnection::establish(db.url()).await.expect("raw connection")
}

async fn expire_lease(db: &TestDatabase, id: WorkItemId) {
    sql_query("UPDATE work_items SET lease_expires_at = now() - interval '1 second' WHERE id = $1")
        .bind::<Uuid, _>(id.as_uuid())
        .execute(&mut raw(db).await)
        .await
        .unwrap();
}

async fn status_of(store: &PgStore, id: WorkItemId) -> Status {
    store.get(id).await.unwrap().expect("item exists").status
}

/// Sets `id` running on `conn` as a claim writes it, but without taking its config's claim lock: a hand-written
/// update, or any writer that bypasses the claim. Rule 2 (the running-config index) is the guard against such
/// writers; a claim cannot race another claim for a config, since it takes the config first.
async fn set_running_by_hand(conn: &mut AsyncPgConnection, id: WorkItemId) {
    let written = sql_query(
        "UPDATE work_items SET status = 'running', attempt = attempt + 1, claim_token = gen_random_uuid(),
                worker_id = 'by-hand', started_at = now(), heartbeat_at = now(),
                lease_expires_at = now() + interval '1 minute'
          WHERE id = $1",
    )
    .bind::<Uuid, _>(id.as_uuid())
    .execute(conn)
    .await
    .unwrap();
    assert_eq!(written, 1, "{id} set running by hand");
}

#[tokio::test]
async fn enqueue_with_a_queued_dedup_key_returns_the_existing_item() {
    let (_db, store) = setup().await;
    let c = config(&store, "ann", "/photos/ann").await;
    let item = NewWorkItem::new(WorkKind::Crawl, Scope::Config(c.id))
        .unwrap()
        .with_dedup_key(DedupKey::new("crawl:ann").unwrap());
    let first = store.enqueue(&item).await.unwrap();
    let second = store.enqueue(&item).await.unwrap();
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(first.item.id, second.item.id);

    // Once claimed, the key is free again: a new item is queued beside the running one.
    store.claim(&all_kinds("w1")).await.unwrap().expect("claimed");
    let third = store.enqueue(&item).await.unwrap();
    assert!(third.created);
    assert_ne!(third.item.id, first.item.id);
}

#[tokio::test]
async fn enqueue_many_inserts_in_order_and_honours_dedup_keys_item_by_item() {
    let (_db, store) = setup().await;
    let c = config(&store, "ann", "/photos/ann").await;
    let keyed = |key: &str| {
        NewWorkItem::new(WorkKind::Crawl, Scope::Config(c.id)).unwrap().with_dedup_key(DedupKey::new(key).unwrap())
    };
    let already = store.enqueue(&keyed("crawl:ann:1")).await.unwrap().item;
    let args = almanac_domain::ProxyDeletionArgs { asset_ids: vec![almanac_domain::AssetId::new()], proxy_types: None };
    let cleanup = NewWorkItem::from_args(&args, Scope::Unscoped).unwrap();
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let batch = [
        keyed("crawl:ann:1"),
        keyed("crawl:ann:2"),
        cleanup.clone(),
        keyed("crawl:ann:2"),
        cleanup.clone().with_run_after(later),
    ];
    let answered = store.enqueue_many(&batch).await.unwrap();
    let created: Vec<bool> = answered.iter().map(|e| e.created).collect();
    assert_eq!(created, [false, true, true, false, true]);
    assert_eq!(answered[0].item.id, already.id, "the item queued before the batch");
    assert_eq!(answered[3].item.id, answered[1].item.id, "an earlier item of the same batch");
    assert_eq!(&answered[2].item.payload, cleanup.payload());
    assert_eq!(answered[4].item.run_after.timestamp_micros(), later.timestamp_micros());
    // Claimed in the batch's order: the queued crawl, then the batch's cleanup (its later twin is not due).
    let first = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    let second = store.claim(&all_kinds("w2")).await.unwrap().unwrap();
    assert_eq!((first.item.id, second.item.id), (already.id, answered[2].item.id));
    assert!(store.claim(&all_kinds("w3")).await.unwrap().is_none(), "ann is busy; the other cleanup is not due");
    assert!(store.enqueue_many(&[]).await.unwrap().is_empty());

    // Thousands in one call (more than one statement's chunk), keys honoured across chunks.
    let many: Vec<NewWorkItem> = (0..12_000).map(|i| keyed(&format!("bulk:{}", i % 11_000))).collect();
    let answered = store.enqueue_many(&many).await.unwrap();
    assert_eq!(answered.iter().filter(|e| e.created).count(), 11_000);
    assert_eq!(answered[11_500].item.id, answered[500].item.id);
    let missing = NewWorkItem::new(WorkKind::Crawl, Scope::Config(almanac_domain::StorageConfigId::new())).unwrap();
    let err = store.enqueue_many(&[cleanup, missing]).await.unwrap_err();
    assert!(matches!(err, QueueError::Rejected(ref m) if m.contains("storage_config")), "{err:?}");
}

/// The claim is prepared once per connection and reused: parsed and planned once, one round trip after that.
#[tokio::test]
async fn the_claim_is_prepared_once_per_connection() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    for _ in 0..3 {
        enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    }
    enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let mut conn = raw(&db).await;
    for _ in 0..4 {
        claim_with(&mut conn, &all_kinds("w1"), 1).await.unwrap().pop().expect("claimed");
    }
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    // (tokio-postgres prepares every statement under a name, and closes the ones diesel does not keep: only
    // a kept statement is still there after the next one.)
    let prepared: N = sql_query(
        "SELECT count(*) AS n FROM pg_prepared_statements
          WHERE statement LIKE '%almanac_claim_candidates%' AND statement NOT LIKE '%pg_prepared_statements%'",
    )
    .get_result(&mut conn)
    .await
    .unwrap();
    assert_eq!(prepared.n, 1, "four claims, one prepared statement kept");
}

/// The web backend's own transaction: an item enqueued (or cancelled) in it exists (or is cancelled) exactly
/// when that transaction commits; and a store over the backend's own pool serves the queue.
#[tokio::test]
async fn enqueue_in_and_cancel_in_follow_the_callers_transaction_and_a_store_can_share_its_pool() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/photos/ann").await;
    let crawl = NewWorkItem::new(WorkKind::Crawl, Scope::Config(c.id))
        .unwrap()
        .with_dedup_key(DedupKey::new("crawl:ann").unwrap());
    let mut conn = raw(&db).await;
    conn.batch_execute("BEGIN").await.unwrap();
    let rolled_back = almanac_store_pg::enqueue_in(&mut conn, &crawl).await.unwrap();
    assert!(rolled_back.created);
    conn.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(store.get(rolled_back.item.id).await.unwrap(), None, "rolled back with the caller's transaction");

    conn.batch_execute("BEGIN").await.unwrap();
    let first = almanac_store_pg::enqueue_in(&mut conn, &crawl).await.unwrap();
    let again = almanac_store_pg::enqueue_in(&mut conn, &crawl).await.unwrap();
    assert!(first.created && !again.created);
    assert_eq!(again.item.id, first.item.id, "dedup keys honoured inside the transaction");
    assert_eq!(store.get(first.item.id).await.unwrap(), None, "not visible before the commit");
    conn.batch_execute("COMMIT").await.unwrap();
    assert_eq!(status_of(&store, first.item.id).await, Status::Queued);

    conn.batch_execute("BEGIN").await.unwrap();
    let outcome = almanac_store_pg::request_cancel_in(&mut conn, first.item.id).await.unwrap();
    assert_eq!(outcome, CancelOutcome::Cancelled);
    assert_eq!(status_of(&store, first.item.id).await, Status::Queued, "not yet committed");
    conn.batch_execute("COMMIT").await.unwrap();
    assert_eq!(status_of(&store, first.item.id).await, Status::Cancelled);

    let manager = diesel_async::pooled_connection::AsyncDieselConnectionManager::<AsyncPgConnection>::new(db.url());
    let pool = diesel_async::pooled_connection::deadpool::Pool::builder(manager).max_size(2).build().unwrap();
    let shared = PgStore::from_pool(pool);
    let id = shared.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()).await.unwrap();
    let claimed = shared.claim(&all_kinds("backend")).await.unwrap().expect("claimed through the shared pool");
    assert_eq!(claimed.item.id, id.item.id);
}

/// A paused config's queued work is not claimed, and is again once resumed; other configs go on.
#[tokio::test]
async fn a_paused_config_is_passed_over_until_resumed() {
    let (_db, store) = setup().await;
    let x = config(&store, "ann", "/x").await;
    let y = config(&store, "bob", "/y").await;
    let on_x = enqueue(&store, WorkKind::Crawl, Scope::Config(x.id)).await;
    let on_y = enqueue(&store, WorkKind::Crawl, Scope::Config(y.id)).await;
    assert!(!store.set_config_paused(x.id, true).await.unwrap(), "it was not paused before");
    assert!(store.set_config_paused(x.id, true).await.unwrap(), "pausing twice is harmless");
    assert_eq!(store.claim(&all_kinds("w1")).await.unwrap().expect("y's").item.id, on_y);
    assert!(store.claim(&all_kinds("w1")).await.unwrap().is_none(), "x is paused");
    assert_eq!(store.paused().await.unwrap().1, [(x.id, "/x".to_owned())]);
    assert!(store.set_config_paused(x.id, false).await.unwrap());
    assert_eq!(store.claim(&all_kinds("w1")).await.unwrap().expect("x's, resumed").item.id, on_x);
    let missing = almanac_domain::StorageConfigId::new();
    assert!(store.set_config_paused(missing, true).await.is_err());
}

/// A paused kind is not claimed anywhere, and does not hide other kinds' work: 40 configs whose only queued
/// work is a crawl, older than everything else, do not keep the claim from the burst detection queued behind
/// them (a claim takes at most its batch and 32 more configs, so their heads must leave paused kinds out).
#[tokio::test]
async fn a_paused_kind_is_passed_over_everywhere_without_hiding_other_work() {
    let (_db, store) = setup().await;
    let mut crawls = Vec::new();
    for i in 0..40 {
        let c = config(&store, "ann", &format!("/lib/{i}")).await;
        crawls.push(enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await);
    }
    let last = config(&store, "bob", "/lib/bob").await;
    let bursts = enqueue(&store, WorkKind::BurstDetection, Scope::Config(last.id)).await;
    let cleanup = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    assert!(!store.set_kind_paused(WorkKind::Crawl, true).await.unwrap());
    let first = store.claim(&all_kinds("w1")).await.unwrap().expect("the burst detection").item.id;
    let second = store.claim(&all_kinds("w2")).await.unwrap().expect("the clean-up").item.id;
    assert_eq!(HashSet::from([first, second]), HashSet::from([bursts, cleanup]));
    assert!(store.claim(&all_kinds("w3")).await.unwrap().is_none(), "crawls are paused");
    assert_eq!(store.paused().await.unwrap().0, [WorkKind::Crawl]);
    // Enqueued while paused: queued, not claimed.
    let late = enqueue(&store, WorkKind::Crawl, Scope::Config(last.id)).await;
    assert!(store.claim(&all_kinds("w3")).await.unwrap().is_none());
    assert!(store.set_kind_paused(WorkKind::Crawl, false).await.unwrap());
    let resumed = store.claim(&all_kinds("w4")).await.unwrap().expect("crawls again").item.id;
    assert_eq!(resumed, crawls[0], "the oldest first");
    assert_eq!(status_of(&store, late).await, Status::Queued);
}

/// A completion that waits for a kind's resume to commit sees the resume: the config's queued work of that kind
/// is claimable once both have committed. Forced: the resume holds the config's head (it refreshes every head)
/// while the completion's refresh waits for it. Before the fix, the completion read the paused kinds before it
/// waited and left the config's crawl unclaimable for good.
#[tokio::test]
async fn a_completion_that_waits_for_a_resume_leaves_the_resumed_work_claimable() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let running = enqueue(&store, WorkKind::BurstDetection, Scope::Config(c.id)).await;
    let held = store.claim(&all_kinds("w1")).await.unwrap().expect("the burst detection");
    assert_eq!(held.item.id, running);
    assert!(!store.set_kind_paused(WorkKind::Crawl, true).await.unwrap());
    let crawl = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;

    // The resume, uncommitted: it holds every head it refreshed.
    let mut resume = raw(&db).await;
    resume.batch_execute("BEGIN; DELETE FROM paused_kinds WHERE kind = 'crawl'").await.unwrap();
    // The completion's refresh waits for the config's head.
    let completing = {
        let store = store.clone();
        tokio::spawn(async move { store.complete(held.fence, None).await })
    };
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the completion waits for the resume");
    resume.batch_execute("COMMIT").await.unwrap();
    assert_eq!(completing.await.unwrap().unwrap(), WriteOutcome::Written);

    let next = store.claim(&all_kinds("w2")).await.unwrap().expect("the resumed crawl is claimable");
    assert_eq!(next.item.id, crawl);
}

/// Retrying failed items that share a dedup key (a crawl failed in two schedule periods) requeues them all: the
/// oldest keeps the key, the other drops it; with a queued holder of the key, both drop it.
#[tokio::test]
async fn retrying_failed_items_that_share_a_dedup_key_requeues_them_all() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let key = |n: &str| {
        NewWorkItem::new(WorkKind::Crawl, Scope::Config(c.id)).unwrap().with_dedup_key(DedupKey::new(n).unwrap())
    };
    let mut failed = Vec::new();
    for _ in 0..2 {
        failed.push(store.enqueue(&key("crawl:c")).await.unwrap().item.id);
        let claimed = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
        let failure = Failure { error: "share down".into(), retryable: false, retry_delay: Duration::ZERO };
        assert_eq!(store.fail(claimed.fence, &failure).await.unwrap(), FailOutcome::Failed);
    }
    let filter = almanac_store_pg::ItemFilter { status: Some(Status::Failed), ..Default::default() };
    let retried = store.retry_items(&filter, None).await.unwrap();
    assert_eq!(HashSet::<_>::from_iter(retried.clone()), HashSet::from_iter(failed.clone()));
    let keys: Vec<Option<String>> = futures_util::future::join_all(failed.iter().map(|id| store.get(*id)))
        .await
        .into_iter()
        .map(|i| i.unwrap().unwrap().dedup_key.map(|k| k.to_string()))
        .collect();
    assert_eq!(keys, [Some("crawl:c".to_owned()), None], "the oldest keeps the key");

    // Failed again, and a queued holder of the key meanwhile: both come back without it.
    for _ in 0..2 {
        let claimed = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
        let failure = Failure { error: "share down".into(), retryable: false, retry_delay: Duration::ZERO };
        store.fail(claimed.fence, &failure).await.unwrap();
    }
    let holder = store.enqueue(&key("crawl:c")).await.unwrap().item.id;
    let retried = store.retry_items(&filter, None).await.unwrap();
    assert_eq!(retried.len(), 2);
    for id in &failed {
        let item = store.get(*id).await.unwrap().unwrap();
        assert_eq!((item.status, item.dedup_key), (Status::Queued, None));
    }
    assert_eq!(store.get(holder).await.unwrap().unwrap().dedup_key.as_deref(), Some("crawl:c"));
    drop(db);
}

#[tokio::test]
async fn enqueue_for_a_missing_config_is_rejected() {
    let (_db, store) = setup().await;
    let missing = Scope::Config(almanac_domain::StorageConfigId::new());
    let err = store.enqueue(&NewWorkItem::new(WorkKind::Crawl, missing).unwrap()).await.unwrap_err();
    assert!(matches!(err, QueueError::Rejected(ref m) if m.contains("storage_config")), "{err:?}");
}

#[tokio::test]
async fn claim_takes_the_oldest_due_item_and_starts_an_attempt() {
    let (_db, store) = setup().await;
    let a = config(&store, "ann", "/a").await;
    let future = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped)
        .unwrap()
        .with_run_after(chrono::Utc::now() + chrono::Duration::hours(1));
    store.enqueue(&future).await.unwrap();
    let first = enqueue(&store, WorkKind::Crawl, Scope::Config(a.id)).await;
    let second = enqueue(&store, WorkKind::ProxySweep, Scope::Unscoped).await;

    let claimed = store.claim(&all_kinds("w1")).await.unwrap().expect("claimed");
    assert_eq!(claimed.item.id, first);
    assert_eq!(claimed.item.status, Status::Running);
    assert_eq!(claimed.fence.attempt.get(), 1);
    assert_eq!(claimed.item.worker_id.as_deref(), Some("w1"));
    let lease_left = claimed.item.lease_expires_at.unwrap() - claimed.item.started_at.unwrap();
    assert_eq!(lease_left, chrono::Duration::seconds(60));

    let next = store.claim(&all_kinds("w1")).await.unwrap().expect("claimed");
    assert_eq!(next.item.id, second);
    // The token cleanup is not due for an hour.
    assert!(store.claim(&all_kinds("w1")).await.unwrap().is_none());
}

#[tokio::test]
async fn claim_takes_only_the_kinds_the_worker_has_handlers_for() {
    let (_db, store) = setup().await;
    let a = config(&store, "ann", "/a").await;
    enqueue(&store, WorkKind::Crawl, Scope::Config(a.id)).await;
    let burst = enqueue(&store, WorkKind::BurstDetection, Scope::Config(a.id)).await;
    let claimed = store.claim(&claimer("w1", &[WorkKind::BurstDetection])).await.unwrap().expect("claimed");
    assert_eq!(claimed.item.id, burst);
    assert!(store.claim(&claimer("w2", &[WorkKind::TokenCleanup])).await.unwrap().is_none());
}

#[tokio::test]
async fn busy_config_is_passed_over_for_another_config_and_unscoped_work() {
    let (_db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let d = config(&store, "bob", "/d").await;
    let c1 = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let c2 = enqueue(&store, WorkKind::BurstDetection, Scope::Config(c.id)).await;
    let d1 = enqueue(&store, WorkKind::Crawl, Scope::Config(d.id)).await;
    let u1 = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;

    assert_eq!(store.claim(&all_kinds("w1")).await.unwrap().unwrap().item.id, c1);
    // C is busy: its older queued item c2 is passed over, D's item and the unscoped one are taken.
    let mut next = vec![
        store.claim(&all_kinds("w2")).await.unwrap().unwrap().item.id,
        store.claim(&all_kinds("w3")).await.unwrap().unwrap().item.id,
    ];
    next.sort();
    let mut expected = vec![d1, u1];
    expected.sort();
    assert_eq!(next, expected);
    assert!(store.claim(&all_kinds("w4")).await.unwrap().is_none());
    assert_eq!(status_of(&store, c2).await, Status::Queued);
}

#[tokio::test]
async fn once_the_running_item_finishes_the_config_next_item_is_claimed() {
    let (_db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let c2 = enqueue(&store, WorkKind::BurstDetection, Scope::Config(c.id)).await;
    let first = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    assert!(store.claim(&all_kinds("w2")).await.unwrap().is_none());
    assert_eq!(store.complete(first.fence, None).await.unwrap(), WriteOutcome::Written);
    assert_eq!(store.claim(&all_kinds("w2")).await.unwrap().unwrap().item.id, c2);
}

#[tokio::test]
async fn unscoped_items_run_side_by_side() {
    let (_db, store) = setup().await;
    enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    enqueue(&store, WorkKind::ProxyDeletion, Scope::Unscoped).await;
    for worker in ["w1", "w2", "w3"] {
        assert!(store.claim(&all_kinds(worker)).await.unwrap().is_some(), "{worker} claims");
    }
}

#[tokio::test]
async fn per_user_worker_claims_only_its_user_configs_and_unscoped_work() {
    let (_db, store) = setup().await;
    let ann = config(&store, "ann", "/ann").await;
    let bob = config(&store, "bob", "/bob").await;
    enqueue(&store, WorkKind::Crawl, Scope::Config(ann.id)).await;
    let bobs = enqueue(&store, WorkKind::Crawl, Scope::Config(bob.id)).await;
    let unscoped = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let bob_worker = ClaimRequest { served: ServedConfigs::User(bob.user_id), ..all_kinds("bob-worker") };
    assert_eq!(store.claim(&bob_worker).await.unwrap().unwrap().item.id, bobs);
    assert_eq!(store.claim(&bob_worker).await.unwrap().unwrap().item.id, unscoped);
    assert!(store.claim(&bob_worker).await.unwrap().is_none());
}

/// "Which configs a Worker serves" is stated twice: in the claim (its candidates function, written per case so
/// each reads an index) and in the scheduler's `served_configs`. Here they must agree, for every way of serving.
#[tokio::test]
async fn the_scheduler_serves_exactly_the_configs_the_claim_serves() {
    let (db, store) = setup().await;
    let ann = config(&store, "ann", "/served/ann").await;
    let ann_second = config(&store, "ann", "/served/ann-2").await;
    let bob = config(&store, "bob", "/served/bob").await;
    let off = config(&store, "bob", "/served/bob-off").await;
    store.set_storage_config_active(off.id, false).await.unwrap();
    let ways = [ServedConfigs::All, ServedConfigs::User(ann.user_id), ServedConfigs::User(bob.user_id)];
    for (i, served) in ways.into_iter().enumerate() {
        for c in [&ann, &ann_second, &bob, &off] {
            enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
        }
        let worker = format!("w{i}");
        let mut claimed = HashSet::new();
        while let Some(attempt) = store.claim(&ClaimRequest { served, ..all_kinds(&worker) }).await.unwrap() {
            let Scope::Config(config) = attempt.item.scope else { panic!("only config work is queued") };
            assert!(claimed.insert(config), "one item per config was queued");
            store.complete(attempt.fence, None).await.unwrap();
        }
        let scheduled: HashSet<_> = store.served_configs(served).await.unwrap().into_iter().collect();
        assert_eq!(scheduled, claimed, "{served:?}");
        assert!(!claimed.contains(&off.id), "an inactive config is served by neither");
        // What the claim passed over stays queued: clear it so the next way starts from the same queue.
        let mut conn = raw(&db).await;
        sql_query("DELETE FROM work_items WHERE status = 'queued'").execute(&mut conn).await.unwrap();
    }
}

#[tokio::test]
async fn inactive_config_is_not_claimed_for_and_deactivation_cancels_its_queue() {
    let (_db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let queued = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    store.set_storage_config_active(c.id, false).await.unwrap();
    assert_eq!(status_of(&store, queued).await, Status::Cancelled);
    // Work enqueued while it is inactive waits, and runs once it is active again.
    let later = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    assert!(store.claim(&all_kinds("w1")).await.unwrap().is_none());
    store.set_storage_config_active(c.id, true).await.unwrap();
    assert_eq!(store.claim(&all_kinds("w1")).await.unwrap().unwrap().item.id, later);
}

/// Rule 2, with the overlap forced: a writer that does not take the config's claim lock (see
/// [`set_running_by_hand`]) sets the config's crawl running and is held open in an explicit transaction; the
/// claimer (which serves another kind, so NOT EXISTS and SKIP LOCKED cannot steer it away, and which takes the
/// config, free of claims) picks the config's other item, and its UPDATE waits on the running-config index until
/// the first commits.
#[tokio::test]
async fn second_claim_blocked_on_index_returns_nothing() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let crawl = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let bursts = enqueue(&store, WorkKind::BurstDetection, Scope::Config(c.id)).await;

    let mut first = raw(&db).await;
    first.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    set_running_by_hand(&mut first, crawl).await;

    // Other tests of this process reach `lost_race` too, on threads without a subscriber.
    almanac_testdb::logs::each_thread_chooses_its_lines();
    let logs: Arc<Mutex<Vec<u8>>> = Arc::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || LogBuffer(writer.clone())).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let second_store = store.clone();
    let second = tokio::spawn(async move { second_store.claim(&claimer("w2", &[WorkKind::BurstDetection])).await });

    // Wait until the second claim is really blocked on a lock (the index entry of the uncommitted first).
    let waiting = db.sessions_waiting_on_locks(1).await;
    assert_eq!(waiting, 1, "the second claim never blocked on the first");
    assert!(!second.is_finished());

    first.batch_execute("COMMIT").await.unwrap();
    let outcome = second.await.unwrap();
    assert_eq!(outcome, Ok(None), "the loser gets nothing, and no error");
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(logged.contains("lost_race"), "the lost race is logged (and so counted): {logged}");
    assert_eq!(status_of(&store, crawl).await, Status::Running);
    assert_eq!(status_of(&store, bursts).await, Status::Queued);
}

/// Two concurrent claimers and two queued items of one config: exactly one runs, and the second claimer does not
/// even reach the running-config index. The overlap forced: one claim is held open in an explicit transaction,
/// the second (which serves another kind, so NOT EXISTS and SKIP LOCKED cannot steer it away from the config's
/// other item, which is older than the other config's) runs beside it. It passes over the config the first holds
/// without waiting, and claims the other config's item; the config's second item stays queued.
#[tokio::test]
async fn a_second_claim_passes_over_a_config_another_claim_holds_without_waiting() {
    let (db, store) = setup().await;
    let y = config(&store, "ann", "/y").await;
    let x = config(&store, "bob", "/x").await;
    let crawl = enqueue(&store, WorkKind::Crawl, Scope::Config(y.id)).await;
    let bursts = enqueue(&store, WorkKind::BurstDetection, Scope::Config(y.id)).await;
    let xs = enqueue(&store, WorkKind::BurstDetection, Scope::Config(x.id)).await;

    let mut first = raw(&db).await;
    first.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    let held = claim_with(&mut first, &claimer("w1", &[WorkKind::Crawl]), 1).await.unwrap().pop().expect("y's crawl");
    assert_eq!(held.item.id, crawl);
    let second_store = store.clone();
    let second = tokio::spawn(async move { second_store.claim(&claimer("w2", &[WorkKind::BurstDetection])).await });
    assert!(db.finishes_without_waiting(&second).await, "the second claim waited on the first");
    let claimed = second.await.unwrap().unwrap().expect("x's burst detection");
    assert_eq!(claimed.item.id, xs, "y is held by the first claim; x's item is claimed instead");
    first.batch_execute("COMMIT").await.unwrap();
    assert_eq!(status_of(&store, crawl).await, Status::Running);
    assert_eq!(status_of(&store, bursts).await, Status::Queued, "one item of y runs");
}

/// A claim takes at most 32 configs more than it asks for: configs without a due item of the Worker's kinds are
/// taken, uncounted, until the claim commits, and the lock table their locks fill is shared by the whole cluster.
/// So a Worker without some kind's handler, claiming `n`, finds nothing when `n + 32` or more configs holding only
/// that kind come first, and fewer than `n` items when fewer such configs do (ADR 0008, "Workers with fewer
/// kinds"). Here `n` is 1 and 2, with 40 such configs.
#[tokio::test]
async fn a_claim_takes_at_most_32_configs_more_than_it_asks_for() {
    let (db, store) = setup().await;
    for n in 0..40 {
        let c = config(&store, "ann", &format!("/purges/{n}")).await;
        enqueue(&store, WorkKind::Purge, Scope::Config(c.id)).await;
    }
    let last = config(&store, "ann", "/crawls").await;
    enqueue(&store, WorkKind::Crawl, Scope::Config(last.id)).await;
    let mut conn = raw(&db).await;
    for n in [1, 2] {
        conn.batch_execute("BEGIN").await.unwrap();
        let claimed = claim_with(&mut conn, &claimer("w1", &[WorkKind::Crawl]), n).await.unwrap();
        let taken = configs_taken(&mut conn).await.unwrap();
        conn.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(taken, n as i64 + 32, "the walk stops after {n} + 32 configs");
        assert!(claimed.is_empty(), "the crawl behind 40 purge-only configs is not reached");
    }
}

/// A claim that meets a candidate changed since the claim statement began (after its snapshot) re-reads that row
/// under its lock, finds it still queued, and claims it, without computing its candidates again. PostgreSQL's
/// recheck of a row locked after a concurrent update evaluates again the init plans its scan depends on; with the
/// candidates in one, a fifth to a quarter of the claims of 8 back-to-back claimers computed them twice (0.3 to
/// 0.7 ms each). From a materialised `WITH` the recheck keeps the candidate it had. Forced: a third session holds
/// `paused_kinds`, which only the candidates read, so the claim statement waits there after taking its snapshot;
/// meanwhile the oldest item is changed in a way that leaves it claimable (its attempt budget) and committed. The
/// candidates' own statements take their snapshots after that wait (migration 000027) and see the change; the
/// claim statement's scan meets the row's older version and rechecks it. Reading the function counts needs
/// `track_functions`, which only a superuser may set (the tests' private cluster connects as one).
#[tokio::test]
async fn a_claim_that_meets_a_row_changed_since_it_began_computes_its_candidates_once() {
    let (db, store) = setup().await;
    let a = config(&store, "ann", "/a").await;
    let b = config(&store, "bob", "/b").await;
    let changed = enqueue(&store, WorkKind::Crawl, Scope::Config(a.id)).await;
    let left = enqueue(&store, WorkKind::Crawl, Scope::Config(b.id)).await;

    let mut claiming = raw(&db).await;
    // As on a Worker's connection to a large queue: the candidates' rows found by primary key (a scan of this
    // small table would test the status first, and a recheck would never reach the candidates), with the
    // generic plan a connection keeps after its fifth run.
    claiming.batch_execute("SET enable_seqscan = off; SET track_functions = 'pl'").await.unwrap();
    // Each of these computes the candidates once too, custom plans (the first five) and generic alike: planning
    // must not compute them (as it would to estimate `unnest` over the function's call with constant arguments).
    for run in 1..=6 {
        claiming.batch_execute("BEGIN").await.unwrap();
        let before = candidates_computed(&mut claiming).await;
        assert_eq!(claim_with(&mut claiming, &all_kinds("w2"), 2).await.unwrap().len(), 2);
        let computed = candidates_computed(&mut claiming).await - before;
        assert_eq!(computed, 1, "claim {run} on the connection computed its candidates {computed} times");
        claiming.batch_execute("ROLLBACK").await.unwrap();
    }
    let mut holder = raw(&db).await;
    holder.batch_execute("BEGIN; LOCK TABLE paused_kinds IN ACCESS EXCLUSIVE MODE").await.unwrap();
    let claim = tokio::spawn(async move {
        // The view also counts this session's earlier transactions until it reports them: read it before and after.
        claiming.batch_execute("BEGIN").await.unwrap();
        let before = candidates_computed(&mut claiming).await;
        let claimed: Vec<WorkItemId> =
            claim_with(&mut claiming, &all_kinds("w2"), 2).await.unwrap().iter().map(|c| c.item.id).collect();
        let after = candidates_computed(&mut claiming).await;
        claiming.batch_execute("COMMIT").await.unwrap();
        (claimed, after - before)
    });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the claim never waited for its candidates");

    let budget = sql_query("UPDATE work_items SET max_attempts = max_attempts + 1 WHERE id = $1")
        .bind::<Uuid, _>(changed.as_uuid())
        .execute(&mut raw(&db).await)
        .await
        .unwrap();
    assert_eq!(budget, 1);
    holder.batch_execute("ROLLBACK").await.unwrap();

    let (claimed, calls) = claim.await.unwrap();
    assert_eq!(claimed, [changed, left], "the changed item, still queued, is claimed with the next");
    assert_eq!(calls, 1, "the candidates were computed {calls} times for one claim");
}

/// A claim takes its configs before it reads their items, so it never locks an item another claim took (and
/// committed) after the claim statement began: PostgreSQL would lock that row's newest version, the other
/// claim's running item, before finding it no longer queued, and keep the lock to the end of the transaction,
/// holding up that item's completion and heartbeats. Forced as above: the claim statement takes its snapshot and
/// waits on `paused_kinds`; meanwhile `a`'s item is set running and committed (by hand: a claim would wait on
/// the same lock). The claim claims `b`'s item, and while its transaction is still open, `a`'s item is
/// completed without waiting.
#[tokio::test]
async fn a_claim_never_holds_an_item_another_claim_took_since_it_began() {
    let (db, store) = setup().await;
    let a = config(&store, "ann", "/a").await;
    let b = config(&store, "bob", "/b").await;
    let taken = enqueue(&store, WorkKind::Crawl, Scope::Config(a.id)).await;
    let left = enqueue(&store, WorkKind::Crawl, Scope::Config(b.id)).await;

    let mut holder = raw(&db).await;
    holder.batch_execute("BEGIN; LOCK TABLE paused_kinds IN ACCESS EXCLUSIVE MODE").await.unwrap();
    let url = db.url().to_owned();
    let claim = tokio::spawn(async move {
        let mut claiming = AsyncPgConnection::establish(&url).await.unwrap();
        // The candidates' rows found by primary key, as on a large queue (see the test above).
        claiming.batch_execute("SET enable_seqscan = off; BEGIN").await.unwrap();
        let claimed: Vec<WorkItemId> =
            claim_with(&mut claiming, &all_kinds("w2"), 2).await.unwrap().iter().map(|c| c.item.id).collect();
        (claiming, claimed)
    });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the claim never waited for its candidates");
    set_running_by_hand(&mut raw(&db).await, taken).await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    let (mut claiming, claimed) = claim.await.unwrap();
    assert_eq!(claimed, [left], "the item taken since is not claimed");

    // The claim's transaction is still open: the taken item's completion must not wait for it.
    let url = db.url().to_owned();
    let completing = tokio::spawn(async move {
        sql_query(
            "UPDATE work_items SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL WHERE id = $1",
        )
        .bind::<Uuid, _>(taken.as_uuid())
        .execute(&mut AsyncPgConnection::establish(&url).await.unwrap())
        .await
    });
    let unhindered = db.finishes_without_waiting(&completing).await;
    claiming.batch_execute("COMMIT").await.unwrap();
    assert_eq!(completing.await.unwrap(), Ok(1));
    assert!(unhindered, "the completion of the item taken since waited for the claim that passed it over");
    assert_eq!(status_of(&store, taken).await, Status::Succeeded);
}

/// A claim of `n` takes `n` configs with an item for it, in age order, and none that another claim holds: a claim
/// held open takes the two oldest of five configs, and a second claim of two beside it takes the next two without
/// waiting. A Worker without some kind's handler is not stopped by configs whose due work is only of that kind:
/// it takes them until it commits, without counting them, and claims from the configs after them. For every
/// config and for one user's: the two are walked by statements of their own. (A config taken is not always
/// claimed from: an older unscoped item may fill the batch instead; see ADR 0008.)
#[tokio::test]
async fn a_claim_takes_a_config_per_item_it_asks_for_and_none_another_claim_holds() {
    let (db, store) = setup().await;
    for (round, served) in [(0, None), (1, Some("ann"))] {
        let mut configs = Vec::new();
        for n in 0..5 {
            let user = served.unwrap_or(if n % 2 == 0 { "ann" } else { "bob" });
            configs.push(config(&store, user, &format!("/round{round}/{n}")).await);
        }
        // The two oldest configs hold only purges; the three after them only crawls.
        let mut purges = Vec::new();
        for c in &configs[..2] {
            purges.push(enqueue(&store, WorkKind::Purge, Scope::Config(c.id)).await);
        }
        let mut crawls = Vec::new();
        for c in &configs[2..] {
            crawls.push(enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await);
        }
        let request = |worker: &str, kinds: &[WorkKind]| ClaimRequest {
            served: served.map_or(ServedConfigs::All, |_| ServedConfigs::User(configs[0].user_id)),
            ..claimer(worker, kinds)
        };
        let ids = |claimed: Vec<almanac_domain::ports::ClaimedItem>| -> Vec<WorkItemId> {
            claimed.iter().map(|c| c.item.id).collect()
        };

        let mut first = raw(&db).await;
        first.batch_execute("BEGIN").await.unwrap();
        let claimed = ids(claim_with(&mut first, &request("w1", &WorkKind::ALL), 2).await.unwrap());
        assert_eq!(claimed, purges, "the two oldest configs' items ({served:?})");
        assert_eq!(configs_taken(&mut first).await.unwrap(), 2, "a claim of two took two configs ({served:?})");

        let url = db.url().to_owned();
        let beside = request("w2", &WorkKind::ALL);
        let second = tokio::spawn(async move {
            let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
            conn.batch_execute("BEGIN").await.unwrap();
            let claimed = claim_with(&mut conn, &beside, 2).await.unwrap();
            let taken = configs_taken(&mut conn).await.unwrap();
            conn.batch_execute("ROLLBACK").await.unwrap();
            (claimed, taken)
        });
        assert!(db.finishes_without_waiting(&second).await, "the second claim waited on the first ({served:?})");
        let (claimed, taken) = second.await.unwrap();
        assert_eq!(ids(claimed), crawls[..2], "the next two configs' items ({served:?})");
        assert_eq!(taken, 2, "the second claim took two configs ({served:?})");
        first.batch_execute("ROLLBACK").await.unwrap();

        // A Worker that runs no purges: the two purge-only configs are taken, not counted.
        let mut crawling = raw(&db).await;
        crawling.batch_execute("BEGIN").await.unwrap();
        let claimed = ids(claim_with(&mut crawling, &request("w3", &[WorkKind::Crawl]), 1).await.unwrap());
        let taken = configs_taken(&mut crawling).await.unwrap();
        crawling.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(claimed, crawls[..1], "the oldest crawl, behind the purge-only configs ({served:?})");
        assert_eq!(taken, 3, "the purge-only configs in front, and the crawl's ({served:?})");
        sql_query("DELETE FROM work_items").execute(&mut raw(&db).await).await.unwrap();
    }
}

/// How many times this session has computed the claim's candidates (`track_functions` on).
async fn candidates_computed(conn: &mut AsyncPgConnection) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Calls {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        calls: i64,
    }
    let calls: Calls = sql_query(
        "SELECT coalesce(sum(calls), 0)::bigint AS calls FROM pg_stat_xact_user_functions
          WHERE funcname = 'almanac_claim_candidates'",
    )
    .get_result(conn)
    .await
    .unwrap();
    calls.calls
}

/// The claim reads each config's head (`queue_heads`), kept by triggers. Forced interleaving: an enqueue for a
/// running config is held open (its head says "running, not claimable"), the running item's completion waits
/// for that head, and then reads the committed enqueue: the config is claimable again and its new item is
/// claimed. A head computed from the completion's own older snapshot would leave the item stranded.
#[tokio::test]
async fn a_head_refreshed_under_a_concurrent_enqueue_leaves_the_new_item_claimable() {
    let (db, store) = setup().await;
    head_refreshed_under_a_concurrent_enqueue(&db, &store).await;
}

/// The same on a database whose defaults a DBA set for its other clients: SERIALIZABLE, and a lock timeout of a
/// millisecond. The store's transactions run at READ COMMITTED and wait for locks all the same, so the completion
/// that waited for the enqueue's lock on its head computes it from what the enqueue committed. At the database's
/// defaults it failed, with a serialization error (checked by leaving the isolation to the server) and with a
/// lock timeout.
#[tokio::test]
async fn the_queue_keeps_its_rules_on_a_database_that_defaults_to_serializable_and_a_lock_timeout() {
    let db = TestDatabase::create().await;
    raw(&db)
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {0} SET default_transaction_isolation = 'serializable';
             ALTER DATABASE {0} SET lock_timeout = '1ms'",
            db.name()
        ))
        .await
        .unwrap();
    // A Worker's store (its statements limited to a lease, which bounds its waits).
    let connections = WorkerConnections {
        shared: 4,
        reserved: 2,
        acquire_timeout: Duration::from_secs(10),
        lease: Duration::from_secs(60),
    };
    let store = PgStore::for_worker(db.url(), connections).expect("store");
    let seen = store.settings_in_transaction(&["transaction_isolation", "lock_timeout"]).await.unwrap();
    assert_eq!(seen, ["read committed", "0"]);
    // The command line's and the page's store (no statement limit) keeps the database's lock timeout.
    let cli = PgStore::new(db.url(), 2, Duration::from_secs(10)).expect("store");
    let seen = cli.settings_in_transaction(&["transaction_isolation", "lock_timeout"]).await.unwrap();
    assert_eq!(seen, ["read committed", "1ms"]);
    let mut plain = raw(&db).await;
    plain.batch_execute("BEGIN").await.unwrap();
    let default: Setting =
        sql_query("SELECT current_setting('transaction_isolation') AS value").get_result(&mut plain).await.unwrap();
    assert_eq!(default.value, "serializable", "the database's own default, for every other client");
    head_refreshed_under_a_concurrent_enqueue(&db, &store).await;
}

/// A store over a pool of the caller's (a web backend's), on a database that defaults to SERIALIZABLE: the caller's
/// sessions keep their default, and the store's own transactions and single statements run at READ COMMITTED. Its
/// completion that waited for an enqueue's lock on the config's head computes the head from what the enqueue
/// committed, and its enqueue that waited for a Worker's change of the head goes in. Both failed with a
/// serialization error when the store left the isolation to the caller's sessions.
#[tokio::test]
async fn a_store_over_a_callers_pool_keeps_the_queues_rules_on_a_database_that_defaults_to_serializable() {
    let db = TestDatabase::create().await;
    let default = format!("ALTER DATABASE {} SET default_transaction_isolation = 'serializable'", db.name());
    raw(&db).await.batch_execute(&default).await.unwrap();
    let manager = diesel_async::pooled_connection::AsyncDieselConnectionManager::<AsyncPgConnection>::new(db.url());
    let pool = diesel_async::pooled_connection::deadpool::Pool::builder(manager).max_size(3).build().unwrap();
    let mut theirs = pool.get().await.unwrap();
    let seen: Setting =
        sql_query("SELECT current_setting('transaction_isolation') AS value").get_result(&mut theirs).await.unwrap();
    assert_eq!(seen.value, "serializable", "the caller's own session keeps its default");
    drop(theirs);
    let store = PgStore::from_pool(pool);
    let seen = store.settings_in_transaction(&["transaction_isolation"]).await.unwrap();
    assert_eq!(seen, ["read committed"]);
    head_refreshed_under_a_concurrent_enqueue(&db, &store).await;

    // The store's enqueue waits for a change of the head that another session commits meanwhile.
    let c = config(&store, "bob", "/bob").await;
    enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let mut worker = raw(&db).await;
    worker.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    sql_query("UPDATE queue_heads SET earliest_run_after = earliest_run_after WHERE storage_config_id = $1")
        .bind::<Uuid, _>(c.id.as_uuid())
        .execute(&mut worker)
        .await
        .unwrap();
    let enqueuer = store.clone();
    let (config_id, late) = (c.id, NewWorkItem::new(WorkKind::Purge, Scope::Config(c.id)).unwrap());
    let enqueued = tokio::spawn(async move { enqueuer.enqueue(&late).await });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the enqueue never waited for the config's head");
    worker.batch_execute("COMMIT").await.unwrap();
    let late = enqueued.await.unwrap().expect("the enqueue went in after the head's change");
    let claimed = store.claim(&all_kinds("w4")).await.unwrap().expect("bob's crawl");
    assert_eq!(claimed.item.scope, Scope::Config(config_id));
    assert_ne!(claimed.item.id, late.item.id, "the crawl came first");
}

#[derive(diesel::QueryableByName)]
struct Setting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    value: String,
}

/// A config's item runs; an enqueue into the config holds its head's lock while the item's completion refreshes
/// the head (it waits for the lock); once the enqueue commits, the completion's refresh sees the new item, and
/// the new item is claimed next.
async fn head_refreshed_under_a_concurrent_enqueue(db: &TestDatabase, store: &PgStore) {
    let c = config(store, "ann", "/c").await;
    enqueue(store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let running = store.claim(&all_kinds("w1")).await.unwrap().expect("claimed");

    let mut enqueuer = raw(db).await;
    enqueuer.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    let late = WorkItemId::new();
    sql_query("INSERT INTO work_items (id, kind, storage_config_id) VALUES ($1, 'burst_detection', $2)")
        .bind::<Uuid, _>(late.as_uuid())
        .bind::<Uuid, _>(c.id.as_uuid())
        .execute(&mut enqueuer)
        .await
        .unwrap();
    let completer = store.clone();
    let complete = tokio::spawn(async move { completer.complete(running.fence, None).await });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the completion never waited for the config's head");
    assert!(!complete.is_finished());
    enqueuer.batch_execute("COMMIT").await.unwrap();
    assert_eq!(complete.await.unwrap(), Ok(WriteOutcome::Written));

    let next = store.claim(&all_kinds("w2")).await.unwrap().expect("the late item is claimable");
    assert_eq!(next.item.id, late);
    // And the head follows the claim: running again, nothing more to claim.
    assert!(store.claim(&all_kinds("w3")).await.unwrap().is_none());
}

/// Whether the head of `config` says it can be claimed for.
async fn head_claimable(db: &TestDatabase, config: &StorageConfig) -> bool {
    #[derive(diesel::QueryableByName)]
    struct Head {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        claimable: bool,
    }
    let head: Head = sql_query("SELECT claimable FROM queue_heads WHERE storage_config_id = $1")
        .bind::<Uuid, _>(config.id.as_uuid())
        .get_result(&mut raw(db).await)
        .await
        .unwrap();
    head.claimable
}

/// A claim only marks its config's head not claimable (migration 000012), under the head's lock, instead of
/// computing it again; an enqueue into that config computes it in full. Forced both ways round, the head says
/// "not claimable" for as long as the claimed item runs (the enqueue that went first computed "claimable" from
/// a snapshot without the claim, and the claim's mark, which waited for it, overwrote that), and once the item
/// ends, the config's new item is claimed. A claim that left its head alone fails here (checked by removing the
/// mark).
#[tokio::test]
async fn a_claim_and_an_enqueue_racing_for_a_head_leave_it_unclaimable_while_the_item_runs() {
    let (db, store) = setup().await;
    let a = config(&store, "ann", "/a").await;
    let b = config(&store, "bob", "/b").await;
    for c in [&a, &b] {
        enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    }
    let insert = |config: &StorageConfig| {
        sql_query("INSERT INTO work_items (id, kind, storage_config_id) VALUES ($1, 'burst_detection', $2)")
            .bind::<Uuid, _>(WorkItemId::new().as_uuid())
            .bind::<Uuid, _>(config.id.as_uuid())
    };
    // a: the enqueue holds the head first; the claim's mark waits for it.
    let mut enqueuer = raw(&db).await;
    enqueuer.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    insert(&a).execute(&mut enqueuer).await.unwrap();
    let claiming = {
        let url = db.url().to_owned();
        let request = claimer("w1", &[WorkKind::Crawl]);
        tokio::spawn(async move {
            let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
            conn.batch_execute("BEGIN").await.unwrap();
            let claimed = claim_with(&mut conn, &request, 1).await.unwrap().pop();
            conn.batch_execute("COMMIT").await.unwrap();
            claimed
        })
    };
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the claim never waited for the enqueue's head");
    enqueuer.batch_execute("COMMIT").await.unwrap();
    let first = claiming.await.unwrap().expect("a's crawl (the older config first)");
    assert!(!head_claimable(&db, &a).await, "a's head says claimable while its crawl runs");

    // b: the claim holds the head first; the enqueue's refresh waits for it, then reads the running item.
    let mut claimant = raw(&db).await;
    claimant.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    let second =
        claim_with(&mut claimant, &claimer("w2", &[WorkKind::Crawl]), 1).await.unwrap().pop().expect("b's crawl");
    let enqueuing = {
        let url = db.url().to_owned();
        let late = insert(&b);
        tokio::spawn(async move { late.execute(&mut AsyncPgConnection::establish(&url).await.unwrap()).await })
    };
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the enqueue never waited for the claim's head");
    claimant.batch_execute("COMMIT").await.unwrap();
    enqueuing.await.unwrap().unwrap();
    assert!(!head_claimable(&db, &b).await, "b's head says claimable while its crawl runs");
    assert!(store.claim(&all_kinds("w3")).await.unwrap().is_none(), "both configs are busy");

    // Once each crawl ends, its config's burst detection is claimed.
    for (running, config) in [(first, &a), (second, &b)] {
        assert_eq!(store.complete(running.fence, None).await, Ok(WriteOutcome::Written));
        assert!(head_claimable(&db, config).await);
        let next = store.claim(&all_kinds("w3")).await.unwrap().expect("the config's late item");
        assert_eq!((next.item.kind, next.item.scope), (WorkKind::BurstDetection, Scope::Config(config.id)));
    }
}

/// First in, first out per config, even for an item handed back while a claim was on its way: a released item
/// is due again from its release (`run_after` = the release transaction's start), and a claim whose transaction
/// began before that release, but whose statement reads it, still takes it before the config's newer item. Due
/// by the claim transaction's `now()`, it took the newer one (142 inversions with 16 Worker processes in the
/// many-Workers benchmark; migration 000013).
#[tokio::test]
async fn a_claim_begun_before_a_release_still_takes_the_released_item_first() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let older = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let newer = enqueue(&store, WorkKind::BurstDetection, Scope::Config(c.id)).await;
    let held = store.claim(&all_kinds("w1")).await.unwrap().expect("the older item");
    assert_eq!(held.item.id, older);

    let mut claimant = raw(&db).await;
    claimant.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED; SELECT now()").await.unwrap();
    assert_eq!(store.release(held.fence).await, Ok(WriteOutcome::Written));
    #[derive(diesel::QueryableByName)]
    struct Later {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        later: bool,
    }
    let due: Later = sql_query("SELECT run_after > now() AS later FROM work_items WHERE id = $1")
        .bind::<Uuid, _>(older.as_uuid())
        .get_result(&mut claimant)
        .await
        .unwrap();
    assert!(due.later, "the release's transaction began after the claim's (the race this test is about)");
    let claimed = claim_with(&mut claimant, &all_kinds("w2"), 2).await.unwrap();
    claimant.batch_execute("COMMIT").await.unwrap();
    let ids: Vec<WorkItemId> = claimed.iter().map(|c| c.item.id).collect();
    assert_eq!(ids, [older], "the released older item first, and nothing else of its config");
    assert_eq!(status_of(&store, newer).await, Status::Queued);
}

/// Deactivating a config takes it out of the claim's candidates at once (its head is kept by a trigger on
/// storage_configs), and re-activating brings its queued work back.
#[tokio::test]
async fn a_config_switched_off_and_on_again_is_claimed_for_only_while_active() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let id = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let flip = |active: bool| {
        sql_query("UPDATE storage_configs SET is_active = $1 WHERE id = $2")
            .bind::<diesel::sql_types::Bool, _>(active)
            .bind::<Uuid, _>(c.id.as_uuid())
    };
    // Switched off by hand (not through set_storage_config_active, which also cancels the queue).
    flip(false).execute(&mut raw(&db).await).await.unwrap();
    assert!(store.claim(&all_kinds("w1")).await.unwrap().is_none());
    flip(true).execute(&mut raw(&db).await).await.unwrap();
    assert_eq!(store.claim(&all_kinds("w1")).await.unwrap().expect("active again").item.id, id);
}

/// Completing and claiming share one transaction: the next item comes back with the completion. A claim that
/// loses the race on the running-config index (forced as above: a writer that bypasses the claim is held open
/// with the config's other item running) is rolled back alone, and the completion still commits.
#[tokio::test]
async fn complete_and_claim_commits_the_completion_even_when_its_claim_loses_the_race() {
    let (db, store) = setup().await;
    let x = config(&store, "ann", "/x").await;
    let y = config(&store, "bob", "/y").await;
    let first = enqueue(&store, WorkKind::Crawl, Scope::Config(x.id)).await;
    let second = enqueue(&store, WorkKind::Crawl, Scope::Config(x.id)).await;
    let running = store.claim(&all_kinds("w1")).await.unwrap().expect("claimed");
    assert_eq!(running.item.id, first);
    let done = store.complete_and_claim(running.fence, None, &all_kinds("w1")).await.unwrap();
    assert_eq!(done.written, WriteOutcome::Written);
    let next = done.next.unwrap().expect("the config's next item, claimed with the completion");
    assert_eq!(next.item.id, second);
    assert_eq!(status_of(&store, first).await, Status::Succeeded);

    // Now the race: y's crawl is being set running by a transaction held open (by hand, without y's claim lock);
    // the completion's claim (bursts only) picks y's other item and waits on the running-config index.
    let crawl = enqueue(&store, WorkKind::Crawl, Scope::Config(y.id)).await;
    let bursts = enqueue(&store, WorkKind::BurstDetection, Scope::Config(y.id)).await;
    let mut held = raw(&db).await;
    held.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    set_running_by_hand(&mut held, crawl).await;
    let completer = store.clone();
    let completing = tokio::spawn(async move {
        completer.complete_and_claim(next.fence, None, &claimer("w1", &[WorkKind::BurstDetection])).await
    });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the completion's claim never blocked on the index");
    held.batch_execute("COMMIT").await.unwrap();
    let done = completing.await.unwrap().unwrap();
    assert_eq!(done.written, WriteOutcome::Written, "the completion committed");
    assert_eq!(done.next, Ok(None), "the claim lost the race, quietly");
    assert_eq!(status_of(&store, second).await, Status::Succeeded);
    assert_eq!(status_of(&store, bursts).await, Status::Queued);
}

/// The claim after a completion does not wait long for another transaction's lock (here: an enqueue into the
/// other config, held open, holds that config's queue head): it gives up, and the completion commits anyway.
#[tokio::test]
async fn complete_and_claim_does_not_wait_on_another_configs_lock() {
    let (db, store) = setup().await;
    let x = config(&store, "ann", "/x").await;
    let y = config(&store, "bob", "/y").await;
    let a = enqueue(&store, WorkKind::Crawl, Scope::Config(x.id)).await;
    let running = store.claim(&all_kinds("w1")).await.unwrap().expect("claimed");
    assert_eq!(running.item.id, a);
    let b = enqueue(&store, WorkKind::Crawl, Scope::Config(y.id)).await;
    let mut held = raw(&db).await;
    held.batch_execute("BEGIN").await.unwrap();
    sql_query("INSERT INTO work_items (id, kind, storage_config_id) VALUES ($1, 'purge', $2)")
        .bind::<Uuid, _>(WorkItemId::new().as_uuid())
        .bind::<Uuid, _>(y.id.as_uuid())
        .execute(&mut held)
        .await
        .unwrap();
    // (Waiting for the lock would wait for ever here: the holder commits only after this returns.)
    let done = store.complete_and_claim(running.fence, None, &all_kinds("w1")).await.unwrap();
    assert_eq!(done.written, WriteOutcome::Written);
    assert_eq!(done.next, Ok(None), "it gave up on y's head");
    assert_eq!(status_of(&store, a).await, Status::Succeeded);
    assert_eq!(status_of(&store, b).await, Status::Queued);
    held.batch_execute("COMMIT").await.unwrap();
    assert_eq!(store.claim(&all_kinds("w2")).await.unwrap().expect("y's item").item.id, b);
}

/// A claim of several items takes the oldest due item of as many different configs (and unscoped items), never
/// two of one config, in claim order; it answers fewer when fewer are eligible.
#[tokio::test]
async fn claim_many_takes_the_oldest_items_of_different_configs_in_order() {
    let (_db, store) = setup().await;
    let x = config(&store, "ann", "/x").await;
    let y = config(&store, "bob", "/y").await;
    let z = config(&store, "cy", "/z").await;
    let x1 = enqueue(&store, WorkKind::Crawl, Scope::Config(x.id)).await;
    let x2 = enqueue(&store, WorkKind::BurstDetection, Scope::Config(x.id)).await;
    let u1 = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let y1 = enqueue(&store, WorkKind::Crawl, Scope::Config(y.id)).await;
    let u2 = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let z1 = enqueue(&store, WorkKind::Purge, Scope::Config(z.id)).await;
    // z is busy: its item is not eligible.
    let z_busy = enqueue(&store, WorkKind::Purge, Scope::Config(z.id)).await;
    let _ = z_busy;
    let holder = store.claim(&claimer("w0", &[WorkKind::Purge])).await.unwrap().expect("z's first");
    assert_eq!(holder.item.id, z1);

    let claimed = store.claim_many(&all_kinds("w1"), 4).await.unwrap();
    let ids: Vec<_> = claimed.iter().map(|c| c.item.id).collect();
    assert_eq!(ids, [x1, u1, y1, u2], "oldest first, x's second item left for later");
    assert!(claimed.iter().all(|c| c.item.status == Status::Running && c.item.worker_id.as_deref() == Some("w1")));
    assert!(claimed.iter().all(|c| c.fence.attempt.get() == 1));

    // Fewer than asked: x and y are busy now, z too; nothing else is queued.
    assert!(store.claim_many(&all_kinds("w2"), 8).await.unwrap().is_empty());
    assert_eq!(status_of(&store, x2).await, Status::Queued);
    // Asking for none claims nothing.
    assert!(store.claim_many(&all_kinds("w2"), 0).await.unwrap().is_empty());
}

/// Completions written together are fenced one by one: a stale attempt's completion is lost and writes nothing,
/// the others are written; the claim that follows takes up to as many items as asked, in the same commit.
#[tokio::test]
async fn complete_many_and_claim_fences_each_completion_and_claims_as_many_as_asked() {
    let (db, store) = setup().await;
    let configs = [config(&store, "ann", "/a").await, config(&store, "bob", "/b").await];
    let mut first = Vec::new();
    for c in &configs {
        first.push(enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await);
    }
    let stale = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let mut next = Vec::new();
    for c in &configs {
        next.push(enqueue(&store, WorkKind::BurstDetection, Scope::Config(c.id)).await);
    }
    let running = store.claim_many(&all_kinds("w1"), 3).await.unwrap();
    assert_eq!(running.iter().map(|c| c.item.id).collect::<Vec<_>>(), [first[0], first[1], stale]);
    // The unscoped item's lease expires and recovery requeues it: its attempt is stale now.
    expire_lease(&db, stale).await;
    assert_eq!(store.recover_expired_leases(3).await.unwrap().len(), 1);

    let result = serde_json::json!({"files": 3});
    let done: Vec<_> =
        running.iter().map(|c| (c.fence, if c.item.id == first[0] { Some(&result) } else { None })).collect();
    let answer = store.complete_many_and_claim(&done, &all_kinds("w1"), 2).await.unwrap();
    assert_eq!(answer.written, [WriteOutcome::Written, WriteOutcome::Written, WriteOutcome::Lost]);
    let claimed: Vec<_> = answer.next.unwrap().into_iter().map(|c| c.item.id).collect();
    // The requeued unscoped item kept its place (the oldest): it and one config's next item, two as asked.
    assert_eq!(claimed, [stale, next[0]]);
    assert_eq!(status_of(&store, first[0]).await, Status::Succeeded);
    assert_eq!(store.get(first[0]).await.unwrap().unwrap().result, Some(result));
    assert_eq!(status_of(&store, first[1]).await, Status::Succeeded);
    assert_eq!(status_of(&store, next[1]).await, Status::Queued);
    // Without a claim, only the completions.
    let held = store.claim(&all_kinds("w1")).await.unwrap().expect("b's next");
    let answer = store.complete_many_and_claim(&[(held.fence, None)], &all_kinds("w1"), 0).await.unwrap();
    assert_eq!(answer.written, [WriteOutcome::Written]);
    assert_eq!(answer.next, Ok(Vec::new()));
}

/// A batch that holds a stale attempt's completion beside the current attempt's, of the same item, writes the
/// current one only, and says so for each.
#[tokio::test]
async fn complete_many_tells_a_stale_attempt_from_the_current_one_of_the_same_item() {
    let (db, store) = setup().await;
    let id = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let first = store.claim(&all_kinds("w1")).await.unwrap().expect("first attempt");
    expire_lease(&db, id).await;
    assert_eq!(store.recover_expired_leases(3).await.unwrap().len(), 1);
    let second = store.claim(&all_kinds("w2")).await.unwrap().expect("second attempt");
    assert_eq!((first.item.id, second.item.id), (id, id));
    let done = [(first.fence, None), (second.fence, None)];
    let answer = store.complete_many_and_claim(&done, &all_kinds("w2"), 0).await.unwrap();
    assert_eq!(answer.written, [WriteOutcome::Lost, WriteOutcome::Written]);
    assert_eq!(status_of(&store, id).await, Status::Succeeded);
}

/// A claim of several items that races another writer for one of their configs on the running-config index
/// (one that bypasses the claim, held open as above) claims none of them, quietly (rule 2 holds for every item of
/// a batch).
#[tokio::test]
async fn claim_many_that_loses_the_race_for_one_config_claims_nothing() {
    let (db, store) = setup().await;
    let x = config(&store, "ann", "/x").await;
    let y = config(&store, "bob", "/y").await;
    let crawl = enqueue(&store, WorkKind::Crawl, Scope::Config(y.id)).await;
    let bursts = enqueue(&store, WorkKind::BurstDetection, Scope::Config(y.id)).await;
    let xs = enqueue(&store, WorkKind::BurstDetection, Scope::Config(x.id)).await;
    let mut held = raw(&db).await;
    held.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED").await.unwrap();
    set_running_by_hand(&mut held, crawl).await;
    let claimer_store = store.clone();
    let claiming =
        tokio::spawn(async move { claimer_store.claim_many(&claimer("w1", &[WorkKind::BurstDetection]), 4).await });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the batch never blocked on the index");
    held.batch_execute("COMMIT").await.unwrap();
    assert_eq!(claiming.await.unwrap(), Ok(Vec::new()), "the whole batch lost the race, quietly");
    assert_eq!(status_of(&store, bursts).await, Status::Queued);
    assert_eq!(status_of(&store, xs).await, Status::Queued);
    let again = store.claim_many(&claimer("w1", &[WorkKind::BurstDetection]), 4).await.unwrap();
    assert_eq!(again.iter().map(|c| c.item.id).collect::<Vec<_>>(), [xs], "y is busy; x's item comes next poll");
}

#[tokio::test]
async fn second_running_row_for_a_config_violates_the_running_config_index() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let other = enqueue(&store, WorkKind::BurstDetection, Scope::Config(c.id)).await;
    store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    let err = sql_query(
        "UPDATE work_items SET status = 'running', attempt = 1, worker_id = 'rogue',
                lease_expires_at = now() + interval '1 minute' WHERE id = $1",
    )
    .bind::<Uuid, _>(other.as_uuid())
    .execute(&mut raw(&db).await)
    .await
    .unwrap_err();
    match err {
        diesel::result::Error::DatabaseError(diesel::result::DatabaseErrorKind::UniqueViolation, info) => {
            assert_eq!(info.constraint_name(), Some("ix_work_items_running_config"));
        }
        other => panic!("expected a unique violation, got {other:?}"),
    }
}

/// Only the running-config index means "lost the race": any other unique violation in the claim is an error.
#[tokio::test]
async fn non_index_unique_violation_in_a_claim_is_an_error() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let d = config(&store, "bob", "/d").await;
    enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    enqueue(&store, WorkKind::Crawl, Scope::Config(d.id)).await;
    raw(&db)
        .await
        .batch_execute(
            "CREATE UNIQUE INDEX ix_test_one_item_per_worker ON work_items (worker_id) WHERE status = 'running'",
        )
        .await
        .unwrap();
    store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    let err = store.claim(&all_kinds("w1")).await.unwrap_err();
    assert!(matches!(err, QueueError::Rejected(ref m) if m.contains("ix_test_one_item_per_worker")), "{err:?}");
}

#[tokio::test]
async fn heartbeat_renews_the_lease_stores_progress_and_reports_a_cancel_request() {
    let (db, store) = setup().await;
    let id = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let claimed = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    expire_lease(&db, id).await;
    let progress = serde_json::json!({"done": 3});
    let beat = store.heartbeat(claimed.fence, lease(), Some(&progress)).await.unwrap();
    assert_eq!(beat, Heartbeat::Renewed { cancel_requested: false });
    let item = store.get(id).await.unwrap().unwrap();
    assert_eq!(item.progress, Some(progress.clone()));
    assert!(item.lease_expires_at.unwrap() > chrono::Utc::now() + chrono::Duration::seconds(50));
    // No progress keeps the last one.
    store.heartbeat(claimed.fence, lease(), None).await.unwrap();
    assert_eq!(store.get(id).await.unwrap().unwrap().progress, Some(progress));

    assert_eq!(store.request_cancel(id).await.unwrap(), CancelOutcome::Requested);
    assert_eq!(status_of(&store, id).await, Status::Running);
    let beat = store.heartbeat(claimed.fence, lease(), None).await.unwrap();
    assert_eq!(beat, Heartbeat::Renewed { cancel_requested: true });
    assert_eq!(store.mark_cancelled(claimed.fence).await.unwrap(), WriteOutcome::Written);
    assert_eq!(status_of(&store, id).await, Status::Cancelled);
}

#[tokio::test]
async fn every_fenced_write_of_a_stale_attempt_is_lost_and_changes_nothing() {
    let (db, store) = setup().await;
    let id = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let stale = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    expire_lease(&db, id).await;
    assert_eq!(store.recover_expired_leases(3).await.unwrap().len(), 1);
    let current = store.claim(&all_kinds("w2")).await.unwrap().unwrap();
    assert_eq!(current.fence.attempt.get(), 2);
    let before = store.get(id).await.unwrap().unwrap();

    let failure = Failure { error: "boom".into(), retryable: true, retry_delay: Duration::from_secs(1) };
    assert_eq!(store.heartbeat(stale.fence, lease(), None).await.unwrap(), Heartbeat::Lost);
    assert_eq!(store.complete(stale.fence, None).await.unwrap(), WriteOutcome::Lost);
    assert_eq!(store.fail(stale.fence, &failure).await.unwrap(), FailOutcome::Lost);
    assert_eq!(store.mark_cancelled(stale.fence).await.unwrap(), WriteOutcome::Lost);
    assert_eq!(store.release(stale.fence).await.unwrap(), WriteOutcome::Lost);
    assert_eq!(store.get(id).await.unwrap().unwrap(), before);

    // And once finished, even the current attempt's writes are lost.
    assert_eq!(store.complete(current.fence, None).await.unwrap(), WriteOutcome::Written);
    assert_eq!(store.heartbeat(current.fence, lease(), None).await.unwrap(), Heartbeat::Lost);
    assert_eq!(store.release(current.fence).await.unwrap(), WriteOutcome::Lost);
    assert_eq!(status_of(&store, id).await, Status::Succeeded);
}

#[tokio::test]
async fn retryable_failure_is_requeued_with_backoff_until_the_budget_is_spent() {
    let (db, store) = setup().await;
    let item = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap().with_max_attempts(2).unwrap();
    let id = store.enqueue(&item).await.unwrap().item.id;
    let requested_at = store.get(id).await.unwrap().unwrap().requested_at;
    let failure = Failure { error: "disk full".into(), retryable: true, retry_delay: Duration::from_secs(300) };

    let first = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    let before = chrono::Utc::now();
    let FailOutcome::RetryScheduled { run_after } = store.fail(first.fence, &failure).await.unwrap() else {
        panic!("expected a retry")
    };
    assert!(run_after >= before + chrono::Duration::seconds(299), "backoff applied");
    let item = store.get(id).await.unwrap().unwrap();
    assert_eq!((item.status, item.failures, item.stalls), (Status::Queued, 1, 0));
    assert_eq!(item.last_error.as_deref(), Some("disk full"));
    assert_eq!(item.requested_at, requested_at);
    assert!(store.claim(&all_kinds("w1")).await.unwrap().is_none(), "not due during backoff");

    sql_query("UPDATE work_items SET run_after = now() WHERE id = $1")
        .bind::<Uuid, _>(id.as_uuid())
        .execute(&mut raw(&db).await)
        .await
        .unwrap();
    let second = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    assert_eq!(store.fail(second.fence, &failure).await.unwrap(), FailOutcome::Failed);
    let item = store.get(id).await.unwrap().unwrap();
    assert_eq!((item.status, item.failures), (Status::Failed, 2));
    assert!(item.finished_at.is_some());
}

#[tokio::test]
async fn non_retryable_failure_fails_at_once() {
    let (_db, store) = setup().await;
    let id = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let claimed = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    let failure = Failure { error: "bad payload".into(), retryable: false, retry_delay: Duration::ZERO };
    assert_eq!(store.fail(claimed.fence, &failure).await.unwrap(), FailOutcome::Failed);
    assert_eq!(store.get(id).await.unwrap().unwrap().failures, 1);
}

#[tokio::test]
async fn recovery_requeues_expired_leases_then_fails_at_max_stalls() {
    let (db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let id = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let later = enqueue(&store, WorkKind::BurstDetection, Scope::Config(c.id)).await;
    let requested_at = store.get(id).await.unwrap().unwrap().requested_at;

    // A live lease is left alone.
    store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    assert!(store.recover_expired_leases(2).await.unwrap().is_empty());

    expire_lease(&db, id).await;
    let recovered = store.recover_expired_leases(2).await.unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!((recovered[0].id, recovered[0].status, recovered[0].stalls), (id, Status::Queued, 1));
    let item = store.get(id).await.unwrap().unwrap();
    assert_eq!((item.requested_at, item.failures, item.lease_expires_at), (requested_at, 0, None));

    // Requeued with its place kept: it goes before the config's later item.
    let again = store.claim(&all_kinds("w2")).await.unwrap().unwrap();
    assert_eq!(again.item.id, id);
    expire_lease(&db, id).await;
    let recovered = store.recover_expired_leases(2).await.unwrap();
    assert_eq!((recovered[0].status, recovered[0].stalls), (Status::Failed, 2));
    let item = store.get(id).await.unwrap().unwrap();
    assert!(item.last_error.unwrap().contains("stalled"));
    assert_eq!(store.claim(&all_kinds("w3")).await.unwrap().unwrap().item.id, later);
}

async fn enqueue_keyed(store: &PgStore, kind: WorkKind, scope: Scope, key: &str) -> WorkItemId {
    let item = NewWorkItem::new(kind, scope).unwrap().with_dedup_key(DedupKey::new(key).unwrap());
    let enqueued = store.enqueue(&item).await.expect("enqueue");
    assert!(enqueued.created, "{key} was not queued yet");
    enqueued.item.id
}

/// Two running items may share a dedup key (the index covers queued items only): two unscoped items, or two
/// configs' items given one key by the web backend. After an outage their leases expire together.
#[tokio::test]
async fn recovery_of_expired_items_sharing_a_key_is_never_poisoned() {
    let (db, store) = setup().await;
    let (c1, c2) = (config(&store, "ann", "/c1").await, config(&store, "bob", "/c2").await);
    let mut running = Vec::new();
    for (kind, scope, key) in [
        (WorkKind::TokenCleanup, Scope::Unscoped, "nightly"),
        (WorkKind::TokenCleanup, Scope::Unscoped, "nightly"),
        (WorkKind::Crawl, Scope::Config(c1.id), "crawl-all"),
        (WorkKind::Crawl, Scope::Config(c2.id), "crawl-all"),
        (WorkKind::WorkItemRetention, Scope::Unscoped, "held"),
    ] {
        let id = enqueue_keyed(&store, kind, scope, key).await;
        assert_eq!(store.claim(&all_kinds("w1")).await.unwrap().unwrap().item.id, id);
        running.push(id);
    }
    let unrelated = enqueue(&store, WorkKind::ProxySweep, Scope::Unscoped).await;
    store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    running.push(unrelated);
    // A newer item already holds `held` in the queue.
    let holder = enqueue_keyed(&store, WorkKind::WorkItemRetention, Scope::Unscoped, "held").await;
    for id in &running {
        expire_lease(&db, *id).await;
    }

    let recovered = store.recover_expired_leases(3).await.expect("one recovery requeues them all");
    assert_eq!(recovered.len(), 6);
    assert!(recovered.iter().all(|r| r.status == Status::Queued && r.stalls == 1), "{recovered:?}");
    let key = |id: WorkItemId| {
        let store = &store;
        async move { store.get(id).await.unwrap().unwrap().dedup_key.map(|k| k.to_string()) }
    };
    assert_eq!(key(running[0]).await.as_deref(), Some("nightly"), "the oldest keeps the key");
    assert_eq!(key(running[1]).await, None);
    assert_eq!(key(running[2]).await.as_deref(), Some("crawl-all"));
    assert_eq!(key(running[3]).await, None);
    assert_eq!(key(running[4]).await, None, "a queued holder keeps its key");
    assert_eq!(key(holder).await.as_deref(), Some("held"));
    assert!(store.recover_expired_leases(3).await.unwrap().is_empty(), "and the next tick has nothing left");
    // Enqueueing a held key returns the queued item, as before.
    let again = store
        .enqueue(
            &NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped)
                .unwrap()
                .with_dedup_key(DedupKey::new("nightly").unwrap()),
        )
        .await
        .unwrap();
    assert_eq!((again.created, again.item.id), (false, running[0]));
}

#[tokio::test]
async fn a_failure_after_a_cancel_request_ends_cancelled_not_retried() {
    let (_db, store) = setup().await;
    let id = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let claimed = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    assert_eq!(store.request_cancel(id).await.unwrap(), CancelOutcome::Requested);
    let failure = Failure { error: "disk full".into(), retryable: true, retry_delay: Duration::from_secs(1) };
    assert_eq!(store.fail(claimed.fence, &failure).await.unwrap(), FailOutcome::Cancelled);
    let item = store.get(id).await.unwrap().unwrap();
    assert_eq!((item.status, item.last_error.as_deref()), (Status::Cancelled, Some("disk full")));
    assert!(item.finished_at.is_some());
    assert!(store.claim(&all_kinds("w2")).await.unwrap().is_none(), "never retried");
}

#[tokio::test]
async fn recovery_cancels_an_expired_item_whose_cancel_was_requested() {
    let (db, store) = setup().await;
    let id = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    store.request_cancel(id).await.unwrap();
    expire_lease(&db, id).await;
    let recovered = store.recover_expired_leases(3).await.unwrap();
    assert_eq!(recovered[0].status, Status::Cancelled);
}

#[tokio::test]
async fn cancel_of_queued_is_immediate_and_of_finished_changes_nothing() {
    let (_db, store) = setup().await;
    let id = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    assert_eq!(store.request_cancel(id).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(status_of(&store, id).await, Status::Cancelled);
    assert!(store.claim(&all_kinds("w1")).await.unwrap().is_none());
    assert_eq!(store.request_cancel(id).await.unwrap(), CancelOutcome::AlreadyFinished(Status::Cancelled));
    assert_eq!(store.request_cancel(WorkItemId::new()).await.unwrap(), CancelOutcome::NotFound);
}

#[tokio::test]
async fn release_requeues_without_counting_a_failure_or_a_stall() {
    let (_db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let id = enqueue(&store, WorkKind::Crawl, Scope::Config(c.id)).await;
    let claimed = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    assert_eq!(store.release(claimed.fence).await.unwrap(), WriteOutcome::Written);
    let item = store.get(id).await.unwrap().unwrap();
    assert_eq!((item.status, item.failures, item.stalls, item.attempt), (Status::Queued, 0, 0, 1));
    let again = store.claim(&all_kinds("w2")).await.unwrap().unwrap();
    assert_eq!((again.item.id, again.fence.attempt.get()), (id, 2));
}

#[tokio::test]
async fn requeue_drops_its_dedup_key_when_a_newer_item_holds_it() {
    let (_db, store) = setup().await;
    let c = config(&store, "ann", "/c").await;
    let item = NewWorkItem::new(WorkKind::Crawl, Scope::Config(c.id))
        .unwrap()
        .with_dedup_key(DedupKey::new("crawl:c").unwrap());
    let running = store.enqueue(&item).await.unwrap().item.id;
    let claimed = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    let newer = store.enqueue(&item).await.unwrap();
    assert!(newer.created);
    assert_eq!(store.release(claimed.fence).await.unwrap(), WriteOutcome::Written);
    let released = store.get(running).await.unwrap().unwrap();
    assert_eq!((released.status, released.dedup_key), (Status::Queued, None));
    assert_eq!(store.get(newer.item.id).await.unwrap().unwrap().dedup_key.as_deref(), Some("crawl:c"));

    // Without a newer holder the key is kept.
    let claimed = store.claim(&all_kinds("w1")).await.unwrap().unwrap();
    let failure = Failure { error: "x".into(), retryable: true, retry_delay: Duration::ZERO };
    store.fail(claimed.fence, &failure).await.unwrap();
    let ids: HashSet<_> = [running, newer.item.id].into();
    assert!(ids.contains(&claimed.item.id));
}

#[tokio::test]
async fn delete_finished_removes_only_finished_items_past_retention() {
    let (db, store) = setup().await;
    let done = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let failed = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let queued = enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
    let c1 = store.claim(&all_kinds("w")).await.unwrap().unwrap();
    store.complete(c1.fence, None).await.unwrap();
    let c2 = store.claim(&all_kinds("w")).await.unwrap().unwrap();
    store.fail(c2.fence, &Failure { error: "x".into(), retryable: false, retry_delay: Duration::ZERO }).await.unwrap();
    sql_query("UPDATE work_items SET finished_at = now() - interval '10 days' WHERE finished_at IS NOT NULL")
        .execute(&mut raw(&db).await)
        .await
        .unwrap();
    let now = chrono::Utc::now();
    // Succeeded items are kept 7 days, failed ones 30: only the succeeded one goes.
    let deleted = store.delete_finished(now - chrono::Duration::days(7), now - chrono::Duration::days(30), 100).await;
    assert_eq!(deleted, Ok(1));
    assert!(store.get(done).await.unwrap().is_none());
    assert!(store.get(failed).await.unwrap().is_some());
    assert!(store.get(queued).await.unwrap().is_some());
    let summary = store.queue_summary().await.unwrap();
    let count = |kind: WorkKind, status: Status| {
        summary.iter().find(|r| r.kind == kind && r.status == status).map_or(0, |r| r.count)
    };
    assert_eq!((count(WorkKind::TokenCleanup, Status::Failed), count(WorkKind::TokenCleanup, Status::Queued)), (1, 1));
    assert_eq!(store.list_items(Some(Status::Failed), 10).await.unwrap().len(), 1);
}

/// Eight claimers, each with its own pool, over many configs: no config ever has two items in hand at once,
/// and no item is claimed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_claimers_one_by_one_and_in_batches_never_overlap_a_config_or_claim_twice() {
    let (db, store) = setup().await;
    let mut configs = Vec::new();
    for i in 0..6 {
        configs.push(config(&store, &format!("user{i}"), &format!("/lib/{i}")).await);
    }
    let mut total = 0;
    for round in 0..8 {
        for c in &configs {
            let kind = if round % 2 == 0 { WorkKind::Crawl } else { WorkKind::BurstDetection };
            enqueue(&store, kind, Scope::Config(c.id)).await;
            total += 1;
        }
        enqueue(&store, WorkKind::TokenCleanup, Scope::Unscoped).await;
        total += 1;
    }
    let in_hand: Arc<Mutex<HashSet<almanac_domain::StorageConfigId>>> = Arc::default();
    let claimed: Arc<Mutex<HashMap<WorkItemId, u32>>> = Arc::default();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
        let (in_hand, claimed) = (in_hand.clone(), claimed.clone());
        // Half the claimers claim one at a time; the other half claim three at once and complete them together,
        // claiming the next three in the same transaction (as the executor does).
        let batch = w % 2 == 1;
        tasks.push(tokio::spawn(async move {
            let request = all_kinds(&format!("w{w}"));
            let mut idle = 0;
            let mut hand = Vec::new();
            while idle < 20 {
                if hand.is_empty() {
                    hand = if batch {
                        store.claim_many(&request, 3).await.unwrap()
                    } else {
                        store.claim(&request).await.unwrap().into_iter().collect()
                    };
                }
                if hand.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                idle = 0;
                for item in &hand {
                    *claimed.lock().unwrap().entry(item.item.id).or_default() += 1;
                    if let Some(c) = item.item.scope.storage_config() {
                        assert!(in_hand.lock().unwrap().insert(c), "two items of config {c} in hand at once");
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                for item in &hand {
                    if let Some(c) = item.item.scope.storage_config() {
                        in_hand.lock().unwrap().remove(&c);
                    }
                }
                if batch {
                    let done: Vec<_> = hand.iter().map(|c| (c.fence, None)).collect();
                    let answer = store.complete_many_and_claim(&done, &request, 3).await.unwrap();
                    assert!(answer.written.iter().all(|w| *w == WriteOutcome::Written));
                    hand = answer.next.unwrap();
                } else {
                    assert_eq!(store.complete(hand[0].fence, None).await.unwrap(), WriteOutcome::Written);
                    hand.clear();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let claimed = claimed.lock().unwrap();
    assert_eq!(claimed.len(), total, "every item claimed");
    assert!(claimed.values().all(|&n| n == 1), "no item claimed twice");
}

struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A watch's worker id stored in another form before migration 000033 (the migration, and 000035 after it, run
/// again on such rows) is cut to 200 characters, or named 'unnamed' when blank, so that the watches read back; the
/// work items' checks accept what they accepted before.
#[tokio::test]
async fn watcher_ids_stored_in_another_form_before_the_check_are_mended() {
    const UP: &str = include_str!("../../../migrations/2026-12-06-000033_watch_worker_id_form/up.sql");
    const DOWN: &str = include_str!("../../../migrations/2026-12-06-000033_watch_worker_id_form/down.sql");
    const DOMAINS_UP: &str = include_str!("../../../migrations/2026-12-06-000035_times_and_names_as_domains/up.sql");
    const DOMAINS_DOWN: &str =
        include_str!("../../../migrations/2026-12-06-000035_times_and_names_as_domains/down.sql");
    let (db, store) = setup().await;
    let (blank, long) = (config(&store, "ann", "/photos/ann").await.id, config(&store, "bob", "/photos/bob").await.id);
    let mut conn = raw(&db).await;
    conn.batch_execute(DOMAINS_DOWN).await.unwrap();
    conn.batch_execute(DOWN).await.unwrap();
    let watch = |config, id: &str| {
        format!(
            "INSERT INTO config_watches (storage_config_id, worker_id, since, lease_expires_at, mode)
             VALUES ('{config}', '{id}', now(), now() + interval '1 minute', 'events');"
        )
    };
    conn.batch_execute(&(watch(blank, " \u{a0} ") + &watch(long, &"w".repeat(300)))).await.unwrap();
    assert!(store.watch_states().await.is_err(), "unreadable before the migration");

    conn.batch_execute(UP).await.unwrap();
    conn.batch_execute(DOMAINS_UP).await.unwrap();
    let mut ids: Vec<(StorageConfigId, String)> = store
        .watch_states()
        .await
        .expect("the watches read back")
        .into_iter()
        .filter_map(|s| s.held.map(|h| (s.config, h.worker_id.as_str().to_owned())))
        .collect();
    ids.sort();
    let mut expected = vec![(blank, "unnamed".to_owned()), (long, "w".repeat(200))];
    expected.sort();
    assert_eq!(ids, expected);
}

/// A dedup key or worker id written by another client than ours (the web backend's SQL, an operator's) is held to the
/// form `DedupKey` and `WorkerId` accept, by the schema itself (migrations 000011 and 000033; since 000035 the columns'
/// domain `almanac_name`): every stored item and watch reads back as its types. The two rules agree on each sample,
/// whitespace as Rust knows it included.
#[tokio::test]
async fn keys_and_worker_ids_from_other_clients_keep_the_form_the_domain_reads() {
    let (db, store) = setup().await;
    let watched = config(&store, "ann", "/photos/ann").await.id;
    let mut conn = raw(&db).await;
    let samples = [
        "crawl:c".to_owned(),
        "x".repeat(200),
        "x".repeat(201),
        String::new(),
        "   ".to_owned(),
        "\t\n\u{0b}\u{0c}\r".to_owned(),
        "\u{a0}\u{85}\u{2003}\u{3000}".to_owned(),
        " a ".to_owned(),
        "日本".repeat(100),
    ];
    for sample in &samples {
        let literal = sample.replace('\'', "''");
        let key = conn
            .batch_execute(&format!(
                "INSERT INTO work_items (id, kind, dedup_key) VALUES (gen_random_uuid(), 'token_cleanup', '{literal}')"
            ))
            .await;
        assert_eq!(key.is_ok(), DedupKey::new(sample.as_str()).is_ok(), "dedup key {sample:?}: {key:?}");
        let worker = conn
            .batch_execute(&format!(
                "INSERT INTO work_items (id, kind, status, attempt, worker_id, lease_expires_at)
                 VALUES (gen_random_uuid(), 'token_cleanup', 'running', 1, '{literal}', now() + interval '1 minute')"
            ))
            .await;
        assert_eq!(worker.is_ok(), WorkerId::new(sample.as_str()).is_ok(), "worker id {sample:?}: {worker:?}");
        if let Err(e) = key {
            assert!(e.to_string().contains("almanac_name_well_formed"), "{e}");
        }
        let watcher = conn
            .batch_execute(&format!(
                "INSERT INTO config_watches (storage_config_id, worker_id, since, lease_expires_at, mode)
                 VALUES ('{watched}', '{literal}', now(), now() + interval '1 minute', 'events')
                 ON CONFLICT (storage_config_id) DO UPDATE SET worker_id = excluded.worker_id"
            ))
            .await;
        assert_eq!(watcher.is_ok(), WorkerId::new(sample.as_str()).is_ok(), "watcher id {sample:?}: {watcher:?}");
        store.watch_states().await.expect("the watches read back");
    }
    // Everything that went in reads back.
    let listed = store.list_items(None, 100).await.unwrap();
    assert_eq!(listed.len(), 2 * samples.iter().filter(|s| DedupKey::new(s.as_str()).is_ok()).count());
    assert!(listed.iter().any(|i| i.dedup_key.as_deref() == Some("日本".repeat(100).as_str())));
}
