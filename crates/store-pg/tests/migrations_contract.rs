//! Safe upgrades: migrations applied once however many Workers start with `--migrate` at once, and a schema
//! newer than this build recognised.

use almanac_store_pg::{migrate, schema_state};
use almanac_testdb::TestDatabase;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};

async fn emptied() -> TestDatabase {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;").await.unwrap();
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_migrate_runs_at_once_apply_each_migration_once() {
    let db = emptied().await;
    let before = schema_state(db.url()).await.unwrap();
    assert!(before.pending.len() >= 7, "{before:?}");
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let url = db.url().to_owned();
            tokio::spawn(async move { migrate(&url).await })
        })
        .collect();
    let mut applied = Vec::new();
    for run in runs {
        applied.push(run.await.unwrap().expect("every run succeeds (the others wait, then find nothing to do)"));
    }
    let all: Vec<String> = applied.iter().flatten().cloned().collect();
    assert_eq!(all.len(), before.pending.len(), "each migration applied once in all: {applied:?}");
    assert_eq!(applied.iter().filter(|a| !a.is_empty()).count(), 1, "one run applied them: {applied:?}");
    let after = schema_state(db.url()).await.unwrap();
    assert!(after.pending.is_empty() && after.unknown.is_empty(), "{after:?}");
}

#[tokio::test]
async fn a_migration_this_build_does_not_know_is_reported_as_newer() {
    let db = TestDatabase::create().await;
    let state = schema_state(db.url()).await.unwrap();
    assert!(state.unknown.is_empty() && state.pending.is_empty(), "{state:?}");
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute("INSERT INTO __diesel_schema_migrations (version) VALUES ('20991231000001')").await.unwrap();
    let state = schema_state(db.url()).await.unwrap();
    assert_eq!(state.unknown, ["20991231000001"]);
    assert!(state.newest_known.starts_with("2026"), "{state:?}");
    assert!(state.newest_known < state.unknown[0]);
}
