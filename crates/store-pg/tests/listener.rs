//! LISTEN/NOTIFY wakes an idle Worker when work is enqueued.

use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{NewWorkItem, Scope, WorkKind, WorkQueue};
use almanac_store_pg::{PgStore, listen_for_work};
use almanac_testdb::TestDatabase;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn enqueue_wakes_a_listening_worker() {
    let db = TestDatabase::create().await;
    let store = PgStore::connect(db.url()).unwrap();
    let wake = Arc::new(Notify::new());
    let stop = CancellationToken::new();
    let listener = tokio::spawn(listen_for_work(db.url().to_owned(), wake.clone(), stop.clone()));
    // The first wake-up comes on connect.
    tokio::time::timeout(almanac_testdb::patience(Duration::from_secs(10)), wake.notified()).await.expect("connected");
    // Nothing else wakes it…
    assert!(tokio::time::timeout(Duration::from_millis(300), wake.notified()).await.is_err());
    // …until work is enqueued.
    store.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()).await.unwrap();
    tokio::time::timeout(almanac_testdb::patience(Duration::from_secs(10)), wake.notified())
        .await
        .expect("woken by the enqueue");
    stop.cancel();
    listener.await.unwrap();
}

/// A URL with `connect_timeout` needs timers wherever it is used, migrations included.
#[tokio::test]
async fn migrations_work_with_a_connect_timeout_in_the_url() {
    let db = TestDatabase::create().await;
    let url = format!("{}&connect_timeout=5", db.url());
    assert_eq!(almanac_store_pg::pending_migrations(&url).await, Ok(vec![]));
}
