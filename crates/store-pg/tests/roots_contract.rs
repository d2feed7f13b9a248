//! Contract tests of the root rules (ADR 0009) on real PostgreSQL: roots are canonical and never overlap,
//! whoever owns them, even when two registrations race.

mod support;

use support::setup;

use std::path::PathBuf;

use almanac_store_pg::{NewStorageConfig, PgStore, StoreError};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};

async fn add(store: &PgStore, user: &str, root: &str) -> Result<(), String> {
    let new = NewStorageConfig { username: user.into(), root_path: PathBuf::from(root) };
    match store.add_storage_config(&new).await {
        Ok(_) => Ok(()),
        Err(StoreError::Conflict(why)) => Err(why),
        Err(other) => panic!("{root}: {other}"),
    }
}

#[tokio::test]
async fn a_root_that_overlaps_another_config_is_refused_whoever_owns_it() {
    let (_db, store) = setup().await;
    add(&store, "ann", "/p/ann").await.unwrap();
    add(&store, "bob", "/p/bob").await.unwrap();
    for (user, root) in [("eve", "/p"), ("eve", "/p/ann/2019"), ("ann", "/p/bob/shared"), ("ann", "/p/ann")] {
        let err = add(&store, user, root).await.unwrap_err();
        assert!(err.contains(root) && (err.contains("overlaps") || err.contains("already registered")), "{err}");
    }
    let err = add(&store, "eve", "/p/ann/x").await.unwrap_err();
    assert!(err.contains("/p/ann") && err.contains("user ann"), "it names the other root and owner: {err}");
    // Neighbours whose names only share a prefix do not overlap.
    add(&store, "eve", "/p/anne").await.unwrap();
    add(&store, "eve", "/q").await.unwrap();
    assert_eq!(store.list_storage_configs().await.unwrap().len(), 4);
    assert!(store.root_overlaps().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_root_that_is_not_canonical_is_refused() {
    let (_db, store) = setup().await;
    for root in ["/", "/p/ann/", "/p/ann/../bob", "/p/./ann", "/p//ann", "relative/ann"] {
        let err = add(&store, "ann", root).await.unwrap_err();
        assert!(err.contains("a storage root"), "{root}: {err}");
    }
    assert!(store.list_storage_configs().await.unwrap().is_empty());
}

/// Two registrations of nested roots, forced to overlap: a transaction holds `storage_configs` so both start
/// and wait; once it ends they run at the same moment. Each must still see the other's root.
#[tokio::test]
async fn racing_registrations_of_nested_roots_let_exactly_one_in() {
    let (db, store) = setup().await;
    let store = std::sync::Arc::new(store);
    // A few rounds: without the registrations' own lock, released together they usually both get in.
    for round in 0..4 {
        let mut holder = AsyncPgConnection::establish(db.url()).await.unwrap();
        holder.batch_execute("BEGIN; LOCK TABLE storage_configs IN ACCESS EXCLUSIVE MODE").await.unwrap();
        let (s1, s2) = (store.clone(), store.clone());
        let outer = tokio::spawn(async move { add(&s1, "ann", &format!("/r{round}")).await });
        let inner = tokio::spawn(async move { add(&s2, "bob", &format!("/r{round}/inner")).await });
        let waiting = db.sessions_waiting_on_locks(2).await;
        assert_eq!(waiting, 2, "both registrations must be waiting before they are let go");
        holder.batch_execute("COMMIT").await.unwrap();
        let (a, b) = (outer.await.unwrap(), inner.await.unwrap());
        assert!(a.is_ok() != b.is_ok(), "round {round}: exactly one of two nested roots gets in: {a:?} {b:?}");
    }
    assert_eq!(store.list_storage_configs().await.unwrap().len(), 4);
    assert!(store.root_overlaps().await.unwrap().is_empty());
}
