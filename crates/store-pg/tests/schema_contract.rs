//! Rules the schema itself keeps, checked on the migrated database rather than on the migrations' text.

use almanac_testdb::TestDatabase;
use diesel::QueryableByName;
use diesel::sql_types::Text;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

#[derive(QueryableByName, Debug)]
struct Unindexed {
    #[diesel(sql_type = Text)]
    described: String,
}

/// A foreign key whose referencing columns lead no index makes every delete on the referenced side scan the
/// referencing table whole (to cascade or set null): in a large library, a purge or a `config remove` of a
/// million assets would take days. Every foreign key, present and future, has such an index.
#[tokio::test]
async fn every_foreign_key_leads_an_index() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    let unindexed: Vec<Unindexed> = diesel::sql_query(
        "SELECT c.conrelid::regclass::text || ': ' || pg_get_constraintdef(c.oid) AS described
           FROM pg_constraint c
          WHERE c.contype = 'f'
            AND c.connamespace = 'public'::regnamespace
            AND NOT EXISTS (
                SELECT 1 FROM pg_index i
                 WHERE i.indrelid = c.conrelid
                   AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] @> c.conkey
                   AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] <@ c.conkey)
          ORDER BY 1",
    )
    .load(&mut conn)
    .await
    .unwrap();
    let count: Vec<Unindexed> = diesel::sql_query(
        "SELECT count(*)::text AS described FROM pg_constraint
          WHERE contype = 'f' AND connamespace = 'public'::regnamespace",
    )
    .load(&mut conn)
    .await
    .unwrap();
    assert!(count[0].described.parse::<u32>().unwrap() >= 5, "the schema's foreign keys were read: {count:?}");
    assert!(unindexed.is_empty(), "foreign keys without an index leading with their columns: {unindexed:#?}");
}
