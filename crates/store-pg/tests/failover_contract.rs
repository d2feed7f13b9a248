//! Fences across a failover that lost commits: a primary and an asynchronous standby of the test's own
//! (`almanac_testdb::StandbyPair`), the primary killed (`-m immediate`) after a claim the standby never got, the
//! standby promoted. The fence names its claim by a token, so the claim the database no longer has holds
//! nothing after the switch, although the item's next claim gets its attempt number again (ADR 0008, amendment
//! "a fence names its claim"; docs/safety.md, invariant 1).

mod support;

use std::path::PathBuf;
use std::time::Duration;

use almanac_domain::ports::{
    CatalogueError, CatalogueStore, ClaimRequest, ClaimedItem, FailOutcome, Failure, Heartbeat, LeaseDuration,
    WriteOutcome,
};
use almanac_domain::{NewWorkItem, Scope, Status, StorageConfigId, WorkKind, WorkQueue};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::{Replication, StandbyPair};

fn lease() -> LeaseDuration {
    LeaseDuration::new(Duration::from_secs(60)).unwrap()
}

fn request(worker: &str) -> ClaimRequest {
    support::claimer(worker)
}

/// The config's root identity as the catalogue holds it (what `record_root_identity` writes).
async fn root_identity(store: &PgStore, config: StorageConfigId) -> Option<bool> {
    let configs = store.list_storage_configs().await.unwrap();
    configs.into_iter().find(|c| c.id == config).expect("the config").root_is_mount_point
}

/// Every write the lost claim's attempt could make, each of which must find its fence stale and write nothing.
async fn every_write_of_the_lost_claim_is_lost(store: &PgStore, lost: &ClaimedItem, config: StorageConfigId) {
    let fence = lost.fence;
    let progress = serde_json::json!({"done": 7});
    let beat = store.heartbeat(fence, lease(), Some(&progress)).await;
    assert_eq!(beat, Ok(Heartbeat::Lost), "worker A's lost claim renewed worker B's attempt");
    let write = store.record_root_identity(fence, config, true, &[]).await;
    assert!(matches!(write, Err(CatalogueError::Lost)), "worker A's catalogue write passed the fence: {write:?}");
    let batch = store.complete_many_and_claim(&[(fence, None)], &request("worker-a"), 0).await.unwrap();
    assert_eq!(batch.written, [WriteOutcome::Lost], "worker A's batched completion completed worker B's attempt");
    assert_eq!(store.complete(fence, None).await, Ok(WriteOutcome::Lost), "worker A's completion");
    let failure = Failure { error: "A's handler failed".into(), retryable: true, retry_delay: Duration::ZERO };
    assert_eq!(store.fail(fence, &failure).await, Ok(FailOutcome::Lost), "worker A's failure");
    assert_eq!(store.mark_cancelled(fence).await, Ok(WriteOutcome::Lost), "worker A's cancellation");
    assert_eq!(store.release(fence).await, Ok(WriteOutcome::Lost), "worker A's release");
    assert_eq!(store.succeeded_under(fence).await, Ok(false));
}

/// With asynchronous replication a failover can lose the last commits, a claim among them: the item is queued
/// again on the promoted standby, and its next claim gets the same attempt number. Had a fence been the item
/// and that number alone, the lost claim's heartbeat would renew the new attempt's lease, its completion would
/// complete it, and its catalogue writes would pass the fence: two attempts of one config at once. What holds:
/// a claim the database no longer has holds nothing after the switch, and the claim it has holds everything.
#[tokio::test]
async fn a_claim_lost_in_a_failover_holds_nothing_after_it() {
    let dir = std::env::temp_dir().join(format!("almanac-lost-claim-{}", std::process::id()));
    let pair = StandbyPair::create_with(dir, Replication::Asynchronous).expect("a primary and an asynchronous standby");
    // The pair is the test's own: its `postgres` database is the Worker's.
    let url = pair.url("postgres");
    almanac_store_pg::migrate(&url).await.expect("migrate");
    let store = || PgStore::new(&url, 2, Duration::from_secs(10)).unwrap();
    let before = store();
    let new = NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/photos/ann") };
    let config = before.add_storage_config(&new).await.unwrap().1.id;
    let crawl = before.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap();
    pair.wait_until_caught_up().unwrap();
    // The claim commits on the primary only: the standby no longer receives WAL.
    pair.stop_replicating().unwrap();
    let lost = before.claim(&request("worker-a")).await.unwrap().expect("worker A claims the crawl");
    drop(before);
    pair.kill_primary().unwrap();
    pair.promote().unwrap();

    // Both Workers reach the promoted standby; B claims the crawl again, under A's attempt number.
    let (a, b) = (store(), store());
    let again = b.claim(&request("worker-b")).await.unwrap().expect("worker B claims the crawl again");
    assert_eq!((again.item.id, again.fence.attempt), (crawl.item.id, lost.fence.attempt));
    assert_ne!(again.fence, lost.fence, "each claim names itself");

    every_write_of_the_lost_claim_is_lost(&a, &lost, config).await;
    let item = b.get(crawl.item.id).await.unwrap().unwrap();
    assert_eq!(
        (item.status, item.worker_id.as_ref().map(|w| w.as_str()), item.progress, item.failures),
        (Status::Running, Some("worker-b"), None, 0),
        "worker A's writes left worker B's attempt as its claim made it"
    );
    assert_eq!(root_identity(&b, config).await, None, "worker A's catalogue write committed nothing");

    // B's claim holds its item: its writes go through.
    assert_eq!(b.heartbeat(again.fence, lease(), None).await, Ok(Heartbeat::Renewed { cancel_requested: false }));
    b.record_root_identity(again.fence, config, false, &[]).await.unwrap();
    assert_eq!(root_identity(&b, config).await, Some(false));
    let batch = b.complete_many_and_claim(&[(again.fence, None)], &request("worker-b"), 0).await.unwrap();
    assert_eq!(batch.written, [WriteOutcome::Written]);
    assert_eq!(b.succeeded_under(again.fence).await, Ok(true));
    assert_eq!(a.succeeded_under(lost.fence).await, Ok(false), "the item succeeded under B's claim, not A's");
}
