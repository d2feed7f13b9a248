//! The work queue's statements (ADR 0008). They are PostgreSQL-only (SKIP LOCKED, partial unique indexes,
//! `now()` as the one clock), so they carry `#[mutants::skip]` and are covered by the contract tests named in
//! ADR 0005.

use std::str::FromStr;

use almanac_domain::{
    Attempt, CancelOutcome, ClaimRequest, ClaimedItem, CompletedMany, Completion, DedupKey, Enqueued, FailOutcome,
    Failure, Fence, Heartbeat, LeaseDuration, NewWorkItem, QueueError, Recovered, Scope, ServedConfigs, Status,
    StorageConfigId, WorkItem, WorkItemId, WorkKind, WorkQueue, WorkerId, WriteOutcome,
};
use chrono::{DateTime, Utc};
use diesel::pg::Pg;
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::sql_types::{Array, BigInt, Bool, Integer, Jsonb, Nullable, Text, Timestamptz, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use crate::PgStore;
use crate::error::{self, Placed, RUNNING_CONFIG_INDEX};
use crate::prepared::{Bind, Prepared};

#[derive(QueryableByName)]
pub(crate) struct WorkItemRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Nullable<Uuid>)]
    storage_config_id: Option<uuid::Uuid>,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Jsonb)]
    payload: serde_json::Value,
    #[diesel(sql_type = Nullable<Text>)]
    dedup_key: Option<String>,
    #[diesel(sql_type = Timestamptz)]
    requested_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    run_after: DateTime<Utc>,
    #[diesel(sql_type = Integer)]
    attempt: i32,
    #[diesel(sql_type = Integer)]
    failures: i32,
    #[diesel(sql_type = Integer)]
    stalls: i32,
    #[diesel(sql_type = Integer)]
    max_attempts: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    lease_expires_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    worker_id: Option<String>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    started_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    heartbeat_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    finished_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    cancel_requested_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    progress: Option<serde_json::Value>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    result: Option<serde_json::Value>,
}

impl TryFrom<WorkItemRow> for WorkItem {
    type Error = QueueError;
    fn try_from(r: WorkItemRow) -> Result<Self, QueueError> {
        let bad = |e: almanac_domain::DomainError| QueueError::Unexpected(format!("work item {}: {e}", r.id));
        Ok(WorkItem {
            id: WorkItemId::from_uuid(r.id),
            kind: WorkKind::from_str(&r.kind).map_err(bad)?,
            scope: Scope::from(r.storage_config_id.map(StorageConfigId::from_uuid)),
            status: Status::from_str(&r.status).map_err(bad)?,
            payload: r.payload,
            dedup_key: r.dedup_key.map(DedupKey::new).transpose().map_err(bad)?,
            requested_at: r.requested_at,
            run_after: r.run_after,
            attempt: r.attempt,
            failures: r.failures,
            stalls: r.stalls,
            max_attempts: r.max_attempts,
            lease_expires_at: r.lease_expires_at,
            worker_id: r.worker_id.map(WorkerId::new).transpose().map_err(bad)?,
            started_at: r.started_at,
            heartbeat_at: r.heartbeat_at,
            finished_at: r.finished_at,
            cancel_requested_at: r.cancel_requested_at,
            last_error: r.last_error,
            progress: r.progress,
            result: r.result,
        })
    }
}

const ENQUEUE: &str = "\
INSERT INTO work_items (id, kind, storage_config_id, payload, dedup_key, run_after, max_attempts)
VALUES ($1, $2, $3, $4, $5, COALESCE($6, now()), $7)
ON CONFLICT (dedup_key) WHERE status = 'queued' DO NOTHING
RETURNING *";

/// The enqueue statement for `item` under `id` (a queued item with the same dedup key wins: nothing inserted).
pub(crate) fn enqueue_query(id: WorkItemId, item: &NewWorkItem) -> Prepared<'_> {
    Prepared::new(
        ENQUEUE,
        vec![
            Bind::Uuid(id.as_uuid()),
            Bind::Text(item.kind().as_str()),
            Bind::NullableUuid(item.scope().storage_config().map(|c| c.as_uuid())),
            Bind::Jsonb(&item.payload),
            Bind::NullableText(item.dedup_key.as_ref().map(|k| k.as_str())),
            Bind::NullableTimestamptz(item.run_after),
            Bind::Integer(item.max_attempts()),
        ],
    )
}

/// The batch enqueue: one row per array element, inserted in the arrays' order (ids are time-ordered, so the
/// claim order within one `requested_at` follows it too); a queued item with the same dedup key wins, an
/// earlier element of the same batch included.
const ENQUEUE_MANY: &str = "\
INSERT INTO work_items (id, kind, storage_config_id, payload, dedup_key, run_after, max_attempts)
SELECT i.id, i.kind, i.config, i.payload, i.dedup_key, COALESCE(i.run_after, now()), i.max_attempts
  FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::jsonb[], $5::text[], $6::timestamptz[], $7::integer[])
       WITH ORDINALITY AS i(id, kind, config, payload, dedup_key, run_after, max_attempts, n)
 ORDER BY i.n
ON CONFLICT (dedup_key) WHERE status = 'queued' DO NOTHING
RETURNING *";

/// Items per batch statement: bounds the statement's size, not the caller's batch.
const ENQUEUE_MANY_CHUNK: usize = 5_000;

/// The batch enqueue statement for `items` under `ids` (same length).
pub(crate) fn enqueue_many_query<'a>(
    ids: &[WorkItemId],
    items: impl Iterator<Item = &'a NewWorkItem> + Clone,
) -> BoxedSqlQuery<'static, Pg, SqlQuery> {
    sql_query(ENQUEUE_MANY)
        .into_boxed()
        .bind::<Array<Uuid>, _>(ids.iter().map(|id| id.as_uuid()).collect::<Vec<_>>())
        .bind::<Array<Text>, _>(items.clone().map(|i| i.kind().as_str().to_owned()).collect::<Vec<_>>())
        .bind::<Array<Nullable<Uuid>>, _>(
            items.clone().map(|i| i.scope().storage_config().map(|c| c.as_uuid())).collect::<Vec<_>>(),
        )
        .bind::<Array<Jsonb>, _>(items.clone().map(|i| i.payload.clone()).collect::<Vec<_>>())
        .bind::<Array<Nullable<Text>>, _>(
            items.clone().map(|i| i.dedup_key.as_ref().map(|k| k.as_str().to_owned())).collect::<Vec<_>>(),
        )
        .bind::<Array<Nullable<Timestamptz>>, _>(items.clone().map(|i| i.run_after).collect::<Vec<_>>())
        .bind::<Array<Integer>, _>(items.map(NewWorkItem::max_attempts).collect::<Vec<_>>())
}

const QUEUED_BY_DEDUP_KEY: &str = "SELECT * FROM work_items WHERE dedup_key = $1 AND status = 'queued'";

/// Rule 1: one statement under READ COMMITTED. The candidates are the oldest due unscoped items and the oldest
/// due item of each of the 32 oldest claimable configs (enough for 32 concurrent claimers to each find one:
/// SKIP LOCKED passes over the items the others hold) (`queue_heads`: active, queued work, nothing running, kept
/// by triggers in the same transactions that change `work_items`), so neither the number of configs nor a busy
/// config's backlog is ever scanned (ADR 0008, "claim cost"). They come from `almanac_claim_candidates`
/// (migration 000009), which always plans them as walks of queued indexes in order, whatever the statistics say.
/// Rule 2 (the running-config index) rejects a racing second claim of one config.
///
/// It claims up to `{limit}` items at once (see [`claim_text`]): the candidates hold at most one item per config
/// (one per head, and unscoped items have none), so a batch never holds two items of one config. The
/// candidates, and then the claimed ids, are handed on as arrays computed once (`= ANY ((SELECT …)::uuid[])`,
/// `= ANY (ARRAY (…))`: init plans, not filters evaluated row by row), so each step is a lookup by primary key
/// whatever the planner guesses of a batch's size: with `IN (…)` and a generic plan (the limit unknown), it
/// joined the candidates to a scan of the whole queue and the claim went five times slower. The candidates'
/// status is checked again (an item claimed since they were read, re-read under its lock, must not be claimed
/// twice) through a `CASE`, which no partial index's `status = 'queued'` predicate matches: on tables without
/// statistics the planner otherwise intersected the primary key with a whole partial index of the queue.
/// `$served` is the served user, or NULL for every config.
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
       progress = NULL
 WHERE w.id = ANY (ARRAY (
       SELECT q.id
         FROM work_items AS q
        WHERE q.id = ANY ((SELECT almanac_claim_candidates($3, ",
            $served,
            "))::uuid[])
          AND CASE WHEN q.status = 'queued' THEN true END
        ORDER BY q.requested_at, q.id
        LIMIT {limit}
          FOR UPDATE SKIP LOCKED))
RETURNING w.*"
        )
    };
}

/// The claim for a Worker serving every config.
const CLAIM_ALL: &str = claim_sql!("NULL::uuid");
/// The claim for a Worker serving one user's configs (`$4`).
const CLAIM_USER: &str = claim_sql!("$4");

/// The claim's text for a batch of `limit`. The limit is written into the text, not bound: a statement cached
/// with a generic plan for an unknown limit read the whole table (tens of times over, on misleading
/// statistics). So each batch size is its own prepared statement on a connection (a Worker uses a few: its
/// slot count and below).
fn claim_text(template: &str, limit: usize) -> String {
    template.replace("{limit}", &limit.max(1).to_string())
}

const FENCE: &str = "w.id = $1 AND w.attempt = $2 AND w.status = 'running'";

/// How long the claim that follows a completion waits for any one lock before it gives up (nothing claimed).
const CHAINED_CLAIM_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Marks the fenced attempt's item succeeded with its result (`$3`).
fn complete_sql() -> String {
    format!(
        "UPDATE work_items AS w
            SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL, result = $3
          WHERE {FENCE}"
    )
}

/// Marks each fenced attempt of the arrays (`$1` ids, `$2` attempts, `$3` results) succeeded; answers the
/// `(id, attempt)` of each row written. Each row is fenced on its own, exactly as [`complete_sql`] fences one.
const COMPLETE_MANY: &str = "\
UPDATE work_items AS w
   SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL, result = d.result
  FROM unnest($1::uuid[], $2::integer[], $3::jsonb[]) AS d(id, attempt, result)
 WHERE w.id = d.id AND w.attempt = d.attempt AND w.status = 'running'
RETURNING w.id, w.attempt";

#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Integer)]
    attempt: i32,
}

/// The values of [`FENCE`]'s `$1` and `$2`.
fn fence_binds<'a>(fence: Fence) -> Vec<Bind<'a>> {
    vec![Bind::Uuid(fence.id.as_uuid()), Bind::Integer(fence.attempt.get())]
}

/// Whether a failing attempt's item is retried: retryable, under its budget, and no cancel requested. Read from
/// the row being updated, so a cancel requested at that very moment is seen (a subquery's snapshot would not
/// be re-read when the update waits for the cancel's row lock).
const RETRY: &str = "($4::boolean AND w.failures + 1 < w.max_attempts AND w.cancel_requested_at IS NULL)";

/// Requeuing must not collide with a newer queued item of the same dedup key: the requeued item drops its key
/// and both stay (nothing is lost; the work may run twice).
const REQUEUE_DEDUP_KEY: &str = "CASE WHEN EXISTS (SELECT 1 FROM work_items AS o
       WHERE o.dedup_key = w.dedup_key AND o.status = 'queued' AND o.id <> w.id) THEN NULL ELSE w.dedup_key END";

#[derive(QueryableByName)]
struct CancelRequested {
    #[diesel(sql_type = Bool)]
    cancel_requested: bool,
}

#[derive(QueryableByName)]
struct StatusRow {
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Timestamptz)]
    run_after: DateTime<Utc>,
}

#[derive(QueryableByName)]
struct RecoveredRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Integer)]
    stalls: i32,
}

fn seconds(lease: LeaseDuration) -> f64 {
    lease.get().as_secs_f64()
}

fn parse_status(s: &str) -> Result<Status, QueueError> {
    Status::from_str(s).map_err(|e| QueueError::Unexpected(e.to_string()))
}

/// The claim on a connection of the caller's, e.g. inside an explicit transaction held open to force the
/// race that rule 2 covers (the caller then commits). [`PgStore::claim`] runs it in a transaction of its own
/// whose commit it awaits. For tests only (feature `test-support`).
#[cfg(feature = "test-support")]
#[mutants::skip]
pub async fn claim_with(
    conn: &mut AsyncPgConnection,
    request: &ClaimRequest,
) -> Result<Option<ClaimedItem>, QueueError> {
    claimed(claim_statement(conn, request, 1).await).map(|claimed| claimed.into_iter().next())
}

/// The claim statement for up to `limit` items: the claimed rows, oldest first.
async fn claim_statement(
    conn: &mut AsyncPgConnection,
    request: &ClaimRequest,
    limit: usize,
) -> Result<Vec<WorkItemRow>, diesel::result::Error> {
    let kinds: Vec<String> = request.kinds.iter().map(|k| k.as_str().to_owned()).collect();
    let user = match request.served {
        ServedConfigs::All => None,
        ServedConfigs::User(user) => Some(user.as_uuid()),
    };
    let mut binds =
        vec![Bind::Text(request.worker_id.as_str()), Bind::Double(seconds(request.lease)), Bind::TextArray(kinds)];
    binds.extend(user.map(Bind::Uuid));
    let sql = claim_text(if user.is_some() { CLAIM_USER } else { CLAIM_ALL }, limit);
    let mut rows: Vec<WorkItemRow> = Prepared::new(&sql, binds).load(conn).await?;
    rows.sort_by_key(|r| (r.requested_at, r.id));
    Ok(rows)
}

/// What a claim's statement (and its commit) came to.
fn claimed(outcome: Result<Vec<WorkItemRow>, diesel::result::Error>) -> Result<Vec<ClaimedItem>, QueueError> {
    let rows = match outcome {
        Ok(rows) => rows,
        // Rule 2: a concurrent claim of one of the same configs won; this Worker waits for its next poll.
        Err(e) if error::is_unique_violation_of(&e, RUNNING_CONFIG_INDEX) => {
            tracing::info!(event = "lost_race", "another Worker claimed work of the same storage config first");
            return Ok(Vec::new());
        }
        Err(e) => return Err(error::queue(e)),
    };
    rows.into_iter()
        .map(|row| {
            let item = WorkItem::try_from(row)?;
            let attempt = Attempt::new(item.attempt).map_err(|e| QueueError::Unexpected(e.to_string()))?;
            Ok(ClaimedItem { fence: Fence { id: item.id, attempt }, item })
        })
        .collect()
}

/// One try of an enqueue on `conn`: the new row, or the row queued under the same dedup key, or `None` when that
/// row was claimed between the insert and the read (try again).
async fn enqueue_once_on(
    conn: &mut AsyncPgConnection,
    item: &NewWorkItem,
) -> Result<Option<(WorkItemRow, bool)>, diesel::result::Error> {
    match enqueue_query(WorkItemId::new(), item).get_result::<WorkItemRow>(conn).await {
        Ok(row) => return Ok(Some((row, true))),
        Err(diesel::result::Error::NotFound) => {}
        Err(e) => return Err(e),
    }
    let key = item.dedup_key.as_ref().map(|k| k.as_str()).unwrap_or_default();
    let existing: Vec<WorkItemRow> = sql_query(QUEUED_BY_DEDUP_KEY).bind::<Text, _>(key).load(conn).await?;
    Ok(existing.into_iter().next().map(|row| (row, false)))
}

/// A cancel request on `conn` (see [`WorkQueue::request_cancel`]).
async fn cancel_on(
    conn: &mut AsyncPgConnection,
    id: WorkItemId,
) -> Result<Result<CancelOutcome, QueueError>, diesel::result::Error> {
    let current: Vec<StatusRow> = sql_query("SELECT status, run_after FROM work_items WHERE id = $1 FOR NO KEY UPDATE")
        .bind::<Uuid, _>(id.as_uuid())
        .load(conn)
        .await?;
    let Some(row) = current.into_iter().next() else { return Ok(Ok(CancelOutcome::NotFound)) };
    let status = match parse_status(&row.status) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let (sql, outcome) = match status {
        Status::Queued => (
            "UPDATE work_items SET status = 'cancelled', finished_at = now(), cancel_requested_at = now()
              WHERE id = $1",
            CancelOutcome::Cancelled,
        ),
        Status::Running => (
            "UPDATE work_items SET cancel_requested_at = COALESCE(cancel_requested_at, now()) WHERE id = $1",
            CancelOutcome::Requested,
        ),
        finished => return Ok(Ok(CancelOutcome::AlreadyFinished(finished))),
    };
    sql_query(sql).bind::<Uuid, _>(id.as_uuid()).execute(conn).await?;
    Ok(Ok(outcome))
}

/// Enqueues work on a connection of the caller's, inside the caller's transaction: the item exists exactly when
/// that transaction commits (the web backend writes its own rows and enqueues their work atomically). Answers as
/// [`WorkQueue::enqueue`] does.
#[mutants::skip]
pub async fn enqueue_in(conn: &mut AsyncPgConnection, item: &NewWorkItem) -> Result<Enqueued, QueueError> {
    for _ in 0..5 {
        if let Some((row, created)) = enqueue_once_on(conn, item).await.map_err(error::queue)? {
            return Ok(Enqueued { item: row.try_into()?, created });
        }
    }
    Err(QueueError::Unexpected("enqueue kept racing with claims of the same dedup key".into()))
}

/// Requests a cancel on a connection of the caller's, inside the caller's transaction; answers as
/// [`WorkQueue::request_cancel`] does.
#[mutants::skip]
pub async fn request_cancel_in(conn: &mut AsyncPgConnection, id: WorkItemId) -> Result<CancelOutcome, QueueError> {
    cancel_on(conn, id).await.map_err(error::queue)?
}

impl PgStore {
    /// A fenced write of the attempt's own: on a reserved connection, in an explicit transaction whose
    /// commit is awaited (acknowledged means committed: a backend killed before the commit is an error here,
    /// never a silent rollback).
    async fn fenced_write(&self, sql: String, fence: Fence) -> Result<WriteOutcome, QueueError> {
        let mut conn = self.attempt_conn().await?;
        let rows = conn
            .transaction::<_, diesel::result::Error, _>(async |conn| {
                Prepared::new(&sql, fence_binds(fence)).execute(conn).await
            })
            .await
            .placed(&mut conn)
            .await
            .map_err(QueueError::from)?;
        Ok(if rows == 1 { WriteOutcome::Written } else { WriteOutcome::Lost })
    }
}

/// Deletes up to `batch` finished items: succeeded or cancelled before `done_before`, failed before
/// `failed_before`; never a queued or running one.
pub(crate) fn delete_finished_query(
    done_before: DateTime<Utc>,
    failed_before: DateTime<Utc>,
    batch: i64,
) -> BoxedSqlQuery<'static, Pg, SqlQuery> {
    sql_query(
        "DELETE FROM work_items WHERE id IN (
            SELECT id FROM work_items
             WHERE (status IN ('succeeded', 'cancelled') AND finished_at < $1)
                OR (status = 'failed' AND finished_at < $2)
             ORDER BY finished_at
             LIMIT $3
               FOR UPDATE SKIP LOCKED)",
    )
    .into_boxed()
    .bind::<Timestamptz, _>(done_before)
    .bind::<Timestamptz, _>(failed_before)
    .bind::<BigInt, _>(batch)
}

impl WorkQueue for PgStore {
    #[mutants::skip]
    async fn enqueue(&self, item: &NewWorkItem) -> Result<Enqueued, QueueError> {
        let mut conn = self.conn().await?;
        // An existing queued item may be claimed between the insert and the read: try again, a few times.
        // Each try is a transaction whose commit is awaited: an acknowledged enqueue is a committed one.
        for _ in 0..5 {
            let found = conn
                .transaction::<_, diesel::result::Error, _>(async |conn| enqueue_once_on(conn, item).await)
                .await
                .placed(&mut conn)
                .await
                .map_err(QueueError::from)?;
            if let Some((row, created)) = found {
                return Ok(Enqueued { item: row.try_into()?, created });
            }
        }
        Err(QueueError::Unexpected("enqueue kept racing with claims of the same dedup key".into()))
    }

    #[mutants::skip]
    async fn enqueue_many(&self, items: &[NewWorkItem]) -> Result<Vec<Enqueued>, QueueError> {
        let mut out: Vec<Option<Enqueued>> = (0..items.len()).map(|_| None).collect();
        let mut conn = self.conn().await?;
        for start in (0..items.len()).step_by(ENQUEUE_MANY_CHUNK) {
            let mut pending: Vec<usize> = (start..items.len().min(start + ENQUEUE_MANY_CHUNK)).collect();
            // As in `enqueue`: an item already queued may be claimed between the insert and the read; those
            // are tried again, a few times. Each try is one transaction whose commit is awaited.
            for _ in 0..5 {
                if pending.is_empty() {
                    break;
                }
                let ids: Vec<WorkItemId> = pending.iter().map(|_| WorkItemId::new()).collect();
                let (inserted, existing) = conn
                    .transaction::<_, diesel::result::Error, _>(async |conn| {
                        let inserted: Vec<WorkItemRow> =
                            enqueue_many_query(&ids, pending.iter().map(|&i| &items[i])).load(conn).await?;
                        let new: std::collections::HashSet<uuid::Uuid> = inserted.iter().map(|r| r.id).collect();
                        let keys: Vec<String> = pending
                            .iter()
                            .zip(&ids)
                            .filter(|(_, id)| !new.contains(&id.as_uuid()))
                            .filter_map(|(&i, _)| items[i].dedup_key.as_ref().map(|k| k.as_str().to_owned()))
                            .collect();
                        let existing: Vec<WorkItemRow> = if keys.is_empty() {
                            Vec::new()
                        } else {
                            sql_query("SELECT * FROM work_items WHERE status = 'queued' AND dedup_key = ANY($1)")
                                .bind::<Array<Text>, _>(keys)
                                .load(conn)
                                .await?
                        };
                        Ok((inserted, existing))
                    })
                    .await
                    .placed(&mut conn)
                    .await
                    .map_err(QueueError::from)?;
                let mut inserted: std::collections::HashMap<uuid::Uuid, WorkItemRow> =
                    inserted.into_iter().map(|r| (r.id, r)).collect();
                let mut by_key: std::collections::HashMap<DedupKey, WorkItem> = std::collections::HashMap::new();
                for row in existing {
                    let item = WorkItem::try_from(row)?;
                    if let Some(key) = item.dedup_key.clone() {
                        by_key.insert(key, item);
                    }
                }
                let mut again = Vec::new();
                for (&i, id) in pending.iter().zip(&ids) {
                    if let Some(row) = inserted.remove(&id.as_uuid()) {
                        out[i] = Some(Enqueued { item: row.try_into()?, created: true });
                    } else if let Some(item) = items[i].dedup_key.as_ref().and_then(|k| by_key.get(k)) {
                        out[i] = Some(Enqueued { item: item.clone(), created: false });
                    } else {
                        again.push(i);
                    }
                }
                pending = again;
            }
            if !pending.is_empty() {
                return Err(QueueError::Unexpected("enqueue kept racing with claims of the same dedup key".into()));
            }
        }
        Ok(out.into_iter().map(|e| e.expect("every item was answered")).collect())
    }

    #[mutants::skip]
    async fn claim(&self, request: &ClaimRequest) -> Result<Option<ClaimedItem>, QueueError> {
        let mut conn = self.conn().await?;
        // In a transaction whose commit is awaited: a claim acknowledged is a claim committed, so no handler
        // ever runs an item that is still queued (whose next claim would reuse its attempt number).
        claimed(conn.transaction(async |conn| claim_statement(conn, request, 1).await).await)
            .map(|claimed| claimed.into_iter().next())
    }

    #[mutants::skip]
    async fn claim_many(&self, request: &ClaimRequest, limit: usize) -> Result<Vec<ClaimedItem>, QueueError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        claimed(conn.transaction(async |conn| claim_statement(conn, request, limit).await).await)
    }

    #[mutants::skip]
    async fn heartbeat(
        &self,
        fence: Fence,
        lease: LeaseDuration,
        progress: Option<&serde_json::Value>,
    ) -> Result<Heartbeat, QueueError> {
        let mut conn = self.attempt_conn().await?;
        let sql = format!(
            "UPDATE work_items AS w
                SET heartbeat_at = now(),
                    lease_expires_at = now() + $3 * interval '1 second',
                    progress = COALESCE($4, w.progress)
              WHERE {FENCE}
          RETURNING w.cancel_requested_at IS NOT NULL AS cancel_requested"
        );
        let renewed: Vec<CancelRequested> = conn
            .transaction::<_, diesel::result::Error, _>(async |conn| {
                let mut binds = fence_binds(fence);
                binds.extend([Bind::Double(seconds(lease)), Bind::NullableJsonb(progress)]);
                Prepared::new(&sql, binds).load(conn).await
            })
            .await
            .placed(&mut conn)
            .await
            .map_err(QueueError::from)?;
        Ok(match renewed.into_iter().next() {
            Some(r) => Heartbeat::Renewed { cancel_requested: r.cancel_requested },
            None => Heartbeat::Lost,
        })
    }

    #[mutants::skip]
    async fn complete_many_and_claim(
        &self,
        done: &[Completion<'_>],
        next: &ClaimRequest,
        claim: usize,
    ) -> Result<CompletedMany, QueueError> {
        let mut conn = self.attempt_conn().await?;
        let ids: Vec<uuid::Uuid> = done.iter().map(|(fence, _)| fence.id.as_uuid()).collect();
        let attempts: Vec<i32> = done.iter().map(|(fence, _)| fence.attempt.get()).collect();
        let results: Vec<Option<&serde_json::Value>> = done.iter().map(|(_, result)| *result).collect();
        let (written, next) = conn
            .transaction::<_, diesel::result::Error, _>(async |conn| {
                let binds = vec![Bind::UuidArray(ids), Bind::IntegerArray(attempts), Bind::NullableJsonbArray(results)];
                let written: Vec<IdRow> = Prepared::new(COMPLETE_MANY, binds).load(conn).await?;
                if claim == 0 {
                    return Ok((written, Ok(Vec::new())));
                }
                // The claim waits for no lock longer than CHAINED_CLAIM_LOCK_WAIT (set after the completions, so
                // it alone is bounded): it would otherwise hold these completions hostage to other configs'
                // locks, and a transaction enqueueing into several configs could wait on it in a cycle.
                // In a savepoint: a claim that fails (a lost race on the running-config index, or a lock it
                // would not wait for) is rolled back alone, and the completions still commit. Both in one
                // round trip; the savepoint needs no release (the commit ends it).
                conn.batch_execute(&format!(
                    "SET LOCAL lock_timeout = '{}ms'; SAVEPOINT chained_claim",
                    CHAINED_CLAIM_LOCK_WAIT.as_millis()
                ))
                .await?;
                let next = claim_statement(conn, next, claim).await;
                if next.is_err() {
                    conn.batch_execute("ROLLBACK TO SAVEPOINT chained_claim").await?;
                }
                Ok((written, next))
            })
            .await
            .placed(&mut conn)
            .await
            .map_err(QueueError::from)?;
        // Matched on (id, attempt): a batch may hold a stale attempt's completion beside the current one's.
        let written: std::collections::HashSet<(uuid::Uuid, i32)> =
            written.into_iter().map(|r| (r.id, r.attempt)).collect();
        let written = done
            .iter()
            .map(|(fence, _)| match written.contains(&(fence.id.as_uuid(), fence.attempt.get())) {
                true => WriteOutcome::Written,
                false => WriteOutcome::Lost,
            })
            .collect();
        let next = match next {
            // Rule 2's lost race: nothing claimed, as in any claim.
            Err(e) if error::is_unique_violation_of(&e, RUNNING_CONFIG_INDEX) => claimed(Err(e)),
            // Anything else the server refused (a lock it would not wait for, above all) was rolled back to the
            // savepoint on a connection that still answered: nothing claimed this time, and the next poll's own
            // claim reports what persists. Told apart by where it happened, not by the server's words.
            Err(e) => {
                tracing::debug!(
                    event = "chained_claim_gave_up",
                    error = %e,
                    "the claim after a completion claimed nothing"
                );
                Ok(Vec::new())
            }
            ok => claimed(ok),
        };
        Ok(CompletedMany { written, next })
    }

    #[mutants::skip]
    async fn complete(&self, fence: Fence, result: Option<&serde_json::Value>) -> Result<WriteOutcome, QueueError> {
        let mut conn = self.attempt_conn().await?;
        let sql = complete_sql();
        let rows = conn
            .transaction::<_, diesel::result::Error, _>(async |conn| {
                let mut binds = fence_binds(fence);
                binds.push(Bind::NullableJsonb(result));
                Prepared::new(&sql, binds).execute(conn).await
            })
            .await
            .placed(&mut conn)
            .await
            .map_err(QueueError::from)?;
        Ok(if rows == 1 { WriteOutcome::Written } else { WriteOutcome::Lost })
    }

    #[mutants::skip]
    async fn fail(&self, fence: Fence, failure: &Failure) -> Result<FailOutcome, QueueError> {
        let mut conn = self.attempt_conn().await?;
        let sql = format!(
            "UPDATE work_items AS w
                SET failures = w.failures + 1,
                    last_error = $3,
                    status = CASE WHEN {RETRY} THEN 'queued'
                                  WHEN w.cancel_requested_at IS NOT NULL THEN 'cancelled'
                                  ELSE 'failed' END,
                    run_after = CASE WHEN {RETRY} THEN now() + $5 * interval '1 second' ELSE w.run_after END,
                    finished_at = CASE WHEN {RETRY} THEN NULL ELSE now() END,
                    lease_expires_at = NULL,
                    dedup_key = CASE WHEN {RETRY} THEN {REQUEUE_DEDUP_KEY} ELSE w.dedup_key END
              WHERE {FENCE}
          RETURNING w.status, w.run_after"
        );
        let rows: Vec<StatusRow> = conn
            .transaction::<_, diesel::result::Error, _>(async |conn| {
                let mut binds = fence_binds(fence);
                binds.extend([
                    Bind::Text(&failure.error),
                    Bind::Bool(failure.retryable),
                    Bind::Double(failure.retry_delay.as_secs_f64()),
                ]);
                Prepared::new(&sql, binds).load(conn).await
            })
            .await
            .placed(&mut conn)
            .await
            .map_err(QueueError::from)?;
        let Some(row) = rows.into_iter().next() else {
            return Ok(FailOutcome::Lost);
        };
        Ok(match parse_status(&row.status)? {
            Status::Queued => FailOutcome::RetryScheduled { run_after: row.run_after },
            Status::Cancelled => FailOutcome::Cancelled,
            _ => FailOutcome::Failed,
        })
    }

    #[mutants::skip]
    async fn mark_cancelled(&self, fence: Fence) -> Result<WriteOutcome, QueueError> {
        self.fenced_write(
            format!(
                "UPDATE work_items AS w
                    SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
                  WHERE {FENCE}"
            ),
            fence,
        )
        .await
    }

    #[mutants::skip]
    async fn release(&self, fence: Fence) -> Result<WriteOutcome, QueueError> {
        self.fenced_write(
            format!(
                "UPDATE work_items AS w
                    SET status = 'queued', lease_expires_at = NULL, run_after = now(),
                        dedup_key = {REQUEUE_DEDUP_KEY}
                  WHERE {FENCE}"
            ),
            fence,
        )
        .await
    }

    #[mutants::skip]
    async fn request_cancel(&self, id: WorkItemId) -> Result<CancelOutcome, QueueError> {
        let mut conn = self.conn().await?;
        conn.transaction::<_, diesel::result::Error, _>(async |conn| cancel_on(conn, id).await)
            .await
            .placed(&mut conn)
            .await
            .map_err(QueueError::from)?
    }

    #[mutants::skip]
    async fn recover_expired_leases(&self, max_stalls: i32) -> Result<Vec<Recovered>, QueueError> {
        let mut conn = self.conn().await?;
        // Items of one batch may share a dedup key (two running items can, unlike two queued ones). Requeued
        // together, each row's check for a queued holder of its key cannot see the others' new versions, so
        // the batch decides: only the oldest requeued item of each key keeps it, and only when no queued item
        // holds it already. Anything else would fail the whole statement on the dedup index, every tick.
        let recover = sql_query(
            "WITH expired AS (
                 SELECT e.id, e.dedup_key, e.requested_at,
                        e.cancel_requested_at IS NULL AND e.stalls + 1 < $1 AS requeue
                   FROM work_items AS e
                  WHERE e.status = 'running' AND e.lease_expires_at < now()
                  ORDER BY e.lease_expires_at
                  LIMIT 1000
                    FOR UPDATE SKIP LOCKED),
             decided AS (
                 SELECT x.id, x.requeue,
                        CASE WHEN NOT x.requeue THEN x.dedup_key
                             WHEN x.dedup_key IS NULL THEN NULL
                             WHEN EXISTS (SELECT 1 FROM work_items AS o
                                           WHERE o.dedup_key = x.dedup_key AND o.status = 'queued') THEN NULL
                             WHEN row_number() OVER (PARTITION BY x.dedup_key, x.requeue
                                                         ORDER BY x.requested_at, x.id) = 1 THEN x.dedup_key
                             ELSE NULL END AS dedup_key
                   FROM expired AS x)
             UPDATE work_items AS w
                SET stalls = w.stalls + 1,
                    status = CASE WHEN w.cancel_requested_at IS NOT NULL THEN 'cancelled'
                                  WHEN w.stalls + 1 >= $1 THEN 'failed'
                                  ELSE 'queued' END,
                    finished_at = CASE WHEN d.requeue THEN NULL ELSE now() END,
                    last_error = CASE WHEN w.cancel_requested_at IS NULL AND w.stalls + 1 >= $1
                                      THEN format('stalled: the lease expired %s times without a heartbeat (max_stalls is %s)', w.stalls + 1, $1)
                                      ELSE w.last_error END,
                    lease_expires_at = NULL,
                    run_after = now(),
                    dedup_key = d.dedup_key
               FROM decided AS d
              WHERE w.id = d.id
          RETURNING w.id, w.status, w.stalls",
        )
        .bind::<Integer, _>(max_stalls.max(1));
        // Committed before it is reported: a recovery is only logged (and counted) when it happened.
        let rows: Vec<RecoveredRow> = conn
            .transaction::<_, diesel::result::Error, _>(async |conn| recover.load(conn).await)
            .await
            .placed(&mut conn)
            .await
            .map_err(QueueError::from)?;
        rows.into_iter()
            .map(|r| {
                Ok(Recovered { id: WorkItemId::from_uuid(r.id), status: parse_status(&r.status)?, stalls: r.stalls })
            })
            .collect()
    }

    #[mutants::skip]
    async fn get(&self, id: WorkItemId) -> Result<Option<WorkItem>, QueueError> {
        let mut conn = self.conn().await?;
        let rows: Vec<WorkItemRow> = sql_query("SELECT * FROM work_items WHERE id = $1")
            .bind::<Uuid, _>(id.as_uuid())
            .load(&mut conn)
            .await
            .placed(&mut conn)
            .await
            .map_err(QueueError::from)?;
        rows.into_iter().next().map(WorkItem::try_from).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use almanac_domain::{UserId, WorkerId};
    use almanac_testdb::TestDatabase;

    #[derive(QueryableByName)]
    struct Plan {
        #[diesel(sql_type = Text)]
        plan: String,
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
             UPDATE work_items w SET status = 'running', attempt = 1, worker_id = 'busy',
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
             UPDATE work_items SET status = 'running', attempt = 1, worker_id = 'busy',
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
             UPDATE work_items SET status = 'running', attempt = 1, worker_id = 'busy',
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

    #[derive(QueryableByName)]
    struct Reads {
        #[diesel(sql_type = BigInt)]
        rows: i64,
    }

    /// Rows of work_items this transaction has read so far, its triggers included. The view also holds this
    /// session's counts not yet reported: compare two readings.
    async fn rows_read(conn: &mut AsyncPgConnection) -> i64 {
        let read = "SELECT coalesce(idx_tup_fetch, 0) + seq_tup_read AS rows
                      FROM pg_stat_xact_user_tables WHERE relname = 'work_items'";
        let rows: Vec<Reads> = sql_query(read).load(conn).await.unwrap();
        rows.iter().map(|r| r.rows).sum()
    }

    /// Claims eight items the way the store does (for all configs and for one user; with custom and with
    /// generic plans, for the statement and for the candidates' function), then completes them the way the
    /// store does, each in a transaction that is rolled back, and checks what the claim and the completion each
    /// read of work_items, their triggers (the heads' refresh) included, from the transaction's own statistics:
    /// some hundreds of rows, never a whole table or a whole backlog (hundreds to tens of thousands here).
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
            // no higher (forced generic plans are not covered: see ADR 0008, "batches").
            for mode in ["force_custom_plan", "auto"] {
                for _ in 0..6 {
                    conn.batch_execute(&format!("BEGIN; SET LOCAL plan_cache_mode = {mode}")).await.unwrap();
                    let before = rows_read(conn).await;
                    let claimed = claim_statement(conn, &request, 8).await.unwrap();
                    let claim = rows_read(conn).await - before;
                    assert_eq!(claimed.len(), 8, "eight items claimed, as asked ({served:?}, {mode})");
                    let before = rows_read(conn).await;
                    let written = complete_rows(conn, &claimed).await;
                    let completion = rows_read(conn).await - before;
                    conn.batch_execute("ROLLBACK").await.unwrap();
                    assert_eq!(written, 8, "the eight completed ({served:?}, {mode})");
                    assert!(claim < 2_000, "the claim read {claim} rows of work_items ({served:?}, {mode})");
                    assert!(
                        completion < 2_000,
                        "the completion read {completion} rows of work_items ({served:?}, {mode})"
                    );
                }
            }
        }
    }

    /// Completes `items` with the store's batched completion; the number of rows written.
    async fn complete_rows(conn: &mut AsyncPgConnection, items: &[WorkItemRow]) -> usize {
        let written: Vec<IdRow> = sql_query(COMPLETE_MANY)
            .bind::<Array<Uuid>, _>(items.iter().map(|i| i.id).collect::<Vec<_>>())
            .bind::<Array<Integer>, _>(items.iter().map(|i| i.attempt).collect::<Vec<_>>())
            .bind::<Array<Nullable<Jsonb>>, _>(vec![None::<serde_json::Value>; items.len()])
            .load(conn)
            .await
            .unwrap();
        written.len()
    }
}
