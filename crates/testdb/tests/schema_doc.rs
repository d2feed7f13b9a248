//! `docs/schema.sql` is generated; this keeps it honest.

use almanac_testdb::{Cluster, TestDatabase};

#[tokio::test]
async fn docs_schema_sql_matches_the_migrations() {
    let db = TestDatabase::create().await;
    let schema = Cluster::private().and_then(|c| c.dump_schema(db.url())).expect("pg_dump");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/schema.sql");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(schema == committed, "docs/schema.sql is stale: run `cargo xtask schema` and commit the result");
}

#[tokio::test]
async fn every_table_has_a_comment() {
    let db = TestDatabase::create().await;
    let schema = Cluster::private().and_then(|c| c.dump_schema(db.url())).expect("pg_dump");
    let tables: Vec<&str> = schema
        .lines()
        .filter_map(|l| l.strip_prefix("CREATE TABLE public."))
        .map(|l| l.trim_end_matches(" ("))
        .collect();
    assert!(tables.len() >= 8, "{tables:?}");
    for table in tables {
        assert!(schema.contains(&format!("COMMENT ON TABLE public.{table} IS")), "table {table} has no comment");
    }
}
