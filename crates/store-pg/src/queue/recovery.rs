//! What the queue does for items whose attempt is not running them: lease recovery (rule 4), cancel requests,
//! and deleting finished items (the retention handler's statement).

use almanac_domain::{CancelOutcome, QueueError, Status, WorkItemId, ports::Recovered};
use chrono::{DateTime, Utc};
use diesel::pg::Pg;
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::sql_types::{BigInt, Integer, Text, Timestamptz, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::row::{StatusRow, parse_status};
use crate::PgStore;
use crate::tx::Lane;

#[derive(QueryableByName)]
struct RecoveredRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Integer)]
    stalls: i32,
}

/// A cancel request on `conn` (see [`almanac_domain::WorkQueue::request_cancel`]).
pub(super) async fn cancel_on(
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

/// Deletes up to `batch` finished items: succeeded or cancelled before `done_before`, failed before
/// `failed_before`; never a queued or running one, however old, nor what the purge reads
/// (`MaintenanceStore::failing_crawl`): a config's newest crawl of the whole root that succeeded, and a crawl with a
/// failure on it that no such success answered (`failing_crawl::unanswered_failure`).
pub(crate) fn delete_finished_query(
    done_before: DateTime<Utc>,
    failed_before: DateTime<Utc>,
    batch: i64,
) -> BoxedSqlQuery<'static, Pg, SqlQuery> {
    use crate::maintenance_store::failing_crawl::{read_whole_after, unanswered_failure, whole_root};
    sql_query(format!(
        "DELETE FROM work_items WHERE id IN (
            SELECT d.id FROM work_items AS d
             WHERE ((d.status IN ('succeeded', 'cancelled') AND d.finished_at < $1)
                    OR (d.status = 'failed' AND d.finished_at < $2))
               AND NOT (d.kind = $4 AND d.status = 'succeeded' AND {} AND NOT {})
               AND NOT (d.kind = $4 AND {})
             ORDER BY d.finished_at
             LIMIT $3
               FOR UPDATE SKIP LOCKED)",
        whole_root("d"),
        read_whole_after("n", "d", "d.finished_at"),
        unanswered_failure("d", "a")
    ))
    .into_boxed()
    .bind::<Timestamptz, _>(done_before)
    .bind::<Timestamptz, _>(failed_before)
    .bind::<BigInt, _>(batch)
    .bind::<Text, _>(almanac_domain::WorkKind::Crawl.as_str())
}

/// [`almanac_domain::WorkQueue::recover_expired_leases`].
pub(super) async fn recover_expired_leases(store: &PgStore, max_stalls: i32) -> Result<Vec<Recovered>, QueueError> {
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
                    claim_token = CASE WHEN d.requeue THEN NULL ELSE w.claim_token END,
                    dedup_key = d.dedup_key
               FROM decided AS d
              WHERE w.id = d.id
          RETURNING w.id, w.status, w.stalls",
        )
        .bind::<Integer, _>(max_stalls.max(1));
    // Committed before it is reported: a recovery is only logged (and counted) when it happened.
    let rows: Vec<RecoveredRow> = store.transaction(Lane::Shared, async |conn| recover.load(conn).await).await?;
    rows.into_iter()
        .map(|r| Ok(Recovered { id: WorkItemId::from_uuid(r.id), status: parse_status(&r.status)?, stalls: r.stalls }))
        .collect()
}
