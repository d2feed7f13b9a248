//! The claim's plans on large queues, with and without statistics.

use super::claim::statement as claim_statement;
use super::outcome::{COMPLETE_MANY, IdRow, completion_binds};
use almanac_domain::{
    UserId, WorkItemId, WorkKind, WorkerId,
    ports::{Attempt, ClaimRequest, ClaimToken, Completion, Fence, LeaseDuration, ServedConfigs},
};
use diesel::sql_types::{BigInt, Text};
use diesel::{QueryableByName, sql_query};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use super::WorkItemRow;
use crate::prepared::Prepared;
use almanac_testdb::TestDatabase;

#[derive(QueryableByName)]
pub(super) struct Plan {
    #[diesel(sql_type = Text)]
    pub(super) plan: String,
}

/// The claim's plan cannot go wrong for want of statistics: on a queue of 130,000 items over 2,000 configs
/// (half of them busy, a busy one with a backlog of 50,000, an idle one with 20,000) and 10,000 unscoped
/// items, loaded with autovacuum
/// off and never analysed, the claim reads a few hundred rows of work_items, never a whole table or a whole
/// backlog: with the values in its text (a custom plan) and prepared (a generic plan, as a connection's
/// cached statement may run).
#[tokio::test]
async fn the_claim_reads_a_few_rows_from_a_large_queue_that_was_never_analysed() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(
        "ALTER TABLE work_items SET (autovacuum_enabled = false);
         ALTER TABLE queue_heads SET (autovacuum_enabled = false);
         INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'ann');
         INSERT INTO storage_configs (id, user_id, root_path)
         SELECT gen_random_uuid(), (SELECT id FROM users), '/lib/' || g FROM generate_series(1, 2000) g;
         -- The busy config's backlog first (oldest), then 50,000 more spread over every config.
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection', (SELECT id FROM storage_configs ORDER BY root_path LIMIT 1),
                now() - interval '2 days' + g * interval '1 ms'
           FROM generate_series(1, 50000) g;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'purge', c.id, now() - interval '1 day' + g * interval '1 s'
           FROM generate_series(1, 25) g CROSS JOIN storage_configs c;
         -- An idle config with a backlog of 20,000 too (the oldest of all: the claim takes its first).
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection',
                (SELECT id FROM storage_configs ORDER BY root_path DESC LIMIT 1),
                now() - interval '3 days' + g * interval '1 ms'
           FROM generate_series(1, 20000) g;
         -- 10,000 unscoped items, the newest of all.
         INSERT INTO work_items (id, kind, requested_at)
         SELECT gen_random_uuid(), 'token_cleanup', now() - interval '1 hour' + g * interval '1 ms'
           FROM generate_series(1, 10000) g;
         -- Half the configs busy (the one with the backlog among them).
         UPDATE work_items w SET status = 'running', attempt = 1, claim_token = gen_random_uuid(), worker_id = 'busy',
                lease_expires_at = now() + interval '1 hour'
          WHERE w.id IN (SELECT DISTINCT ON (q.storage_config_id) q.id FROM work_items q
                          WHERE q.storage_config_id IN (SELECT id FROM storage_configs ORDER BY root_path LIMIT 1000)
                          ORDER BY q.storage_config_id, q.requested_at);",
    )
    .await
    .unwrap();
    let analysed: Vec<Plan> = sql_query(
        "SELECT coalesce(max(last_analyze)::text, '') || coalesce(max(last_autoanalyze)::text, '') AS plan
           FROM pg_stat_user_tables WHERE relname IN ('work_items', 'queue_heads')",
    )
    .load(&mut conn)
    .await
    .unwrap();
    assert_eq!(analysed[0].plan, "", "the tables were never analysed");
    claims_read_few_rows(&mut conn).await;
}

/// Nor for statistics that mislead: taken while one config held every queued item (so the planner would take
/// each config for a backlog of 50,000), then 100 configs get 10 items each and an idle one a backlog of
/// 20,000. Before migration 000009 told ANALYZE how spread configs are, the planner read the whole table once
/// per candidate config (100 ms a claim).
#[tokio::test]
async fn the_claim_reads_a_few_rows_whatever_stale_statistics_say() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(
        "ALTER TABLE work_items SET (autovacuum_enabled = false);
         ALTER TABLE queue_heads SET (autovacuum_enabled = false);
         INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'ann');
         INSERT INTO storage_configs (id, user_id, root_path)
         SELECT gen_random_uuid(), (SELECT id FROM users), '/lib/' || g FROM generate_series(1, 102) g;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection', (SELECT id FROM storage_configs ORDER BY root_path LIMIT 1),
                now() - interval '2 days' + g * interval '1 ms'
           FROM generate_series(1, 50000) g;
         UPDATE work_items SET status = 'running', attempt = 1, claim_token = gen_random_uuid(), worker_id = 'busy',
                lease_expires_at = now() + interval '1 hour'
          WHERE id = (SELECT id FROM work_items ORDER BY requested_at LIMIT 1);
         ANALYZE work_items;
         ANALYZE queue_heads;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'purge', c.id, now() - interval '1 day' + g * interval '1 s'
           FROM generate_series(1, 10) g
          CROSS JOIN (SELECT id FROM storage_configs ORDER BY root_path OFFSET 1 LIMIT 100) c;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection',
                (SELECT id FROM storage_configs ORDER BY root_path DESC LIMIT 1),
                now() - interval '3 days' + g * interval '1 ms'
           FROM generate_series(1, 20000) g;",
    )
    .await
    .unwrap();
    claims_read_few_rows(&mut conn).await;
}

/// Nor for fresh statistics, with which the planner prices reading a config's whole queue below walking it
/// in order: a busy config with a backlog of 50,000 and 100 idle configs with 300 items each, analysed. Before
/// migration 000010 each refresh of a head read its config's whole queue three times (900 rows a config
/// here); the busy config's completion, whose head is refreshed too, must not read its backlog either.
#[tokio::test]
async fn claims_and_completions_read_a_few_rows_with_fresh_statistics() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(
        "INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'ann');
         INSERT INTO storage_configs (id, user_id, root_path)
         SELECT gen_random_uuid(), (SELECT id FROM users), '/lib/' || g FROM generate_series(1, 101) g;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'burst_detection', (SELECT id FROM storage_configs ORDER BY root_path LIMIT 1),
                now() - interval '2 days' + g * interval '1 ms'
           FROM generate_series(1, 50000) g;
         UPDATE work_items SET status = 'running', attempt = 1, claim_token = gen_random_uuid(), worker_id = 'busy',
                lease_expires_at = now() + interval '1 hour'
          WHERE id = (SELECT id FROM work_items ORDER BY requested_at LIMIT 1);
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'purge', c.id, now() - interval '1 day' + g * interval '1 s'
           FROM generate_series(1, 300) g
          CROSS JOIN (SELECT id FROM storage_configs ORDER BY root_path OFFSET 1) c;
         -- A paused kind, so that the walks pass over something.
         INSERT INTO paused_kinds (kind) VALUES ('crawl');
         ANALYZE work_items;
         ANALYZE queue_heads;",
    )
    .await
    .unwrap();
    claims_read_few_rows(&mut conn).await;
    let busy: Vec<WorkItemRow> =
        sql_query("SELECT * FROM work_items WHERE status = 'running'").load(&mut conn).await.unwrap();
    conn.batch_execute("BEGIN").await.unwrap();
    let before = rows_read(&mut conn).await;
    assert_eq!(complete_rows(&mut conn, &busy).await, 1);
    let completion = rows_read(&mut conn).await - before;
    conn.batch_execute("ROLLBACK").await.unwrap();
    assert!(completion < 2_000, "the busy config's completion read {completion} rows of work_items");
}

/// A Worker serving one user walks that user's claimable heads only, even with statistics taken before the user
/// had any config (they say every head is another user's): the queue's functions keep generic plans
/// (migration 000026), which cannot see which user is asked for. 2,000 claimable heads of one user, analysed,
/// all older than the three of a user added since: a walk of every claimable head in age order, keeping the
/// user's, would read the 2,000 first.
#[tokio::test]
async fn a_claim_for_a_user_the_statistics_never_saw_reads_only_that_users_heads() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(
        "ALTER TABLE work_items SET (autovacuum_enabled = false);
         ALTER TABLE queue_heads SET (autovacuum_enabled = false);
         INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'ann');
         INSERT INTO storage_configs (id, user_id, root_path)
         SELECT gen_random_uuid(), (SELECT id FROM users WHERE username = 'ann'), '/ann/' || g
           FROM generate_series(1, 2000) g;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'purge', c.id, now() - interval '1 day'
           FROM storage_configs c;
         ANALYZE work_items;
         ANALYZE queue_heads;
         INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'bob');
         INSERT INTO storage_configs (id, user_id, root_path)
         SELECT gen_random_uuid(), (SELECT id FROM users WHERE username = 'bob'), '/bob/' || g
           FROM generate_series(1, 3) g;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at)
         SELECT gen_random_uuid(), 'purge', c.id, now()
           FROM storage_configs c WHERE c.root_path LIKE '/bob/%';",
    )
    .await
    .unwrap();
    let users: Vec<Plan> =
        sql_query("SELECT id::text AS plan FROM users WHERE username = 'bob'").load(&mut conn).await.unwrap();
    let bob = UserId::from_uuid(users[0].plan.parse().unwrap());
    let request = ClaimRequest {
        worker_id: WorkerId::new("bob-only").unwrap(),
        served: ServedConfigs::User(bob),
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::DEFAULT,
    };
    for _ in 0..6 {
        conn.batch_execute("BEGIN").await.unwrap();
        let before = rows_read_of(&mut conn, "queue_heads").await;
        let claimed = claim_statement(&mut conn, &request, 8, uuid::Uuid::new_v4()).await.unwrap();
        let heads = rows_read_of(&mut conn, "queue_heads").await - before;
        conn.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(claimed.len(), 3, "bob's three items");
        assert!(heads < 200, "the claim for bob read {heads} rows of queue_heads");
    }
}

#[derive(QueryableByName)]
struct Reads {
    #[diesel(sql_type = BigInt)]
    rows: i64,
}

/// Rows of work_items this transaction has read so far, its triggers included. The view also holds this
/// session's counts not yet reported: compare two readings.
async fn rows_read(conn: &mut AsyncPgConnection) -> i64 {
    rows_read_of(conn, "work_items").await
}

/// Rows of `table` this transaction has read so far (see [`rows_read`]).
async fn rows_read_of(conn: &mut AsyncPgConnection, table: &str) -> i64 {
    let read = "SELECT coalesce(idx_tup_fetch, 0) + seq_tup_read AS rows
                  FROM pg_stat_xact_user_tables WHERE relname = $1";
    let rows: Vec<Reads> = sql_query(read).bind::<Text, _>(table).load(conn).await.unwrap();
    rows.iter().map(|r| r.rows).sum()
}

/// Claims eight items the way the store does (for all configs and for one user; with custom and with
/// generic plans for the statement, with the plans the queue's functions keep), then completes them the way the
/// store does (the connection's prepared statement, its generic plan once kept), each in a transaction that is
/// rolled back, and checks what the claim and the completion each
/// read of work_items, their triggers (the heads' refresh) included, from the transaction's own statistics:
/// some hundreds of rows, never a whole table or a whole backlog (hundreds to tens of thousands here); and that
/// the claim took no more configs than its batch and 32, whatever plan its walk gets (a walk sorted before it
/// takes them would take every claimable config; see [`super::claim::configs_taken`]).
async fn claims_read_few_rows(conn: &mut AsyncPgConnection) {
    let users: Vec<Plan> = sql_query("SELECT id::text AS plan FROM users").load(conn).await.unwrap();
    let user = UserId::from_uuid(users[0].plan.parse().unwrap());
    for served in [ServedConfigs::All, ServedConfigs::User(user)] {
        let request = ClaimRequest {
            worker_id: WorkerId::new("bench").unwrap(),
            served,
            kinds: WorkKind::ALL.to_vec(),
            lease: LeaseDuration::DEFAULT,
        };
        // Six of each: after five runs a cached statement may turn generic when the planner prices that
        // no higher. Inside the queue's functions the plans are theirs whatever the session says (migration
        // 000026: generic for every config and for the heads, custom for one user's configs); a forced generic
        // plan of the claim statement itself is not covered (see ADR 0008, "batches").
        for mode in ["force_custom_plan", "auto"] {
            for _ in 0..6 {
                conn.batch_execute(&format!("BEGIN; SET LOCAL plan_cache_mode = {mode}")).await.unwrap();
                let before = rows_read(conn).await;
                let claimed = claim_statement(conn, &request, 8, uuid::Uuid::new_v4()).await.unwrap();
                let claim = rows_read(conn).await - before;
                let taken = super::claim::configs_taken(conn).await.unwrap();
                assert!(taken <= 8 + 32, "the claim took {taken} configs ({served:?}, {mode})");
                assert_eq!(claimed.len(), 8, "eight items claimed, as asked ({served:?}, {mode})");
                let before = rows_read(conn).await;
                let written = complete_rows(conn, &claimed).await;
                let completion = rows_read(conn).await - before;
                conn.batch_execute("ROLLBACK").await.unwrap();
                assert_eq!(written, 8, "the eight completed ({served:?}, {mode})");
                assert!(claim < 2_000, "the claim read {claim} rows of work_items ({served:?}, {mode})");
                assert!(completion < 2_000, "the completion read {completion} rows of work_items ({served:?}, {mode})");
            }
        }
    }
    // The completion is the connection's prepared statement, as in the store: after its custom plans it ran the
    // generic plan it keeps, and that plan read a few rows too.
    let plans = completion_plans(conn).await;
    assert!(plans.generic_plans >= 1, "the completion's generic plan never ran: {plans:?}");
}

/// Completes `items` with the store's batched completion, prepared on the connection as the store prepares it
/// (kept and reused, so after five calls it may run its generic plan); the number of rows written.
async fn complete_rows(conn: &mut AsyncPgConnection, items: &[WorkItemRow]) -> usize {
    let done: Vec<Completion<'_>> = items
        .iter()
        .map(|i| {
            let claim = ClaimToken::from_uuid(i.claim_token.expect("a claimed item has a token"));
            (Fence::new(WorkItemId::from_uuid(i.id), Attempt::new(i.attempt).unwrap(), claim), None)
        })
        .collect();
    let written: Vec<IdRow> = Prepared::new(COMPLETE_MANY, completion_binds(&done)).load(conn).await.unwrap();
    written.len()
}

#[derive(QueryableByName, Debug)]
struct Plans {
    #[diesel(sql_type = BigInt)]
    generic_plans: i64,
    #[diesel(sql_type = BigInt)]
    custom_plans: i64,
}

/// How often the connection's prepared completion ran its generic plan, and how often it was planned for its
/// call's values. Found by its text up to its first placeholder (the store renumbers a repeated one).
async fn completion_plans(conn: &mut AsyncPgConnection) -> Plans {
    let before_placeholders = COMPLETE_MANY.split('$').next().expect("split yields at least one part");
    let plans: Vec<Plans> =
        sql_query("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE starts_with(statement, $1)")
            .bind::<Text, _>(before_placeholders)
            .load(conn)
            .await
            .unwrap();
    assert_eq!(plans.len(), 1, "the completion is one prepared statement of the connection: {plans:?}");
    plans.into_iter().next().unwrap()
}

/// A batch of completions is planned once per connection whatever its size, as the claim is: the statement's
/// cached generic plan is kept once the planner has made its five custom ones. Planned for the values of each
/// call, it was planned again on every batch of eight (0.15 ms of server time each, some 7% of a claimer's
/// cycle with eight claimers on two cores): the planner counts a constant array's elements, so the custom plan
/// of a batch of eight priced below the generic plan's batch of ten. Batches of one to nine, on the
/// connection's one prepared statement, on a queue of 20,000 with 5,000 running (with few running, both plans
/// start from the running items' index and cost the same).
#[tokio::test]
async fn a_batch_of_completions_keeps_its_plan_whatever_its_size() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(
        "INSERT INTO work_items (id, kind, requested_at)
         SELECT gen_random_uuid(), 'token_cleanup', now() - interval '1 hour' + g * interval '1 ms'
           FROM generate_series(1, 20000) g;
         UPDATE work_items SET status = 'running', attempt = 1, worker_id = 'busy', claim_token = gen_random_uuid(),
                lease_expires_at = now() + interval '1 day'
          WHERE id IN (SELECT id FROM work_items ORDER BY requested_at DESC LIMIT 5000);
         ANALYZE work_items;",
    )
    .await
    .unwrap();
    let request = ClaimRequest {
        worker_id: WorkerId::new("plans").unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::DEFAULT,
    };
    for size in 1..=9 {
        let claimed = claim_statement(&mut conn, &request, size, uuid::Uuid::new_v4()).await.unwrap();
        assert_eq!(claimed.len(), size);
        assert_eq!(complete_rows(&mut conn, &claimed).await, size, "a batch of {size} completed");
    }
    let plans = completion_plans(&mut conn).await;
    assert!(
        plans.custom_plans <= 5 && plans.generic_plans >= 1,
        "nine batches of completions were planned {} times for their values ({} runs of the generic plan)",
        plans.custom_plans,
        plans.generic_plans
    );
}

#[derive(QueryableByName)]
struct HeadDue {
    #[diesel(sql_type = Text)]
    root: String,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    earliest_is: bool,
}

/// A head's refresh reads the config's oldest queued item and, only when that item is not due, its earliest
/// `run_after` (migration 000029): a config whose oldest item is due keeps that item's `run_after` (already past,
/// though a newer item is due earlier); one whose oldest item waits keeps the earliest of its items; and the claim
/// decides as before. Config `a`: its oldest item waits an hour, a newer one is due: claimed, the newer item.
/// Config `b`: both due, the newer one earlier: claimed, the oldest, its head holding the oldest's `run_after`.
/// Config `c`: its one item waits an hour: not claimed.
#[tokio::test]
async fn a_heads_refresh_reads_the_earliest_only_when_the_oldest_item_is_not_due() {
    let db = TestDatabase::create().await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(
        "INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'ann');
         INSERT INTO storage_configs (id, user_id, root_path)
         SELECT gen_random_uuid(), (SELECT id FROM users), '/' || r FROM unnest(ARRAY['a', 'b', 'c']) r;
         INSERT INTO work_items (id, kind, storage_config_id, requested_at, run_after, payload)
         SELECT gen_random_uuid(), 'burst_detection', c.id, now() - i.age * interval '1 s',
                now() + i.wait * interval '1 s', jsonb_build_object('name', i.name)
           FROM storage_configs c
           JOIN (VALUES ('a', 'a1', 3, 3600), ('a', 'a2', 2, -1),
                        ('b', 'b1', 3, -10), ('b', 'b2', 2, -20),
                        ('c', 'c1', 3, 3600)) AS i (root, name, age, wait) ON '/' || i.root = c.root_path;",
    )
    .await
    .unwrap();
    let heads: Vec<HeadDue> = sql_query(
        "SELECT ltrim(c.root_path, '/') AS root,
                h.earliest_run_after = (SELECT w.run_after FROM work_items w
                                         WHERE w.payload->>'name' = CASE c.root_path WHEN '/a' THEN 'a2'
                                                                    WHEN '/b' THEN 'b1' ELSE 'c1' END) AS earliest_is
           FROM queue_heads h JOIN storage_configs c ON c.id = h.storage_config_id ORDER BY 1",
    )
    .load(&mut conn)
    .await
    .unwrap();
    let held: Vec<(&str, bool)> = heads.iter().map(|h| (h.root.as_str(), h.earliest_is)).collect();
    assert_eq!(
        held,
        [("a", true), ("b", true), ("c", true)],
        "a: the earliest (its oldest waits); b: its oldest's, due; c: its one item's"
    );
    let request = ClaimRequest {
        worker_id: WorkerId::new("due").unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::DEFAULT,
    };
    let claimed = claim_statement(&mut conn, &request, 8, uuid::Uuid::new_v4()).await.unwrap();
    let mut names: Vec<String> =
        claimed.iter().map(|r| r.payload["name"].as_str().unwrap_or_default().to_owned()).collect();
    names.sort();
    assert_eq!(names, ["a2", "b1"], "the due items, each its config's oldest due one");
}
