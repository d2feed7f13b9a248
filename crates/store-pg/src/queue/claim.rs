//! The claim (ADR 0008 rules 1 and 2): alone, in a transaction of its own, or chained after completions
//! (`outcome::complete_many_and_claim`).

use almanac_domain::{
    QueueError, WorkItem,
    ports::{Attempt, ClaimRequest, ClaimToken, ClaimedItem, Fence, ServedConfigs},
};
use diesel::pg::Pg;
use diesel::result::Error as DieselError;
use diesel_async::{AsyncConnectionCore, RunQueryDsl};

use super::WorkItemRow;
use super::outcome::{released, seconds};
use crate::PgStore;
use crate::error::{self, RUNNING_CONFIG_INDEX, placed};
use crate::prepared::{Bind, Prepared};
use crate::tx::{Abandoned, Lane};

/// Rule 1: one statement under READ COMMITTED. The candidates are the oldest due unscoped items and the oldest
/// due item of each config the claim takes, up to `{limit}` of them (`almanac_claim_candidates`, migration
/// 000027): the oldest claimable configs in age order (`queue_heads`: active, queued work, nothing running, kept
/// by triggers in the same transactions that change `work_items`), each under a transaction-level advisory lock
/// tried without waiting, so a config another claim holds is passed over and two claims never aim at one config.
/// The items are read in a snapshot taken after those locks, so no candidate of a config is an item another claim
/// took since this one began (unscoped items have no config to take; two claims can still meet on one). Neither the number of configs nor a busy config's backlog is ever scanned (ADR 0008, "claim
/// cost"), and the walks are planned as walks of queued indexes in order, whatever the statistics say. Rule 2
/// (the running-config index) rejects a second running item of a config written by anything that does not take
/// the lock.
///
/// Why configs are taken first (ADR 0008, amendment "the claim takes its configs"): a candidate locked `FOR UPDATE`
/// after another claim took and committed it is locked in its newest version (the other claim's running item)
/// before it is found no longer queued, and PostgreSQL keeps that lock to the end of the transaction: the running
/// item's completion or heartbeat then waited for this claim. Test:
/// `a_claim_never_holds_an_item_another_claim_took_since_it_began`.
///
/// It claims up to `{limit}` items at once (see [`claim_text`]): the candidates hold at most one item per config
/// (one per taken config, and unscoped items have none), so a batch never holds two items of one config, and no
/// id twice. The candidates are computed once, in a materialised
/// `WITH`, each id then looked up by primary key; the claimed ids are handed on as an array computed once
/// (`= ANY (ARRAY (…))`, an init plan, not a filter evaluated row by row). So each step is a lookup by primary
/// key whatever the planner guesses of a batch's size: with `IN (…)` and a generic plan (the limit unknown), it
/// joined the candidates to a scan of the whole queue and the claim went five times slower. The candidates'
/// status is checked again (an item changed since the claim statement's snapshot, re-read under its lock, must
/// not be claimed unless still queued) through a `CASE`, which no partial index's `status = 'queued'` predicate
/// matches: on tables without statistics the planner otherwise intersected the primary key with a whole partial
/// index of the queue.
///
/// Why the candidates are a materialised `WITH` (ADR 0008, amendment 2026-12-05): PostgreSQL's re-read of a row
/// updated since the statement began (its recheck) evaluates again any init plan the rechecked scan depends on,
/// and with the candidates in one (`= ANY ((SELECT …)::uuid[])`) a fifth of the claims of 8 back-to-back
/// claimers computed them twice. The recheck keeps a copy of the row of each `FROM` item it does not lock (here
/// one id of `c`) instead, and a materialised `WITH` is computed once whatever the join order (a subquery on the
/// inner side of a nested loop would be run again for each outer row). The array is unnested in a `WITH` of its
/// own: `unnest(almanac_claim_candidates(…))` written in one expression makes the planner call the function once
/// more for each custom plan, to estimate `unnest`'s rows from constant arguments. Test:
/// `a_claim_that_meets_a_row_changed_since_it_began_computes_its_candidates_once`.
/// `$served` is the served user, or NULL for every config. The placeholders appear in the order of their numbers,
/// so the statement's parameters keep them (the store's statements number theirs by appearance).
macro_rules! claim_sql {
    ($served:literal) => {
        concat!(
            "UPDATE work_items AS w
   SET status = 'running',
       attempt = w.attempt + 1,
       worker_id = $1,
       started_at = now(),
       heartbeat_at = now(),
       lease_expires_at = now() + $2 * interval '1 second',
       claim_token = $3,
       progress = NULL
 WHERE w.id = ANY (ARRAY (
       WITH s AS MATERIALIZED (SELECT almanac_claim_candidates($4, ",
            $served,
            ", {limit}) AS ids),
            c AS MATERIALIZED (SELECT unnest(s.ids) AS id FROM s)
       SELECT q.id
         FROM c
         JOIN work_items AS q ON q.id = c.id
        WHERE CASE WHEN q.status = 'queued' THEN true END
        ORDER BY q.requested_at, q.id
        LIMIT {limit}
          FOR UPDATE OF q SKIP LOCKED))
RETURNING w.*"
        )
    };
}

/// The claim for a Worker serving every config.
const CLAIM_ALL: &str = claim_sql!("NULL::uuid");
/// The claim for a Worker serving one user's configs (`$5`).
const CLAIM_USER: &str = claim_sql!("$5");

/// The claim's text for a batch of `limit`. The limit is written into the text, not bound: a statement cached
/// with a generic plan for an unknown limit read the whole table (tens of times over, on misleading
/// statistics). So each batch size is its own prepared statement on a connection (a Worker uses a few: its
/// slot count and below).
fn claim_text(template: &str, limit: usize) -> String {
    template.replace("{limit}", &limit.max(1).to_string())
}

/// The claim of up to `limit` items on a connection of the caller's, e.g. inside an explicit transaction held
/// open to force the race that rule 2 covers (the caller then commits), or to read the statement as the
/// connection prepared it (`pg_prepared_statements`, the claim benchmark's `EXPLAIN`).
/// [`almanac_domain::WorkQueue::claim_many`] runs it as a transaction of its own whose commit it awaits (see
/// `claim`). For tests and benchmarks only (feature `test-support`).
#[cfg(feature = "test-support")]
#[mutants::skip]
pub async fn claim_with(
    conn: &mut diesel_async::AsyncPgConnection,
    request: &ClaimRequest,
    limit: usize,
) -> Result<Vec<ClaimedItem>, QueueError> {
    match statement(conn, request, limit, uuid::Uuid::new_v4()).await {
        Ok(rows) => items(rows),
        Err(e) if lost_race(&e) => Ok(Vec::new()),
        Err(e) => Err(error::queue(e)),
    }
}

/// How many configs the transaction open on `conn` has taken for its claims: the advisory locks its session holds
/// (`almanac_claim_candidates`, migration 000027; the store's only other lock of that kind, a catalogue write's
/// path lock, is never taken in a claim's transaction). A claim of `n` takes at most `n + 32`. For tests (feature
/// `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub async fn configs_taken(conn: &mut diesel_async::AsyncPgConnection) -> Result<i64, DieselError> {
    #[derive(diesel::QueryableByName)]
    struct Held {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        held: i64,
    }
    let held =
        "SELECT count(*) AS held FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted";
    Ok(diesel::sql_query(held).get_result::<Held>(conn).await?.held)
}

/// A claim of up to `limit` items whose commit is awaited: a claim acknowledged is a claim committed, so no
/// handler ever runs an item that is still queued (whose next claim would reuse its attempt number).
///
/// In session mode the claim is its own implicit transaction: one round trip, committed by the server at the
/// protocol's `Sync`, before the `ReadyForQuery` that ends its answer. Its `COMMIT`'s round trip was most of a
/// claim's latency with several claimers on a busy machine (ADR 0008, amendment "a claim given up on is handed
/// back"). Such a claim commits whatever its caller does once sent, so a caller that gives up before the answer
/// (a timeout, a dropped task) leaves a hand-back behind ([`PgStore::sent_alone`]'s [`Abandoned`]): the claim's
/// items, known by the token the claim was given, are handed back on the same connection, after the claim, as a
/// release hands an item back. Behind a pooler in transaction mode (the limits set per transaction) the claim
/// keeps its explicit transaction, its `BEGIN` pipelined with it (`tx::begun_with`); given up on, it commits
/// nothing.
pub(super) async fn claim(
    store: &PgStore,
    request: &ClaimRequest,
    limit: usize,
) -> Result<Vec<ClaimedItem>, QueueError> {
    let token = uuid::Uuid::new_v4();
    let tracker = store.hand_backs.clone();
    // Given up on before its answer: the claim's items handed back on its own connection, in a task of its own (so
    // the server runs it after the claim and its commit), which a process about to stop waits for
    // (`PgStore::hand_backs_settled`). Without a runtime to run it on, or when the task is cut short all the same,
    // the connection is closed and the items run again when their lease ends, as after a crash.
    let given_up: Abandoned = Box::new(move |mut conn| match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            tracker.spawn_on(async move { hand_back(&mut conn, token).await }, &runtime);
        }
        Err(_) => hand_back_failed(&"no runtime to run it on"),
    });
    let (mut conn, answer) = store
        .sent_alone(Lane::Shared, async |conn| statement(&mut { conn }, request, limit, token).await, given_up)
        .await?;
    let session = conn.begin_sql().is_none();
    if session && answer.is_err() && !diesel_async::pooled_connection::PoolableConnection::is_broken(&mut *conn) {
        // The server may have committed the claim before the error (a row that failed to decode): its items are
        // handed back; a claim that rolled back has none to hand back. On a connection that is gone, a commit
        // whose answer was lost is a stall, as for any write. Behind a pooler the claim's own transaction rolled
        // back.
        hand_back(&mut conn, token).await;
    }
    match answer {
        Ok(rows) => taken(store, rows),
        Err(e) if lost_race(&e) => Ok(Vec::new()),
        Err(e) => Err(placed(&mut conn, e).await.into()),
    }
}

/// Hands back the items of the claim whose token is `token`, if it took any: queued again as a release leaves
/// an item (due now, first in line, its attempt number used), on the claim's own connection.
async fn hand_back(conn: &mut diesel_async::AsyncPgConnection, token: uuid::Uuid) {
    let sql = format!("UPDATE work_items AS w SET {} WHERE w.claim_token = $1 AND w.status = 'running'", released());
    match diesel::sql_query(sql).bind::<diesel::sql_types::Uuid, _>(token).execute(conn).await {
        Ok(0) => {}
        Ok(items) => tracing::info!(
            event = "claim_handed_back",
            items,
            "a claim given up on before its answer was handed back; its items are queued again"
        ),
        Err(e) => hand_back_failed(&e),
    }
}

/// A claim given up on could not be handed back: its items run again when their lease ends.
pub(crate) fn hand_back_failed(error: &dyn std::fmt::Display) {
    tracing::warn!(
        event = "claim_hand_back_failed",
        error = %error,
        "a claim given up on could not be handed back; its items run again when their lease ends"
    );
}

/// The claim statement for up to `limit` items: the claimed rows, oldest first, each given `token` (the claim's
/// own, drawn by the caller: what a hand-back finds them by). On a connection of its own
/// (`&mut AsyncPgConnection`, inside a transaction already open) or a shared one (`&AsyncPgConnection`,
/// pipelined after its `BEGIN`).
pub(super) async fn statement<C>(
    conn: &mut C,
    request: &ClaimRequest,
    limit: usize,
    token: uuid::Uuid,
) -> Result<Vec<WorkItemRow>, DieselError>
where
    C: AsyncConnectionCore<Backend = Pg> + Send,
{
    let template = match request.served {
        ServedConfigs::All => CLAIM_ALL,
        ServedConfigs::User(_) => CLAIM_USER,
    };
    let sql = claim_text(template, limit);
    let mut rows: Vec<WorkItemRow> = Prepared::new(&sql, claim_binds(request, token)).load(conn).await?;
    rows.sort_by_key(|r| (r.requested_at, r.id));
    Ok(rows)
}

/// The claim's values as its statement binds them: `$1` the worker, `$2` the lease in seconds, `$3` the claim's
/// token, `$4` the kinds, and `$5` the served user when the Worker serves one. Public for benchmarks that bind a
/// claim of their own as the store binds its (the claim benchmark's floor); the store's only use is [`statement`].
pub fn claim_binds(request: &ClaimRequest, token: uuid::Uuid) -> Vec<Bind<'_>> {
    let kinds: Vec<String> = request.kinds.iter().map(|k| k.as_str().to_owned()).collect();
    let mut binds = vec![
        Bind::Text(request.worker_id.as_str()),
        Bind::Double(seconds(request.lease)),
        Bind::Uuid(token),
        Bind::TextArray(kinds),
    ];
    if let ServedConfigs::User(user) = request.served {
        binds.push(Bind::Uuid(user.as_uuid()));
    }
    binds
}

/// Rule 2: a writer that bypasses the claim (it takes no config lock: a hand-written update, a tool) set an item
/// of one of the same configs running first, and the running-config index refused this claim. Two claims never
/// meet on a config (each takes it first), so this points at such a writer. This Worker waits for its next poll.
pub(super) fn lost_race(e: &DieselError) -> bool {
    let lost = error::is_unique_violation_of(e, RUNNING_CONFIG_INDEX);
    if lost {
        tracing::info!(
            event = "lost_race",
            "a writer outside the claim set an item of the same storage config running first; nothing claimed"
        );
    }
    lost
}

/// What a store's claim took (alone or after completions), as the port answers it: counted for the heads' upkeep
/// (`super::upkeep`), then [`items`].
pub(super) fn taken(store: &PgStore, rows: Vec<WorkItemRow>) -> Result<Vec<ClaimedItem>, QueueError> {
    store.heads_claimed(rows.len());
    items(rows)
}

/// The claimed rows as the port answers them, each with the fence of its claim: the item, the attempt number and
/// the token the claim set.
fn items(rows: Vec<WorkItemRow>) -> Result<Vec<ClaimedItem>, QueueError> {
    rows.into_iter()
        .map(|row| {
            let claim = row.claim_token.map(ClaimToken::from_uuid).ok_or_else(|| {
                QueueError::Unexpected(format!("work item {} was claimed without a claim token", row.id).into())
            })?;
            let item = WorkItem::try_from(row)?;
            let attempt = Attempt::new(item.attempt).map_err(|e| QueueError::Unexpected(e.to_string().into()))?;
            Ok(ClaimedItem { fence: Fence::new(item.id, attempt, claim), item })
        })
        .collect()
}
