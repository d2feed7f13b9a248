//! The work kinds are one list in the domain (`WorkKind`); the database spells them again in its CHECK
//! constraints. These tests hold the two together: every kind the domain knows is one the database takes,
//! and every kind × scope the domain allows or refuses, the database allows or refuses too.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;

use almanac_domain::{NewWorkItem, Scope, StorageConfigId, WorkKind, WorkQueue};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use diesel::result::{DatabaseErrorKind, Error};
use diesel::sql_query;
use diesel::sql_types::{Nullable, Text, Uuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

async fn setup() -> (TestDatabase, PgStore, StorageConfigId, AsyncPgConnection) {
    let db = TestDatabase::create().await;
    let store = PgStore::connect(db.url()).expect("store");
    let new = NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/photos/ann") };
    let config = store.add_storage_config(&new).await.expect("add config").1.id;
    let conn = AsyncPgConnection::establish(db.url()).await.expect("connect");
    (db, store, config, conn)
}

/// Inserts a queued item of `kind` on `scope` as a hand-written row would (past the domain's checks); answers
/// whether the database took it, or the CHECK constraint that refused it.
async fn insert(conn: &mut AsyncPgConnection, kind: &str, scope: Scope) -> Result<(), String> {
    let inserted = sql_query("INSERT INTO work_items (id, kind, storage_config_id) VALUES ($1, $2, $3)")
        .bind::<Uuid, _>(almanac_domain::WorkItemId::new().as_uuid())
        .bind::<Text, _>(kind)
        .bind::<Nullable<Uuid>, _>(scope.storage_config().map(|c| c.as_uuid()))
        .execute(conn)
        .await;
    match inserted {
        Ok(_) => Ok(()),
        Err(Error::DatabaseError(DatabaseErrorKind::CheckViolation, info)) => {
            Err(info.constraint_name().unwrap_or("a CHECK constraint").to_owned())
        }
        Err(other) => panic!("{kind} on {scope:?}: {other}"),
    }
}

#[tokio::test]
async fn every_kind_and_scope_the_domain_allows_the_database_allows_and_no_other() {
    let (_db, store, config, mut conn) = setup().await;
    for kind in WorkKind::ALL {
        for scope in [Scope::Config(config), Scope::Unscoped] {
            let domain = NewWorkItem::new(kind, scope);
            let database = insert(&mut conn, kind.as_str(), scope).await;
            assert_eq!(
                domain.is_ok(),
                database.is_ok(),
                "{kind} on {scope:?}: domain {domain:?}, database {database:?}"
            );
            if let Err(constraint) = database {
                assert_eq!(constraint, "ck_work_items_kind_scope", "{kind} on {scope:?}");
            }
            // And through the store, as every enqueue goes.
            if let Ok(item) = domain {
                assert_eq!(store.enqueue(&item).await.expect("enqueue").item.kind, kind);
            }
        }
    }
}

#[tokio::test]
async fn a_kind_the_domain_does_not_know_the_database_refuses() {
    let (_db, _store, config, mut conn) = setup().await;
    for scope in [Scope::Config(config), Scope::Unscoped] {
        assert_eq!(insert(&mut conn, "crawling", scope).await, Err("ck_work_items_kind".to_owned()));
    }
    let paused = sql_query("INSERT INTO paused_kinds (kind) VALUES ('crawling')").execute(&mut conn).await;
    assert!(
        matches!(&paused, Err(Error::DatabaseError(DatabaseErrorKind::CheckViolation, i))
            if i.constraint_name() == Some("ck_paused_kinds_kind")),
        "{paused:?}"
    );
}

#[tokio::test]
async fn the_database_s_kind_lists_are_the_domain_s() {
    let (_db, _store, _config, mut conn) = setup().await;
    let names = ["ck_paused_kinds_kind", "ck_work_items_kind", "ck_work_items_kind_scope"];
    let constraints = support::constraint_lists(&mut conn, &names).await;
    assert_eq!(constraints.len(), 3, "every constraint that names kinds is looked at");
    let domain: BTreeSet<String> = WorkKind::ALL.iter().map(|k| k.as_str().to_owned()).collect();
    // The kinds a constraint names: its quoted words.
    for (name, named) in &constraints {
        assert_eq!(named, &domain, "{name}");
    }
    for kind in WorkKind::ALL {
        sql_query("INSERT INTO paused_kinds (kind) VALUES ($1)")
            .bind::<Text, _>(kind.as_str())
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("pausing {kind}: {e}"));
    }
}
