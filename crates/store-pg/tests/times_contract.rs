//! Every time the database holds is one the store can read (migration 000032, ADR 0011 amendments "times every reader
//! can read" and "the forms as domains": since migration 000035 every time column is of the domain `almanac_time`,
//! whose check is that rule). PostgreSQL stores `infinity`, `-infinity` and years up to 294276; the store reads
//! chrono's `DateTime<Utc>`, which ends with the year 262142, and a time outside that fails the read of its whole row:
//! a claim of such an item, committed by the server, failed in its answer, and the queue could not be listed. These
//! tests hold every time column of the schema to the rule, try its edges against the store's own reads, and run the
//! migrations on times another client stored before them.

mod support;

use support::text_pairs;

use almanac_domain::{NewWorkItem, Scope, WorkKind, WorkQueue};
use almanac_store_pg::PgStore;
use almanac_testdb::TestDatabase;
use chrono::{DateTime, NaiveDate, Utc};
use diesel::result::{DatabaseErrorKind, Error};
use diesel::sql_query;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

const UP: &str = include_str!("../../../migrations/2026-12-06-000032_times_readable/up.sql");
const DOWN: &str = include_str!("../../../migrations/2026-12-06-000032_times_readable/down.sql");
const DOMAINS_UP: &str = include_str!("../../../migrations/2026-12-06-000035_times_and_names_as_domains/up.sql");
const DOMAINS_DOWN: &str = include_str!("../../../migrations/2026-12-06-000035_times_and_names_as_domains/down.sql");

/// The last time chrono reads, as PostgreSQL keeps it (to the microsecond), and the first PostgreSQL stores.
const LAST: &str = "262142-12-31 23:59:59.999999+00";
const FIRST: &str = "4714-11-24 00:00:00+00 BC";

/// A day's first instant (`micros` 0) or its last second at `micros` (UTC).
fn at(y: i32, m: u32, d: u32, micros: u32) -> DateTime<Utc> {
    let (h, min, s) = if micros > 0 { (23, 59, 59) } else { (0, 0, 0) };
    NaiveDate::from_ymd_opt(y, m, d).unwrap().and_hms_micro_opt(h, min, s, micros).unwrap().and_utc()
}

async fn setup() -> (TestDatabase, PgStore, almanac_domain::StorageConfigId, AsyncPgConnection) {
    let (db, store) = support::setup().await;
    let config = support::config(&store, "ann", "/photos/ann").await.id;
    let conn = AsyncPgConnection::establish(db.url()).await.expect("connect");
    (db, store, config, conn)
}

/// Every time column of every table is of the domain `almanac_time`, whose one check is `almanac_time_readable`
/// (migration 000035): a table or column added later as a plain `timestamptz`, or a domain without the rule, fails
/// here. So does a table check on times again (the cost the domain removed; ADR 0011, "the forms as domains").
#[tokio::test]
async fn every_time_column_of_the_schema_is_checked_to_be_readable() {
    let (_db, _store, _config, mut conn) = setup().await;
    let columns = support::columns_of_base_types(&mut conn, &["timestamptz"]).await;
    assert!(columns.iter().any(|(c, _)| c == "work_items.run_after"), "columns read: {columns:?}");
    assert!(columns.iter().any(|(c, _)| c == "queue_heads.oldest_requested_at"), "columns read: {columns:?}");
    let plain: Vec<_> = columns.iter().filter(|(_, ty)| ty != "almanac_time").collect();
    assert!(plain.is_empty(), "time columns not of the domain almanac_time: {plain:?}");
    let rule = support::domain_checks(&mut conn, "almanac_time").await;
    assert_eq!(
        rule,
        [("almanac_time_readable".to_owned(), "CHECK (almanac_time_readable(VALUE))".to_owned())],
        "the domain's checks"
    );
    let table_checks = text_pairs(
        &mut conn,
        "SELECT conrelid::regclass::text AS a, conname::text AS b FROM pg_constraint
          WHERE contype = 'c' AND conrelid <> 0 AND pg_get_constraintdef(oid) LIKE '%almanac_time_readable%'",
    )
    .await;
    assert!(table_checks.is_empty(), "tables checking times again: {table_checks:?}");
}

/// A time no reader can read is refused, by whichever client writes it (here by hand, as an operator parking an
/// item at `infinity` would), naming the check; the first and last times that can be read are taken, and the
/// store reads them back.
#[tokio::test]
async fn a_time_no_reader_can_read_is_refused_and_the_edges_read_back() {
    let (_db, store, config, mut conn) = setup().await;
    let id = store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap().item.id;
    let set = |column: &str, time: &str| format!("UPDATE work_items SET {column} = '{time}' WHERE id = '{id}'");
    for column in ["run_after", "requested_at", "cancel_requested_at"] {
        for time in ["infinity", "-infinity", "262143-01-01 00:00:00+00"] {
            match sql_query(set(column, time)).execute(&mut conn).await {
                Err(Error::DatabaseError(DatabaseErrorKind::CheckViolation, info)) => {
                    assert_eq!(info.constraint_name(), Some("almanac_time_readable"), "{column} = {time}");
                    assert!(info.message().contains("almanac_time"), "{column} = {time}: {}", info.message())
                }
                other => panic!("{column} = {time} was not refused by the check: {other:?}"),
            }
        }
    }
    let paused = format!("UPDATE storage_configs SET paused_at = 'infinity' WHERE id = '{config}'");
    assert!(
        matches!(
            sql_query(paused).execute(&mut conn).await,
            Err(Error::DatabaseError(DatabaseErrorKind::CheckViolation, _))
        ),
        "a config's time is checked too"
    );

    for (column, time) in [("run_after", LAST), ("requested_at", FIRST)] {
        sql_query(set(column, time)).execute(&mut conn).await.unwrap();
    }
    let items = store.list_items(None, 10).await.expect("the store reads the edges back");
    let item = items.iter().find(|i| i.id == id).expect("listed");
    assert_eq!(item.run_after, at(262_142, 12, 31, 999_999), "the last time chrono reads");
    assert_eq!(item.requested_at, at(-4713, 11, 24, 0), "the first time PostgreSQL stores (4714 BC)");
}

/// Times stored before the check (migration 000032, with 000035 after it, run on a database whose rows hold them, as
/// another client wrote them) are moved to the nearest time that can be read: an item parked at `infinity` stays
/// parked, one put first at `-infinity` stays first; nothing is dropped. The claim then takes the one first in line,
/// and reads it.
#[tokio::test]
async fn times_stored_before_the_check_are_moved_to_the_nearest_readable_time() {
    let (_db, store, config, mut conn) = setup().await;
    let other = support::config(&store, "bob", "/photos/bob").await.id;
    let parked =
        store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap().item.id;
    let first = store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(other)).unwrap()).await.unwrap().item.id;
    conn.batch_execute(DOMAINS_DOWN).await.unwrap();
    conn.batch_execute(DOWN).await.unwrap();
    conn.batch_execute(&format!(
        "UPDATE work_items SET run_after = 'infinity' WHERE id = '{parked}';
         UPDATE work_items SET requested_at = '-infinity' WHERE id = '{first}';
         UPDATE storage_configs SET paused_at = '290000-01-01 00:00:00+00' WHERE id = '{other}';"
    ))
    .await
    .unwrap();
    assert!(store.list_items(None, 10).await.is_err(), "unreadable before the migration");

    conn.batch_execute(UP).await.unwrap();
    conn.batch_execute(DOMAINS_UP).await.unwrap();
    let items = store.list_items(None, 10).await.expect("readable after the migration");
    assert_eq!(items.len(), 2, "nothing dropped");
    let item = |id| items.iter().find(|i| i.id == id).expect("listed");
    assert_eq!(item(parked).run_after, at(262_142, 12, 31, 999_999), "parked at the last readable time");
    assert_eq!(item(first).requested_at, at(-4713, 11, 24, 0), "first in line at the first time stored");
    let paused = text_pairs(
        &mut conn,
        &format!(
            "SELECT (paused_at = timestamptz '{LAST}')::text AS a, '' AS b FROM storage_configs WHERE id = '{other}'"
        ),
    )
    .await;
    assert_eq!(paused[0].0, "true", "the config stays paused, at the last readable time");

    store.set_config_paused(other, false).await.unwrap();
    let claimed = store.claim(&support::claimer("w1")).await.expect("the claim reads its item").expect("one claimed");
    assert_eq!(claimed.item.id, first, "the item first in line is claimed, the parked one stays parked");
    assert!(store.claim(&support::claimer("w1")).await.unwrap().is_none(), "the parked item is not due");
}

/// Migration 000035 changes the columns' types without losing what is built on them: a trigger it must make again
/// (its condition reads a changed column) comes back disabled if it was, and with its comment; a table another
/// program added after 000032 (no check of ours) keeps its plain `timestamptz`; and `down.sql` then `up.sql` leave
/// the schema's columns as they were.
#[tokio::test]
async fn the_domains_migration_keeps_triggers_as_they_were_and_leaves_other_tables_alone() {
    let (_db, _store, _config, mut conn) = setup().await;
    conn.batch_execute(DOMAINS_DOWN).await.unwrap();
    conn.batch_execute(
        "CREATE TABLE web_sessions (id integer, seen timestamptz DEFAULT now());
         ALTER TABLE storage_configs DISABLE TRIGGER tr_storage_configs_queue_heads;
         COMMENT ON TRIGGER tr_config_watches_taken_without_holder ON config_watches IS 'kept';",
    )
    .await
    .unwrap();
    conn.batch_execute(DOMAINS_UP).await.unwrap();

    let triggers = text_pairs(
        &mut conn,
        "SELECT tgname::text AS a, tgenabled::text || ' ' || coalesce(obj_description(oid, 'pg_trigger'), '') AS b
           FROM pg_trigger
          WHERE tgname IN ('tr_storage_configs_queue_heads', 'tr_config_watches_taken_without_holder')
          ORDER BY 1",
    )
    .await;
    let expected = [("tr_config_watches_taken_without_holder", "O kept"), ("tr_storage_configs_queue_heads", "D ")];
    assert_eq!(triggers, expected.map(|(a, b)| (a.to_owned(), b.to_owned())), "the triggers made again");
    let other = text_pairs(
        &mut conn,
        "SELECT attname::text AS a, format_type(atttypid, NULL) AS b FROM pg_attribute
          WHERE attrelid = 'web_sessions'::regclass AND attname = 'seen'",
    )
    .await;
    assert_eq!(other[0].1, "timestamp with time zone", "another program's table is left alone");
    let times = text_pairs(
        &mut conn,
        "SELECT count(*)::text AS a, '' AS b FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
          WHERE c.relname = 'work_items' AND a.atttypid IN ('almanac_time'::regtype, 'almanac_name'::regtype)",
    )
    .await;
    assert_eq!(times[0].0, "9", "work_items' seven times and two names are of the domains again");
}
