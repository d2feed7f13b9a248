//! What the store's contract tests share: a fresh database with a store over it, and a storage config.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use std::collections::BTreeSet;

use almanac_domain::ports::{ClaimRequest, LeaseDuration, ServedConfigs};
use almanac_domain::{StorageConfig, WorkKind, WorkerId};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use diesel::sql_query;
use diesel::sql_types::Text;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

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

/// The claim of Worker `worker`: any kind, any config, a lease of a minute.
pub fn claimer(worker: &str) -> ClaimRequest {
    ClaimRequest {
        worker_id: WorkerId::new(worker).unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::new(Duration::from_secs(60)).unwrap(),
    }
}

/// The CHECK constraints named `names`, in name order, each with the words its definition quotes (the values
/// it allows).
pub async fn constraint_lists(conn: &mut AsyncPgConnection, names: &[&str]) -> Vec<(String, BTreeSet<String>)> {
    #[derive(diesel::QueryableByName)]
    struct Constraint {
        #[diesel(sql_type = Text)]
        name: String,
        #[diesel(sql_type = Text)]
        definition: String,
    }
    let constraints: Vec<Constraint> = sql_query(
        "SELECT conname::text AS name, pg_get_constraintdef(oid) AS definition FROM pg_constraint
          WHERE conname = ANY($1) ORDER BY conname",
    )
    .bind::<diesel::sql_types::Array<Text>, _>(names)
    .load(conn)
    .await
    .expect("constraints");
    let quoted = |c: &Constraint| c.definition.split('\'').skip(1).step_by(2).map(str::to_owned).collect();
    constraints.iter().map(|c| (c.name.clone(), quoted(c))).collect()
}

/// The rows of `sql`, which names its two text columns `a` and `b`.
pub async fn text_pairs(conn: &mut AsyncPgConnection, sql: &str) -> Vec<(String, String)> {
    #[derive(diesel::QueryableByName)]
    struct Pair {
        #[diesel(sql_type = Text)]
        a: String,
        #[diesel(sql_type = Text)]
        b: String,
    }
    sql_query(sql).load::<Pair>(conn).await.expect(sql).into_iter().map(|r| (r.a, r.b)).collect()
}
