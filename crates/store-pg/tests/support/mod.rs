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

/// Every column of the schema's tables whose type is one of `bases` or a domain over one (`table.column`, its type's
/// name), in name order: what a rule held by a domain must cover.
pub async fn columns_of_base_types(conn: &mut AsyncPgConnection, bases: &[&str]) -> Vec<(String, String)> {
    let bases: Vec<String> = bases.iter().map(|b| format!("'{b}'")).collect();
    let sql = format!(
        "SELECT c.relname || '.' || a.attname AS a, format_type(a.atttypid, NULL) AS b
           FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
           JOIN pg_attribute AS a ON a.attrelid = c.oid
          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
            AND coalesce((SELECT t.typbasetype FROM pg_type AS t WHERE t.oid = a.atttypid AND t.typtype = 'd'),
                         a.atttypid) = ANY (ARRAY[{}]::regtype[])
          ORDER BY 1",
        bases.join(", ")
    );
    text_pairs(conn, &sql).await
}

/// The checks of the domain `domain`: each one's name and definition.
pub async fn domain_checks(conn: &mut AsyncPgConnection, domain: &str) -> Vec<(String, String)> {
    let sql = format!(
        "SELECT conname::text AS a, pg_get_constraintdef(oid) AS b
           FROM pg_constraint WHERE contypid = '{domain}'::regtype ORDER BY 1"
    );
    text_pairs(conn, &sql).await
}
