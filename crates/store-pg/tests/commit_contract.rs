//! Acknowledged means committed (docs/safety.md, invariant 8), and heartbeats are never starved (invariant 7), on real
//! PostgreSQL.
//!
//! To kill a backend between a write's statement and its commit, a deferred constraint trigger (fired at
//! commit) waits for an advisory lock the test holds; the test then terminates the waiting backend.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{
    NewWorkItem, Scope, Status, WorkItemId, WorkKind, WorkQueue,
    ports::{CatalogueStore, ClaimRequest, Failure, Fence, Heartbeat, LeaseDuration, WriteOutcome},
};
use almanac_store_pg::{NewStorageConfig, PgStore, WorkerConnections};
use almanac_testdb::TestDatabase;
use diesel::sql_query;
use diesel::sql_types::{BigInt, Integer, Nullable};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

const COMMIT_LOCK: i64 = 4242;

async fn raw(db: &TestDatabase) -> AsyncPgConnection {
    AsyncPgConnection::establish(db.url()).await.unwrap()
}

fn claimer() -> ClaimRequest {
    support::claimer("w1")
}

/// Makes every later commit that wrote `work_items` wait for the advisory lock `COMMIT_LOCK`, and takes it.
async fn hold_commits(db: &TestDatabase) -> AsyncPgConnection {
    let mut conn = raw(db).await;
    conn.batch_execute(&format!(
        "CREATE FUNCTION wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN PERFORM pg_advisory_lock({COMMIT_LOCK}); PERFORM pg_advisory_unlock({COMMIT_LOCK}); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER wait_at_commit AFTER INSERT OR UPDATE ON work_items
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION wait_at_commit();
         CREATE CONSTRAINT TRIGGER wait_at_commit AFTER INSERT OR UPDATE ON media_assets
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION wait_at_commit();
         SELECT pg_advisory_lock({COMMIT_LOCK});"
    ))
    .await
    .unwrap();
    conn
}

/// Waits until a backend is held at its commit, and kills it. Returns false if none got there (within the
/// tests' patience).
async fn kill_the_committing_backend(observer: &mut AsyncPgConnection) -> bool {
    #[derive(diesel::QueryableByName)]
    struct Pid {
        #[diesel(sql_type = Nullable<Integer>)]
        pid: Option<i32>,
    }
    let deadline = almanac_testdb::Deadline::after(Duration::from_secs(2));
    while !deadline.passed() {
        let waiting: Pid = sql_query(
            "SELECT max(pid) AS pid FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
        )
        .get_result(observer)
        .await
        .unwrap();
        if let Some(pid) = waiting.pid {
            sql_query("SELECT pg_terminate_backend($1)").bind::<Integer, _>(pid).execute(observer).await.unwrap();
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

async fn count(db: &TestDatabase, sql: &str) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    sql_query(sql).get_result::<N>(&mut raw(db).await).await.unwrap().n
}

async fn status(db: &TestDatabase, id: WorkItemId) -> (String, i64) {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        status: String,
        #[diesel(sql_type = BigInt)]
        attempt: i64,
    }
    let row: Row = sql_query(format!("SELECT status, attempt::bigint FROM work_items WHERE id = '{id}'"))
        .get_result(&mut raw(db).await)
        .await
        .unwrap();
    (row.status, row.attempt)
}

#[tokio::test]
async fn an_enqueue_killed_before_its_commit_is_an_error_never_a_silent_loss() {
    let db = TestDatabase::create().await;
    let store = Arc::new(PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap());
    let mut holder = hold_commits(&db).await;
    let writer = store.clone();
    let enqueue = tokio::spawn(async move {
        writer.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()).await
    });
    assert!(kill_the_committing_backend(&mut holder).await, "the enqueue never reached its commit");
    let answer = enqueue.await.unwrap();
    assert!(answer.is_err(), "an enqueue that never committed was acknowledged: {answer:?}");
    assert_eq!(count(&db, "SELECT count(*) AS n FROM work_items").await, 0);
}

#[tokio::test]
async fn a_claim_and_a_complete_killed_before_their_commits_are_errors() {
    let db = TestDatabase::create().await;
    let store = Arc::new(PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap());
    let id = store.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()).await.unwrap().item.id;
    let mut holder = hold_commits(&db).await;
    let writer = store.clone();
    let claim = tokio::spawn(async move { writer.claim(&claimer()).await });
    assert!(kill_the_committing_backend(&mut holder).await, "the claim never reached its commit");
    let answer = claim.await.unwrap();
    assert!(answer.is_err(), "a claim that never committed handed out an item: {answer:?}");
    assert_eq!(status(&db, id).await, ("queued".into(), 0), "still queued, attempt number unused");

    holder.batch_execute(&format!("SELECT pg_advisory_unlock({COMMIT_LOCK})")).await.unwrap();
    let claimed = store.claim(&claimer()).await.unwrap().unwrap();
    assert_eq!(claimed.fence.attempt.get(), 1);
    holder.batch_execute(&format!("SELECT pg_advisory_lock({COMMIT_LOCK})")).await.unwrap();
    let writer = store.clone();
    let fence: Fence = claimed.fence;
    let complete = tokio::spawn(async move { writer.complete(fence, None).await });
    assert!(kill_the_committing_backend(&mut holder).await, "the complete never reached its commit");
    let answer = complete.await.unwrap();
    assert!(answer.is_err(), "a complete that never committed was acknowledged: {answer:?}");
    assert_eq!(status(&db, id).await, ("running".into(), 1));
}

/// A config of ann's with a crawl queued: the config and the item.
async fn a_queued_crawl(store: &PgStore) -> (almanac_domain::StorageConfigId, WorkItemId) {
    let new = NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/photos/ann") };
    let config = store.add_storage_config(&new).await.unwrap().1.id;
    let id = store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap().item.id;
    (config, id)
}

/// Starts a claim of `store`'s that waits on `config`'s head, mid-statement (the claim marks its config's head:
/// the returned connection holds the head's row in an open transaction), and gives it up (its task aborted).
async fn give_up_a_claim_waiting_on_the_head(
    db: &TestDatabase,
    store: &Arc<PgStore>,
    config: almanac_domain::StorageConfigId,
) -> AsyncPgConnection {
    let mut holder = raw(db).await;
    holder
        .batch_execute(&format!("BEGIN; SELECT 1 FROM queue_heads WHERE storage_config_id = '{config}' FOR UPDATE"))
        .await
        .unwrap();
    let claimer_store = store.clone();
    let claim = tokio::spawn(async move { claimer_store.claim_many(&claimer(), 1).await });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the claim never waited on the head's row");
    claim.abort();
    assert!(claim.await.unwrap_err().is_cancelled());
    holder
}

/// Claims `id` (queued, its config's only item), then starts its completion claiming nothing, which waits on the
/// item's row (the returned connection holds it in an open transaction), and gives it up (its task aborted).
/// Answers the claim's fence and that connection.
async fn give_up_a_completion_waiting_on_the_item(
    db: &TestDatabase,
    store: &Arc<PgStore>,
    id: WorkItemId,
) -> (Fence, AsyncPgConnection) {
    let fence = store.claim(&claimer()).await.unwrap().unwrap().fence;
    let mut holder = raw(db).await;
    holder.batch_execute(&format!("BEGIN; SELECT 1 FROM work_items WHERE id = '{id}' FOR UPDATE")).await.unwrap();
    let writer = store.clone();
    let completions =
        tokio::spawn(async move { writer.complete_many_and_claim(&[(fence, None)], &claimer(), 0).await });
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the completions never waited on the item's row");
    completions.abort();
    assert!(completions.await.unwrap_err().is_cancelled());
    (fence, holder)
}

/// A claim its caller gave up on (a timeout, a shutdown) while the claim waited on a lock is handed back as soon
/// as it commits: its item queued again at once, not `running` under a claim nobody knows until its lease runs out
/// (60 s here). The claim is its own implicit transaction, which the server commits once sent whatever the caller
/// does; the store hands back what the claim took, by the token it gave the claim, on the same connection after
/// it (ADR 0008, amendment "a claim given up on is handed back"). Tried with the claim's statement not yet
/// prepared on its connection and already prepared.
#[tokio::test]
async fn a_claim_its_caller_gave_up_on_is_handed_back_at_once() {
    for prepared in [false, true] {
        let db = TestDatabase::create().await;
        // One connection, so a first claim prepares the statement on the connection the second claim uses.
        let store = Arc::new(PgStore::new(db.url(), 1, Duration::from_secs(10)).unwrap());
        if prepared {
            assert!(store.claim_many(&claimer(), 1).await.unwrap().is_empty(), "nothing is queued yet");
        }
        let (config, id) = a_queued_crawl(&store).await;
        let mut holder = give_up_a_claim_waiting_on_the_head(&db, &store, config).await;

        holder.batch_execute("COMMIT").await.unwrap();
        let handed_back = format!(
            "SELECT count(*) AS n FROM work_items
              WHERE id = '{id}' AND status = 'queued' AND claim_token IS NULL AND run_after <= now()"
        );
        let deadline = almanac_testdb::Deadline::after(Duration::from_secs(2));
        while count(&db, &handed_back).await == 0 {
            assert!(
                !deadline.passed(),
                "the abandoned claim's item was not handed back: {:?} (prepared before: {prepared})",
                status(&db, id).await
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(status(&db, id).await, ("queued".into(), 1), "queued again, its attempt number used");
        let claimed = store.claim(&claimer()).await.unwrap().expect("the item is claimable at once");
        assert_eq!(claimed.fence.attempt.get(), 2);
    }
}

/// A process about to stop waits for the hand-back of a claim it gave up on (`PgStore::hand_backs_settled`,
/// which the Worker awaits after its executor stops): the hand-back waits behind its claim, the claim on a lock
/// the test holds, so nothing is settled until the lock is let go; once settled, the item is queued again.
#[tokio::test]
async fn a_stopping_store_waits_for_the_hand_back_of_a_claim_given_up_on() {
    let db = TestDatabase::create().await;
    let store = Arc::new(PgStore::new(db.url(), 1, Duration::from_secs(10)).unwrap());
    let (config, id) = a_queued_crawl(&store).await;
    let mut holder = give_up_a_claim_waiting_on_the_head(&db, &store, config).await;

    let settling_store = store.clone();
    let patience = almanac_testdb::patience(Duration::from_secs(2));
    let settling = tokio::spawn(async move { settling_store.hand_backs_settled(patience).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!settling.is_finished(), "settled while the claim still waited on the head's row");
    holder.batch_execute("COMMIT").await.unwrap();
    assert!(settling.await.unwrap(), "the hand-back ended once the head was let go");
    assert_eq!(status(&db, id).await, ("queued".into(), 1), "handed back by the time it settled");
}

/// Completions that claim nothing are one statement sent alone (ADR 0008, amendment "a completion claiming
/// nothing is one round trip"): once sent they commit whatever their caller does, so a batch given up on (the
/// completer's time limit, a shutdown) while it waited on a lock still records the work as done, instead of
/// leaving the item `running` for lease recovery to run again. A later try of the batch finds it succeeded under
/// its claim. The item's row is held by the test until the completion waits on it; the completion's task is then
/// aborted, and the row let go.
#[tokio::test]
async fn completions_claiming_nothing_given_up_on_still_commit() {
    let db = TestDatabase::create().await;
    let store = Arc::new(PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap());
    let (_, id) = a_queued_crawl(&store).await;
    let (fence, mut holder) = give_up_a_completion_waiting_on_the_item(&db, &store, id).await;
    holder.batch_execute("COMMIT").await.unwrap();
    let succeeded = format!("SELECT count(*) AS n FROM work_items WHERE id = '{id}' AND status = 'succeeded'");
    let deadline = almanac_testdb::Deadline::after(Duration::from_secs(2));
    while count(&db, &succeeded).await == 0 {
        assert!(!deadline.passed(), "the completion given up on did not commit: {:?}", status(&db, id).await);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(store.succeeded_under(fence).await, Ok(true), "a second try finds it done under its claim");
    let again = store.complete_many_and_claim(&[(fence, None)], &claimer(), 0).await.unwrap();
    assert_eq!(again.written, [WriteOutcome::Lost], "written once: the second try changes nothing");
}

/// A claim whose answer fails after the server committed it (a row that fails to decode) is an error, and its
/// items are handed back at once on the same connection: queued again, their attempt number used, not `running`
/// under a claim nobody knows until their lease runs out (60 s here). The row here holds a time chrono cannot read,
/// which the schema refuses since migration 000032: the test drops that rule (the check of the `almanac_time` domain,
/// since migration 000035) to write one.
#[tokio::test]
async fn a_claim_whose_answer_fails_after_its_commit_is_handed_back() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), 1, Duration::from_secs(10)).unwrap();
    let (_, id) = a_queued_crawl(&store).await;
    raw(&db)
        .await
        .batch_execute(&format!(
            "ALTER DOMAIN almanac_time DROP CONSTRAINT almanac_time_readable;
             UPDATE work_items SET requested_at = '-infinity' WHERE id = '{id}';"
        ))
        .await
        .unwrap();

    let claimed = store.claim(&claimer()).await;
    assert!(claimed.is_err(), "a claim whose row cannot be read answered {claimed:?}");
    let handed_back = format!("SELECT count(*) AS n FROM work_items WHERE id = '{id}' AND claim_token IS NULL");
    assert_eq!(count(&db, &handed_back).await, 1, "not handed back: {:?}", status(&db, id).await);
    assert_eq!(status(&db, id).await, ("queued".into(), 1), "queued again, its attempt number used");
}

/// A connection whose statement, sent alone, was given up on before its answer is never pooled again
/// (`tx::Unanswered`): a claim's (its hand-back then runs on it) and a completion's alike. The store has one
/// connection, and the given-up statement still waits on a row the test holds when the store's next statement is
/// sent: on the same connection that statement would queue behind the unanswered one until the row is let go, so
/// it answers only on a connection of its own.
#[tokio::test]
async fn a_connection_whose_statement_was_given_up_on_is_never_pooled_again() {
    for given_up in ["claim", "completion"] {
        let db = TestDatabase::create().await;
        let store = Arc::new(PgStore::new(db.url(), 1, Duration::from_secs(10)).unwrap());
        let (config, id) = a_queued_crawl(&store).await;
        let mut holder = if given_up == "claim" {
            give_up_a_claim_waiting_on_the_head(&db, &store, config).await
        } else {
            give_up_a_completion_waiting_on_the_item(&db, &store, id).await.1
        };

        let next = tokio::time::timeout(almanac_testdb::patience(Duration::from_secs(5)), store.queue_summary()).await;
        assert!(
            matches!(next, Ok(Ok(_))),
            "after a {given_up} given up on, the store's next statement did not answer while the given-up one \
             waited: {next:?}"
        );
        assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the given-up {given_up} still waits on the row");
        holder.batch_execute("COMMIT").await.unwrap();
    }
}

/// The shared pool is saturated (every connection waits on a lock, more callers queue for one): the
/// attempt's heartbeat and outcome still go through on connections nothing else can take.
#[tokio::test]
async fn heartbeats_and_outcomes_go_through_while_the_shared_pool_is_saturated() {
    let db = TestDatabase::create().await;
    let connections = WorkerConnections {
        shared: 2,
        reserved: 2,
        acquire_timeout: Duration::from_secs(2),
        lease: Duration::from_secs(60),
    };
    let store = Arc::new(PgStore::for_worker(db.url(), connections).unwrap());
    let new = NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/photos/ann") };
    let config = store.add_storage_config(&new).await.unwrap().1.id;
    store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap();
    let claimed = store.claim(&claimer()).await.unwrap().unwrap();

    let mut blocker = raw(&db).await;
    blocker.batch_execute("BEGIN; LOCK TABLE storage_configs IN ACCESS EXCLUSIVE MODE").await.unwrap();
    let busy: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.list_storage_configs().await })
        })
        .collect();
    let waiting = db.sessions_waiting_on_locks(2).await;
    assert_eq!(waiting, 2, "both shared connections are taken");
    let shared = store.queue_summary().await;
    assert!(shared.is_err(), "the shared pool is saturated: a statement on it waits past the acquire timeout");

    let lease = LeaseDuration::new(Duration::from_secs(60)).unwrap();
    // A starved one would wait as long as the lock is held: any bound tells it apart, so the tests' patience.
    let bound = almanac_testdb::patience(Duration::from_secs(1));
    let beat = tokio::time::timeout(bound, store.heartbeat(claimed.fence, lease, None)).await;
    assert!(matches!(beat, Ok(Ok(Heartbeat::Renewed { .. }))), "the heartbeat was starved: {beat:?}");
    let done = tokio::time::timeout(bound, store.complete(claimed.fence, None)).await;
    assert!(matches!(done, Ok(Ok(WriteOutcome::Written))), "the outcome was starved: {done:?}");

    blocker.batch_execute("COMMIT").await.unwrap();
    for task in busy {
        let _ = task.await.unwrap();
    }
    assert_eq!(store.get(claimed.item.id).await.unwrap().unwrap().status, Status::Succeeded);
}

/// The attempt's other writes, lease recovery and a fenced catalogue write, each killed at its commit: an error
/// every time, nothing changed.
#[tokio::test]
async fn the_other_queue_writes_and_catalogue_writes_killed_before_their_commits_are_errors() {
    let db = TestDatabase::create().await;
    let store = Arc::new(PgStore::new(db.url(), 4, Duration::from_secs(10)).unwrap());
    let (config, id) = a_queued_crawl(&store).await;
    let fence = store.claim(&claimer()).await.unwrap().unwrap().fence;
    let mut holder = hold_commits(&db).await;
    let lease = LeaseDuration::new(Duration::from_secs(60)).unwrap();
    let before = count(&db, "SELECT count(*) AS n FROM media_assets").await;

    let writer = store.clone();
    let beat = tokio::spawn(async move { writer.heartbeat(fence, lease, Some(&serde_json::json!({"done": 7}))).await });
    assert!(kill_the_committing_backend(&mut holder).await, "the heartbeat never reached its commit");
    assert!(beat.await.unwrap().is_err(), "a heartbeat that never committed was acknowledged");
    let unchanged = format!("SELECT count(*) AS n FROM work_items WHERE id = '{id}' AND progress IS NULL");
    assert_eq!(count(&db, &unchanged).await, 1, "its progress was not stored");

    let writer = store.clone();
    let failure = Failure { error: "x".into(), retryable: true, retry_delay: Duration::from_secs(1) };
    let fail = tokio::spawn(async move { writer.fail(fence, &failure).await });
    assert!(kill_the_committing_backend(&mut holder).await, "the fail never reached its commit");
    assert!(fail.await.unwrap().is_err(), "a fail that never committed was acknowledged");

    let writer = store.clone();
    let release = tokio::spawn(async move { writer.release(fence).await });
    assert!(kill_the_committing_backend(&mut holder).await, "the release never reached its commit");
    assert!(release.await.unwrap().is_err(), "a release that never committed was acknowledged");

    let writer = store.clone();
    let completions =
        tokio::spawn(async move { writer.complete_many_and_claim(&[(fence, None)], &claimer(), 0).await });
    assert!(kill_the_committing_backend(&mut holder).await, "the completions never reached their commit");
    assert!(completions.await.unwrap().is_err(), "completions that never committed were acknowledged");

    // The holder's own commit passes its lock: the lease runs out, for recovery to requeue the item.
    holder
        .batch_execute(&format!(
            "UPDATE work_items SET lease_expires_at = now() - interval '1 minute' WHERE id = '{id}'"
        ))
        .await
        .unwrap();
    let writer = store.clone();
    let recovery = tokio::spawn(async move { writer.recover_expired_leases(3).await });
    assert!(kill_the_committing_backend(&mut holder).await, "the recovery never reached its commit");
    assert!(recovery.await.unwrap().is_err(), "a recovery that never committed was reported");
    assert_eq!(status(&db, id).await, ("running".into(), 1), "still running: none of the five committed");

    let writer = store.clone();
    let asset = fixture_asset(config);
    let ingest = tokio::spawn(async move { writer.ingest(fence, &asset).await });
    assert!(kill_the_committing_backend(&mut holder).await, "the ingest never reached its commit");
    assert!(ingest.await.unwrap().is_err(), "an ingest that never committed was acknowledged");
    assert_eq!(count(&db, "SELECT count(*) AS n FROM media_assets").await, before);
}

fn fixture_asset(config: almanac_domain::StorageConfigId) -> almanac_domain::ports::NewAsset {
    use almanac_domain::{
        AssetMetadata, CaptureSource, CaptureTime, ContentHash, MediaType,
        ports::{FileFacts, NewAsset},
    };
    let at = chrono::Utc::now();
    NewAsset {
        storage_config_id: config,
        facts: FileFacts { file_path: b"a.jpg".to_vec(), display_path: "a.jpg".into(), size: 1, mtime: at },
        content_hash: ContentHash::from_bytes([7; 32]),
        media_type: MediaType::Image,
        capture: CaptureTime { at, offset_minutes: None, source: CaptureSource::FileMtime },
        metadata: AssetMetadata::default(),
        proxies: Vec::new(),
        replaces: None,
        sidecar: None,
    }
}
