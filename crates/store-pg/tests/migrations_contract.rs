//! Safe upgrades: migrations applied once however many Workers start with `--migrate` at once, a schema newer
//! than this build recognised, and a database whose text is not UTF-8 refused before anything is written in it.

mod support;

use almanac_store_pg::{StoreError, migrate, schema_state};
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

/// A Worker reading the schema's state while `migrate` runs on a fresh database waits for it and reads what it
/// applied. `migrate` creates diesel's table of applied migrations in its transaction, uncommitted until the
/// end; a reader creating the same table meanwhile would fail with a unique violation once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_read_while_a_migration_runs_waits_for_it_instead_of_failing() {
    let db = emptied().await;
    // What `migrate` holds while it runs: its lock (the key spells "almanac") and an uncommitted table.
    let mut migrating = AsyncPgConnection::establish(db.url()).await.unwrap();
    migrating
        .batch_execute(
            "BEGIN; SELECT pg_advisory_xact_lock(27422289782792547);
             CREATE TABLE __diesel_schema_migrations (version VARCHAR(50) PRIMARY KEY NOT NULL,
                                                      run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP);
             INSERT INTO __diesel_schema_migrations (version) VALUES ('20261129000001');",
        )
        .await
        .unwrap();
    let url = db.url().to_owned();
    let reading = tokio::spawn(async move { schema_state(&url).await });
    // The reader is waiting (on the lock, or on the table) before the migration commits.
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut watcher = AsyncPgConnection::establish(db.url()).await.unwrap();
    let deadline = almanac_testdb::Deadline::after(std::time::Duration::from_secs(10));
    loop {
        let waiting: Vec<N> = diesel_async::RunQueryDsl::load(
            diesel::sql_query(
                "SELECT count(*) AS n FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'",
            ),
            &mut watcher,
        )
        .await
        .unwrap();
        if waiting[0].n > 0 {
            break;
        }
        deadline.check("the schema read waiting on the migration");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    migrating.batch_execute("COMMIT").await.unwrap();
    let state = reading.await.unwrap().expect("the read waits for the migration, then reads its result");
    assert!(!state.pending.contains(&"20261129000001".to_owned()), "{state:?}");
    assert!(!state.pending.is_empty(), "{state:?}");
}

/// A server that only reads (a standby, before and during a failover; here a database whose transactions are
/// read-only) refuses the migration's first write, on a session that still answers: an outage to wait for, not
/// a failed migration.
#[tokio::test]
async fn a_migration_refused_by_a_server_that_only_reads_is_an_outage() {
    let db = emptied().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(&format!("ALTER DATABASE {} SET default_transaction_read_only = on", db.name())).await.unwrap();
    match migrate(db.url()).await {
        Err(almanac_store_pg::StoreError::Unavailable(m)) => assert!(!m.is_empty()),
        other => panic!("{other:?}"),
    }
}

/// Encodings a database gets when it is made elsewhere than on the tests' cluster: under a European locale
/// (LATIN1), by PostgreSQL's Windows installer (WIN1252), under the C locale (SQL_ASCII), or under an East Asian
/// locale (EUC_JP, several bytes a character but not UTF-8).
const OTHER_ENCODINGS: [&str; 4] = ["LATIN1", "WIN1252", "SQL_ASCII", "EUC_JP"];

#[tokio::test]
async fn a_database_not_in_utf8_is_refused_with_the_way_out_before_anything_is_written_in_it() {
    for encoding in OTHER_ENCODINGS {
        let db = TestDatabase::create_empty_in(encoding).await;
        let read = schema_state(db.url()).await.map(|_| ());
        let migrated = migrate(db.url()).await.map(|_| ());
        for (what, answer) in [("reading the schema", read), ("migrating", migrated)] {
            let Err(StoreError::Config(said)) = answer else { panic!("{encoding}, {what}: {answer:?}") };
            assert!(said.contains(&format!("the database \"{}\" stores text in {encoding}", db.name())), "{said}");
            assert!(said.contains("createdb --encoding=UTF8") && said.contains("pg_dump --encoding=UTF8"), "{said}");
            assert!(said.contains("ON_ERROR_STOP=1 --single-transaction"), "restored only whole: {said}");
        }
        let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
        let made = support::text_pairs(
            &mut conn,
            "SELECT count(*)::text AS a, '' AS b FROM pg_class AS c JOIN pg_namespace AS s ON s.oid = c.relnamespace
              WHERE s.nspname = 'public'",
        )
        .await;
        assert_eq!(made[0].0, "0", "{encoding}: nothing is made in a database that is refused");
    }
}

#[tokio::test]
async fn what_a_latin1_database_cannot_hold_is_a_name_a_library_may_have() {
    // Why the refusal: the Worker writes what a library names, and LATIN1 has no room for it.
    let db = TestDatabase::create_empty_in("LATIN1").await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute("CREATE TABLE names (name text)").await.unwrap();
    conn.batch_execute("INSERT INTO names VALUES ('M\u{fc}nchen.jpg')").await.expect("a name LATIN1 has room for");
    for name in ["\u{1f4f7} beach.jpg", "\u{5bcc}\u{58eb}\u{5c71}.heic"] {
        let stored = conn.batch_execute(&format!("INSERT INTO names VALUES ('{name}')")).await;
        assert!(stored.is_err(), "{name} was stored in LATIN1");
    }
}
