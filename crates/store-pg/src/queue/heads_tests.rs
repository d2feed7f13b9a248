//! The heads' upkeep after claims and completions (migrations 000030 and 000031): the mark's lock order, when a
//! refresh may skip its look for a running item, and how the trigger pairs an update's rows.

use diesel::sql_types::Text;
use diesel::{QueryableByName, sql_query};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use super::tests::Plan;
use almanac_testdb::TestDatabase;

#[derive(QueryableByName)]
struct Setting {
    #[diesel(sql_type = Text)]
    setting: String,
}

/// A claim's mark updates its heads without locking them first (migration 000030), so its update's own scan must
/// take their row locks in the order every refresh takes them, by config: a scan of the primary key for the array
/// of configs, never a partial index in age order. Read from the function as installed, planned with its settings
/// as a generic plan, as the function runs it.
#[tokio::test]
async fn a_claims_mark_updates_its_heads_in_config_order() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    let body: Setting =
        sql_query("SELECT prosrc AS setting FROM pg_proc WHERE proname = 'almanac_mark_queue_heads_running'")
            .get_result(&mut conn)
            .await
            .unwrap();
    let update = body.setting.split("BEGIN").nth(1).and_then(|b| b.split(';').next()).unwrap().trim().to_owned();
    assert!(update.starts_with("UPDATE queue_heads"), "the mark is one update of the heads: {update}");
    let settings: Vec<Setting> = sql_query(
        "SELECT unnest(proconfig) AS setting FROM pg_proc WHERE proname = 'almanac_mark_queue_heads_running'",
    )
    .load(&mut conn)
    .await
    .unwrap();
    for s in &settings {
        let (name, value) = s.setting.split_once('=').unwrap();
        conn.batch_execute(&format!("SET {name} = '{value}'")).await.unwrap();
    }
    conn.batch_execute(&format!("PREPARE mark (uuid[]) AS {}", update.replace("configs", "$1"))).await.unwrap();
    conn.batch_execute(
        "CREATE FUNCTION pg_temp.plan_of(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
         DECLARE line text; BEGIN FOR line IN EXECUTE q LOOP RETURN NEXT line; END LOOP; END $$",
    )
    .await
    .unwrap();
    let plan: Vec<Plan> = sql_query(
        "SELECT pg_temp.plan_of('EXPLAIN EXECUTE mark (''{00000000-0000-0000-0000-000000000001}'')') AS plan",
    )
    .load(&mut conn)
    .await
    .unwrap();
    let plan: Vec<&str> = plan.iter().map(|p| p.plan.trim()).collect();
    let scans: Vec<&&str> = plan.iter().filter(|l| l.contains("Scan")).collect();
    assert!(
        scans.len() == 1
            && scans[0].starts_with("->  Index Scan using queue_heads_pkey")
            && plan.iter().any(|l| l.starts_with("Index Cond: (storage_config_id = ANY ($1))"))
            && !plan.iter().any(|l| l.contains("Sort")),
        "the mark scans the heads' primary key for its configs, and nothing else: {plan:#?}"
    );
}

#[derive(QueryableByName)]
struct Claimable {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    claimable: bool,
}

/// A refresh skips its look for a running item only after statements that did nothing but end running items
/// (migration 000030). One statement that ends a config's running item and sets another of its items running
/// (a hand-written swap: the running-config index admits it, the first row updated first) leaves the head
/// unclaimable, though a third item is queued; so does a claim, and the completion after it frees the head.
#[tokio::test]
async fn a_statement_that_ends_one_item_of_a_config_and_starts_another_leaves_its_head_unclaimable() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(
        "INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'ann');
         INSERT INTO storage_configs (id, user_id, root_path) SELECT gen_random_uuid(), id, '/a' FROM users;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT ('00000000-0000-0000-0000-00000000000' || n)::uuid, 'burst_detection', c.id,
                now() - (10 - n) * interval '1 s'
           FROM storage_configs c CROSS JOIN generate_series(1, 3) AS n;
         UPDATE work_items SET status = 'running', attempt = 1, worker_id = 'w', lease_expires_at = now() + interval '1 h'
          WHERE id = '00000000-0000-0000-0000-000000000001';",
    )
    .await
    .unwrap();
    let claimable = async |conn: &mut AsyncPgConnection| {
        sql_query("SELECT claimable FROM queue_heads").get_result::<Claimable>(conn).await.unwrap().claimable
    };
    assert!(!claimable(&mut conn).await, "a config with a running item is not claimable");
    // The first item's row updated first: by the primary key, in order (a scan of the heap would meet the
    // running item's new version last).
    conn.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").await.unwrap();
    conn.batch_execute(
        "UPDATE work_items
            SET status = CASE WHEN status = 'running' THEN 'succeeded' ELSE 'running' END,
                finished_at = CASE WHEN status = 'running' THEN now() END,
                lease_expires_at = CASE WHEN status = 'running' THEN NULL ELSE now() + interval '1 h' END,
                attempt = CASE WHEN status = 'running' THEN attempt ELSE 1 END,
                worker_id = 'w'
          WHERE id = ANY ('{00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002}')",
    )
    .await
    .unwrap();
    assert!(!claimable(&mut conn).await, "the second item runs: its config is not claimable, though a third waits");
    conn.batch_execute(
        "UPDATE work_items SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
          WHERE id = '00000000-0000-0000-0000-000000000002'",
    )
    .await
    .unwrap();
    assert!(claimable(&mut conn).await, "its running item ended: the config is claimable for its third item");
}

/// A claim's mark holds every head it is given to its commit, one already not claimable too (a pause committed
/// since the claim's snapshot): otherwise an enqueue's refresh of that head, before the claim commits, would not see
/// the claim's running item and would leave the config claimable while the item runs. The mark runs in an open
/// transaction on a head that reads not claimable; another session then cannot lock that head.
#[tokio::test]
async fn a_claims_mark_holds_every_head_it_is_given_even_one_not_claimable() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(
        "INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'ann');
         INSERT INTO storage_configs (id, user_id, root_path) SELECT gen_random_uuid(), id, '/a' FROM users;
         UPDATE queue_heads SET claimable = false;",
    )
    .await
    .unwrap();
    conn.batch_execute(
        "BEGIN; SELECT almanac_mark_queue_heads_running(ARRAY(SELECT storage_config_id FROM queue_heads))",
    )
    .await
    .unwrap();
    let held = "SELECT 1 FROM queue_heads FOR UPDATE NOWAIT";
    let mut other = AsyncPgConnection::establish(db.url()).await.unwrap();
    let tried = other.batch_execute(held).await;
    assert!(tried.is_err(), "the head the mark was given, not claimable, was not held by the mark's transaction");
    conn.batch_execute("COMMIT").await.unwrap();
    other.batch_execute(held).await.unwrap();
}

/// The smallest join of `plan` (`EXPLAIN (FORMAT JSON)`'s top node) whose inputs scan both `a` and `b`.
fn join_of<'p>(plan: &'p serde_json::Value, a: &str, b: &str) -> Option<&'p serde_json::Value> {
    fn scanned(node: &serde_json::Value, into: &mut Vec<String>) {
        if let Some(name) = node["Relation Name"].as_str() {
            into.push(name.to_owned());
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            scanned(child, into);
        }
    }
    let children = plan["Plans"].as_array().into_iter().flatten();
    if let Some(inner) = children.clone().find_map(|c| join_of(c, a, b)) {
        return Some(inner);
    }
    let mut names = Vec::new();
    scanned(plan, &mut names);
    let joins = plan["Node Type"].as_str().is_some_and(|t| t.ends_with("Join") || t == "Nested Loop");
    (joins && names.iter().any(|n| n == a) && names.iter().any(|n| n == b)).then_some(plan)
}

/// The heads' trigger after an update pairs each row's old and new versions (migration 000031) by a join that is
/// never a nested loop: PL/pgSQL plans the statement once per session with the row counts of the first update
/// that fires it, usually a claim's few rows, and a nested loop kept from then compared every old row with every
/// new one of a later statement of many items (10,000 items: 6.5 s instead of 0.24 s). Read from the function as
/// installed and planned, as on a connection whose first update was of one row and of eight, with transition
/// tables of those sizes (temporary tables of the same names, analysed). It stays a full join: a left or right
/// one can be a nested loop again.
#[tokio::test]
async fn the_heads_trigger_pairs_an_updates_rows_without_a_nested_loop() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    let body: Setting =
        sql_query("SELECT prosrc AS setting FROM pg_proc WHERE proname = 'almanac_queue_heads_updated'")
            .get_result(&mut conn)
            .await
            .unwrap();
    let pairing = body.setting.split("BEGIN").nth(1).and_then(|b| b.split(';').next()).unwrap().trim().to_owned();
    assert!(pairing.contains("old_rows") && pairing.contains("new_rows"), "the trigger's first statement: {pairing}");
    let pairing = pairing.replace("INTO configs, claims_only, ends_only", "");
    conn.batch_execute(
        "CREATE TEMPORARY TABLE old_rows AS SELECT * FROM work_items WITH NO DATA;
         CREATE TEMPORARY TABLE new_rows AS SELECT * FROM work_items WITH NO DATA;
         CREATE FUNCTION pg_temp.plan_of(q text) RETURNS text LANGUAGE plpgsql AS $$
         DECLARE plan text; BEGIN EXECUTE q INTO plan; RETURN plan; END $$",
    )
    .await
    .unwrap();
    for rows in [1, 8] {
        conn.batch_execute(&format!(
            "TRUNCATE old_rows, new_rows;
             INSERT INTO old_rows (id, kind, storage_config_id, status)
             SELECT gen_random_uuid(), 'crawl', gen_random_uuid(), 'queued' FROM generate_series(1, {rows});
             INSERT INTO new_rows SELECT * FROM old_rows;
             UPDATE new_rows SET status = 'running';
             ANALYZE old_rows, new_rows;"
        ))
        .await
        .unwrap();
        let plan: Plan = sql_query("SELECT pg_temp.plan_of($1) AS plan")
            .bind::<Text, _>(format!("EXPLAIN (FORMAT JSON) {pairing}"))
            .get_result(&mut conn)
            .await
            .unwrap();
        let plan: serde_json::Value = serde_json::from_str(&plan.plan).unwrap();
        let join = join_of(&plan[0]["Plan"], "old_rows", "new_rows")
            .unwrap_or_else(|| panic!("no join of the transition tables in {plan:#}"));
        assert_ne!(
            join["Node Type"], "Nested Loop",
            "planned for {rows} rows, the pairing of old and new rows is a nested loop: {plan:#}"
        );
        // A full join the planner turned into a left or right one (a condition strict on a side) could be a nested
        // loop for other row counts.
        assert_eq!(
            join["Join Type"], "Full",
            "planned for {rows} rows, the pairing is no longer a full join: {plan:#}"
        );
    }
}
