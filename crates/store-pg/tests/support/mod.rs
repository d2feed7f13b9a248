//! What the store's contract tests share: a fresh database with a store over it, and a storage config.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use almanac_domain::StorageConfig;
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;

/// A fresh database (cloned from the migrated template) and a store of four connections over it.
pub async fn setup() -> (TestDatabase, PgStore) {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), 4, Duration::from_secs(10)).expect("store");
    (db, store)
}

/// A storage config of `user` (made when new) at `root`.
pub async fn config(store: &PgStore, user: &str, root: &str) -> StorageConfig {
    store
        .add_storage_config(&NewStorageConfig { username: user.into(), root_path: PathBuf::from(root) })
        .await
        .expect("add config")
        .1
}
