//! How the web backend uses the queue: one pool shared with the store, enqueue a crawl with a dedup key (alone,
//! or inside the backend's own transaction), enqueue many items at once, request a cancel, read the status.
//!
//! `cargo run -p almanac-store-pg --example backend` (uses `DATABASE_URL`, or starts the private cluster's dev
//! database).

use std::path::PathBuf;

use almanac_domain::{DedupKey, NewWorkItem, Scope, WorkQueue};
use almanac_store_pg::{NewStorageConfig, PgStore, migrate};
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::{AsyncConnection, AsyncPgConnection};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => {
            let cluster = almanac_testdb::Cluster::private()?;
            cluster.ensure_running()?;
            cluster.ensure_database("almanac").await?;
            cluster.url("almanac")
        }
    };
    migrate(&url).await?;
    // The backend's own pool, shared with the store (its queue and catalogue statements use these connections).
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(url.as_str());
    let pool = Pool::builder(manager).max_size(8).build()?;
    let store = PgStore::from_pool(pool.clone());

    // A storage config to crawl (the backend would already have one).
    let root = PathBuf::from(format!("/srv/photos/example-{}", std::process::id()));
    let (_, config) =
        store.add_storage_config(&NewStorageConfig { username: "example".into(), root_path: root }).await?;

    // Enqueue a crawl; the dedup key makes a second click return the same queued item.
    let crawl = NewWorkItem::new(almanac_domain::WorkKind::Crawl, Scope::Config(config.id))?
        .with_dedup_key(DedupKey::for_work(almanac_domain::WorkKind::Crawl, Scope::Config(config.id)));
    let first = store.enqueue(&crawl).await?;
    let again = store.enqueue(&crawl).await?;
    println!(
        "enqueued crawl {} (created: {}); again: {} (created: {})",
        first.item.id, first.created, again.item.id, again.created
    );
    assert_eq!(first.item.id, again.item.id);

    // Many at once (e.g. burst detection for every config after an import): one statement, dedup keys
    // honoured item by item; the crawl asked for again returns the queued one.
    let bursts = NewWorkItem::new(almanac_domain::WorkKind::BurstDetection, Scope::Config(config.id))?
        .with_dedup_key(DedupKey::for_work(almanac_domain::WorkKind::BurstDetection, Scope::Config(config.id)));
    let batch = store.enqueue_many(&[crawl.clone(), bursts]).await?;
    for enqueued in &batch {
        println!("batch: {} {} (created: {})", enqueued.item.kind, enqueued.item.id, enqueued.created);
    }
    assert_eq!(batch[0].item.id, first.item.id);

    // Work with arguments: typed, so that the backend and the Worker agree on every name (`CrawlArgs` for a
    // crawl that an operator confirmed; `ProxyDeletionArgs` to have proxies made again).
    let redo = almanac_domain::ProxyDeletionArgs { asset_ids: Vec::new(), proxy_types: None };
    let redo = NewWorkItem::from_args(&redo, Scope::Config(config.id))?;
    println!("proxy deletion payload: {}", redo.payload());

    // Inside the backend's own transaction: its rows and the work they need commit together, or neither does.
    let mut conn = pool.get().await?;
    let purge = NewWorkItem::new(almanac_domain::WorkKind::Purge, Scope::Config(config.id))?;
    let in_transaction = conn
        .transaction::<_, Box<dyn std::error::Error + Send + Sync>, _>(async |conn| {
            // … the backend's own writes here, on `conn` …
            Ok(almanac_store_pg::enqueue_in(conn, &purge).await?)
        })
        .await
        .map_err(|e| e as Box<dyn std::error::Error>)?;
    println!("enqueued {} in the backend's transaction", in_transaction.item.id);
    drop(conn);

    // The user changes their mind.
    let outcome = store.request_cancel(first.item.id).await?;
    println!("cancel: {outcome:?}");

    // And the status page reads it back.
    let item = store.get(first.item.id).await?.ok_or("the item vanished")?;
    println!("status of {}: {} (requested at {})", item.id, item.status, item.requested_at);

    store.set_storage_config_active(config.id, false).await?;
    Ok(())
}
