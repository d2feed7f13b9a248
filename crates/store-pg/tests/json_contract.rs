//! Every JSON value the database holds is one the store can read (migration 000036, ADR 0011 amendment "JSON every
//! reader can read"). jsonb holds numbers of any size and nests as deep as a client likes; serde_json, which the
//! store reads a work item's `payload`, `progress` and `result` with, refuses a number past `f64` and a value nested
//! 128 deep, and such a value failed the read of its whole row: a claim of the item failed in its answer and was
//! taken again, and the queue could not be listed. These tests hold every jsonb column to the rule, check that the
//! rule refuses only what serde_json cannot read at its edges, and run the migration on values stored before it.

mod support;

use support::text_pairs;

use almanac_domain::{NewWorkItem, Scope, WorkKind, WorkQueue};
use diesel::result::{DatabaseErrorKind, Error};
use diesel::sql_query;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

const UP: &str = include_str!("../../../migrations/2026-12-06-000036_json_readable/up.sql");
const DOWN: &str = include_str!("../../../migrations/2026-12-06-000036_json_readable/down.sql");

/// The start of a sample, for messages.
fn short(value: &str) -> String {
    value.chars().take(40).collect()
}

/// `n` arrays nested in one another.
fn nested(n: usize) -> String {
    "[".repeat(n) + &"]".repeat(n)
}

/// Every jsonb column of every table is of the domain `almanac_json`, whose one check is `almanac_json_readable`: a
/// column added later as plain `jsonb`, or the domain without the rule, fails here.
#[tokio::test]
async fn every_json_column_of_the_schema_is_held_to_readable_json() {
    let (db, _store) = support::setup().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.expect("connect");
    let columns = support::columns_of_base_types(&mut conn, &["jsonb", "json"]).await;
    let names: Vec<&str> = columns.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(names, ["work_items.payload", "work_items.progress", "work_items.result"], "JSON columns read");
    let plain: Vec<_> = columns.iter().filter(|(_, ty)| ty != "almanac_json").collect();
    assert!(plain.is_empty(), "JSON columns not of the domain almanac_json: {plain:?}");
    let rule = support::domain_checks(&mut conn, "almanac_json").await;
    assert_eq!(rule, [("almanac_json_readable".to_owned(), "CHECK (almanac_json_readable(VALUE))".to_owned())]);
}

/// JSON that serde_json cannot read, as PostgreSQL prints it (numbers without an exponent), is refused in each
/// column, by whichever client writes it (here by hand), naming the rule; the edges it reads are taken, and the
/// store reads every item back.
#[tokio::test]
async fn json_no_reader_can_read_is_refused_and_the_edges_read_back() {
    let (db, store) = support::setup().await;
    let config = support::config(&store, "ann", "/photos/ann").await.id;
    let mut conn = AsyncPgConnection::establish(db.url()).await.expect("connect");
    let unreadable = [
        "1e309".to_owned(),
        "-1e400".to_owned(),
        "1.7976931348623157e308".to_owned(),
        r#"{"size": [1, 2, 1e400]}"#.to_owned(),
        nested(128),
        format!(r#"{{"a": {}}}"#, nested(127)),
        nested(12_000),
    ];
    let readable = [
        "1e308".to_owned(),
        "-1e308".to_owned(),
        "1e-400".to_owned(),
        "123456789012345678901234567890".to_owned(),
        nested(127),
        format!(r#"{{"a": {}}}"#, nested(126)),
        r#""1e400""#.to_owned(),
    ];
    let printed = |value: &str| format!("SELECT '{value}'::jsonb::text AS a, '' AS b");
    for value in &unreadable {
        let as_printed = text_pairs(&mut conn, &printed(value)).await.remove(0).0;
        assert!(serde_json::from_str::<serde_json::Value>(&as_printed).is_err(), "serde_json reads {}", short(value));
        for column in ["payload", "progress", "result"] {
            let other = if column == "payload" { "" } else { ", payload" };
            let first = if column == "payload" { "" } else { ", '{}'" };
            let sql = format!(
                "INSERT INTO work_items (id, kind, storage_config_id, {column}{other})
                 VALUES (gen_random_uuid(), 'crawl', '{config}', '{value}'{first})"
            );
            match sql_query(&sql).execute(&mut conn).await {
                Err(Error::DatabaseError(DatabaseErrorKind::CheckViolation, info)) => {
                    assert_eq!(info.constraint_name(), Some("almanac_json_readable"), "{column} = {}", short(value))
                }
                other => panic!("{column} = {} was not refused: {other:?}", short(value)),
            }
        }
    }
    let id = store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap().item.id;
    for value in &readable {
        let as_printed = text_pairs(&mut conn, &printed(value)).await.remove(0).0;
        assert!(serde_json::from_str::<serde_json::Value>(&as_printed).is_ok(), "serde_json refuses {}", short(value));
        let sql = format!(
            "INSERT INTO work_items (id, kind, payload, progress, result)
             VALUES (gen_random_uuid(), 'token_cleanup', '{value}', '{value}', '{value}')"
        );
        sql_query(&sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{} refused: {e}", short(value)));
    }
    sql_query(format!("UPDATE work_items SET progress = '{}' WHERE id = '{id}'", nested(127)))
        .execute(&mut conn)
        .await
        .expect("an update within the rule");
    let items = store.list_items(None, 100).await.expect("the store reads every item back");
    assert_eq!(items.len(), readable.len() + 1);
}

/// JSON stored before the rule (migration 000036 run on a database whose rows hold it, as another client wrote it)
/// is kept as text in `{"unreadable": …}`: nothing is lost, the queue is listed again, and the claim takes the item
/// instead of failing on it.
#[tokio::test]
async fn json_stored_before_the_rule_is_kept_as_text_and_the_queue_reads_again() {
    let (db, store) = support::setup().await;
    let config = support::config(&store, "ann", "/photos/ann").await.id;
    let id = store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap().item.id;
    let mut conn = AsyncPgConnection::establish(db.url()).await.expect("connect");
    conn.batch_execute(DOWN).await.unwrap();
    conn.batch_execute(&format!(
        "UPDATE work_items SET payload = '{{\"root\": 1e400}}', result = '{}' WHERE id = '{id}'",
        nested(12_000)
    ))
    .await
    .unwrap();
    assert!(store.list_items(None, 10).await.is_err(), "unreadable before the migration");

    conn.batch_execute(UP).await.unwrap();
    let items = store.list_items(None, 10).await.expect("readable after the migration");
    let item = items.iter().find(|i| i.id == id).expect("listed");
    let kept = item.payload["unreadable"].as_str().expect("the payload kept as text");
    assert!(kept.starts_with(r#"{"root": 1"#) && kept.len() > 400, "the number kept whole: {kept}");
    assert_eq!(item.result.as_ref().and_then(|r| r["unreadable"].as_str()), Some(nested(12_000).as_str()));
    let claimed = store.claim(&support::claimer("w1")).await.expect("the claim reads its item").expect("claimed");
    assert_eq!(claimed.item.id, id);
}
