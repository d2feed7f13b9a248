//! The two watches tests force their interleavings with: how many sessions wait on a lock, and whether a task
//! finishes before any does.

use almanac_testdb::TestDatabase;
use tokio_postgres::{Client, NoTls};

async fn session(db: &TestDatabase) -> Client {
    let (client, connection) = tokio_postgres::connect(db.url(), NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

#[tokio::test]
async fn a_task_that_waits_behind_a_held_lock_is_seen_waiting_and_one_that_does_not_is_seen_finishing() {
    let db = TestDatabase::create().await;
    let holder = session(&db).await;
    holder.batch_execute("CREATE TABLE held (n int)").await.unwrap();
    holder.batch_execute("BEGIN; LOCK TABLE held IN ACCESS EXCLUSIVE MODE").await.unwrap();

    let free = session(&db).await;
    let unhindered = tokio::spawn(async move { free.simple_query("SELECT 1").await.map(|rows| rows.len()) });
    assert!(db.finishes_without_waiting(&unhindered).await, "a query on nothing held was seen waiting");
    assert!(unhindered.await.unwrap().is_ok());

    let blocked = session(&db).await;
    let waiting = tokio::spawn(async move { blocked.simple_query("SELECT count(*) FROM held").await.map(|r| r.len()) });
    assert!(!db.finishes_without_waiting(&waiting).await, "a query on a locked table was seen finishing");
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the query waits on the lock");
    assert!(!waiting.is_finished());
    holder.batch_execute("COMMIT").await.unwrap();
    assert!(waiting.await.unwrap().is_ok(), "the query ran once the lock was let go");
    assert_eq!(db.sessions_waiting_on_locks(0).await, 0);
}
