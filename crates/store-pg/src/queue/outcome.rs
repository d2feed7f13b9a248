//! An attempt's own writes (ADR 0008 rule 5): heartbeats, completions (alone, or many with the claim that
//! follows them), failures, cancellations and releases. Each is fenced in its own `WHERE` ([`FENCE`]) and runs
//! in a transaction on the attempt's reserved connections (`Lane::Attempt`) whose commit is awaited.

use std::collections::HashSet;

use almanac_domain::{
    QueueError, Status,
    ports::{
        ClaimRequest, CompletedMany, Completion, FailOutcome, Failure, Fence, Heartbeat, LeaseDuration, WriteOutcome,
    },
};
use diesel::QueryableByName;
use diesel::sql_types::{Bool, Uuid};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};

use super::claim;
use super::row::{StatusRow, parse_status};
use crate::PgStore;
use crate::error::placed;
use crate::prepared::{Bind, Prepared};
use crate::storable;
use crate::tx::{Lane, begun_then, pipelined};

/// The fence of an attempt's own write: `$1` its item, `$2` its attempt number, `$3` its claim's token, still
/// running. The token tells the attempt from another claim of the same number (one a failover lost).
const FENCE: &str = "w.id = $1 AND w.attempt = $2 AND w.claim_token = $3 AND w.status = 'running'";

/// How long the claim that follows a completion waits for any one lock before it gives up (nothing claimed).
const CHAINED_CLAIM_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Marks each fenced attempt of the arrays (`$1` ids, `$2` attempts, `$3` claim tokens, `$4` results)
/// succeeded; answers the `(id, claim_token)` of each row written. Each row is fenced on its own, exactly as
/// [`FENCE`] fences one. The item keeps its claim's token ([`succeeded_under`]).
///
/// The fifth array, `uncounted`, is the first again, read through a subquery (an init plan) and never used: the
/// planner cannot count its elements and assumes ten, and it prices the function's rows as the largest of its
/// arrays' counts. So a batch of ten or fewer is priced at ten rows whether the plan is made for this call's
/// values or for any, a larger one costs more planned for its values, and a connection keeps the statement's
/// generic plan after its first five calls, as it keeps the claim's. Without it a custom plan counted the
/// constant arrays, priced a batch of eight below the generic plan's ten, and the statement was planned again on
/// every call (0.15 ms of server time for a batch of eight on a queue of a million; test
/// `a_batch_of_completions_keeps_its_plan_whatever_its_size`). Behind a pooler in transaction mode no statement
/// is kept (see `crate::pooler`), so every call is planned there whatever its text.
pub(super) const COMPLETE_MANY: &str = "\
UPDATE work_items AS w
   SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL, result = d.result
  FROM unnest($1::uuid[], $2::integer[], $3::uuid[], $4::jsonb[], ARRAY(SELECT unnest($1::uuid[])))
       AS d(id, attempt, claim_token, result, uncounted)
 WHERE w.id = d.id AND w.attempt = d.attempt AND w.claim_token = d.claim_token AND w.status = 'running'
RETURNING w.id, w.claim_token";

/// Whether a failing attempt's item is retried: retryable, under its budget, and no cancel requested. Read from
/// the row being updated, so a cancel requested at that very moment is seen (a subquery's snapshot would not
/// be re-read when the update waits for the cancel's row lock).
const RETRY: &str = "($5::boolean AND w.failures + 1 < w.max_attempts AND w.cancel_requested_at IS NULL)";

/// Requeuing must not collide with a newer queued item of the same dedup key: the requeued item drops its key
/// and both stay (nothing is lost; the work may run twice).
pub(super) const REQUEUE_DEDUP_KEY: &str = "CASE WHEN EXISTS (SELECT 1 FROM work_items AS o
       WHERE o.dedup_key = w.dedup_key AND o.status = 'queued' AND o.id <> w.id) THEN NULL ELSE w.dedup_key END";

/// How a release leaves an item (an attempt's release, a claim given up on handed back): queued, due now and first
/// in line among its config's items (`requested_at` kept), its claim's token and lease gone, its attempt number
/// used.
pub(super) fn released() -> String {
    format!(
        "status = 'queued', lease_expires_at = NULL, run_after = now(), claim_token = NULL, \
         dedup_key = {REQUEUE_DEDUP_KEY}"
    )
}

#[derive(QueryableByName)]
pub(super) struct IdRow {
    #[diesel(sql_type = Uuid)]
    pub(super) id: uuid::Uuid,
    #[diesel(sql_type = Uuid)]
    pub(super) claim_token: uuid::Uuid,
}

#[derive(QueryableByName)]
struct CancelRequested {
    #[diesel(sql_type = Bool)]
    cancel_requested: bool,
}

/// A lease in seconds, as the statements bind it.
pub(super) fn seconds(lease: LeaseDuration) -> f64 {
    lease.get().as_secs_f64()
}

/// The values of [`FENCE`]'s `$1`, `$2` and `$3`.
fn fence_binds<'a>(fence: Fence) -> Vec<Bind<'a>> {
    vec![Bind::Uuid(fence.id.as_uuid()), Bind::Integer(fence.attempt.get()), Bind::Uuid(fence.claim.as_uuid())]
}

/// A write of the attempt's own that answers how many rows it changed: one, or none when the fence is stale.
async fn fenced_write(store: &PgStore, sql: String, binds: Vec<Bind<'_>>) -> Result<WriteOutcome, QueueError> {
    let rows = store.transaction(Lane::Attempt, async |conn| Prepared::new(&sql, binds).execute(conn).await).await?;
    Ok(if rows == 1 { WriteOutcome::Written } else { WriteOutcome::Lost })
}

/// [`almanac_domain::WorkQueue::heartbeat`].
pub(super) async fn heartbeat(
    store: &PgStore,
    fence: Fence,
    lease: LeaseDuration,
    progress: Option<&serde_json::Value>,
) -> Result<Heartbeat, QueueError> {
    let sql = format!(
        "UPDATE work_items AS w
            SET heartbeat_at = now(),
                lease_expires_at = now() + $4 * interval '1 second',
                progress = COALESCE($5, w.progress)
          WHERE {FENCE}
      RETURNING w.cancel_requested_at IS NOT NULL AS cancel_requested"
    );
    let progress = progress.map(storable::json);
    let mut binds = fence_binds(fence);
    binds.extend([Bind::Double(seconds(lease)), Bind::NullableJsonb(progress.as_deref())]);
    let renewed: Vec<CancelRequested> =
        store.transaction(Lane::Attempt, async |conn| Prepared::new(&sql, binds).load(conn).await).await?;
    Ok(match renewed.into_iter().next() {
        Some(r) => Heartbeat::Renewed { cancel_requested: r.cancel_requested },
        None => Heartbeat::Lost,
    })
}

/// [`almanac_domain::WorkQueue::complete`].
pub(super) async fn complete(
    store: &PgStore,
    fence: Fence,
    result: Option<&serde_json::Value>,
) -> Result<WriteOutcome, QueueError> {
    let sql = format!(
        "UPDATE work_items AS w
            SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL, result = $4
          WHERE {FENCE}"
    );
    let result = result.map(storable::json);
    let mut binds = fence_binds(fence);
    binds.push(Bind::NullableJsonb(result.as_deref()));
    fenced_write(store, sql, binds).await
}

/// [`almanac_domain::WorkQueue::succeeded_under`]: the item succeeded, and the claim that completed it is the
/// fence's (a succeeded item keeps its claim's token).
pub(super) async fn succeeded_under(store: &PgStore, fence: Fence) -> Result<bool, QueueError> {
    const SUCCEEDED_UNDER: &str = "SELECT EXISTS (SELECT 1 FROM work_items AS w
                                    WHERE w.id = $1 AND w.attempt = $2 AND w.claim_token = $3
                                      AND w.status = 'succeeded') AS yes";
    #[derive(QueryableByName)]
    struct Yes {
        #[diesel(sql_type = Bool)]
        yes: bool,
    }
    let binds = fence_binds(fence);
    let rows: Vec<Yes> =
        store.transaction(Lane::Attempt, async |conn| Prepared::new(SUCCEEDED_UNDER, binds).load(conn).await).await?;
    Ok(rows.into_iter().any(|r| r.yes))
}

/// [`almanac_domain::WorkQueue::mark_cancelled`].
pub(super) async fn mark_cancelled(store: &PgStore, fence: Fence) -> Result<WriteOutcome, QueueError> {
    let sql = format!(
        "UPDATE work_items AS w
            SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
          WHERE {FENCE}"
    );
    fenced_write(store, sql, fence_binds(fence)).await
}

/// [`almanac_domain::WorkQueue::release`].
pub(super) async fn release(store: &PgStore, fence: Fence) -> Result<WriteOutcome, QueueError> {
    let sql = format!("UPDATE work_items AS w SET {} WHERE {FENCE}", released());
    fenced_write(store, sql, fence_binds(fence)).await
}

/// [`almanac_domain::WorkQueue::fail`].
pub(super) async fn fail(store: &PgStore, fence: Fence, failure: &Failure) -> Result<FailOutcome, QueueError> {
    let sql = format!(
        "UPDATE work_items AS w
            SET failures = w.failures + 1,
                last_error = $4,
                status = CASE WHEN {RETRY} THEN 'queued'
                              WHEN w.cancel_requested_at IS NOT NULL THEN 'cancelled'
                              ELSE 'failed' END,
                run_after = CASE WHEN {RETRY} THEN now() + $6 * interval '1 second' ELSE w.run_after END,
                finished_at = CASE WHEN {RETRY} THEN NULL ELSE now() END,
                lease_expires_at = NULL,
                claim_token = CASE WHEN {RETRY} THEN NULL ELSE w.claim_token END,
                dedup_key = CASE WHEN {RETRY} THEN {REQUEUE_DEDUP_KEY} ELSE w.dedup_key END
          WHERE {FENCE}
      RETURNING w.status, w.run_after"
    );
    let error = storable::text(&failure.error);
    let mut binds = fence_binds(fence);
    binds.extend([Bind::Text(&error), Bind::Bool(failure.retryable), Bind::Double(failure.retry_delay.as_secs_f64())]);
    let rows: Vec<StatusRow> =
        store.transaction(Lane::Attempt, async |conn| Prepared::new(&sql, binds).load(conn).await).await?;
    let Some(row) = rows.into_iter().next() else {
        return Ok(FailOutcome::Lost);
    };
    Ok(match parse_status(&row.status)? {
        Status::Queued => FailOutcome::RetryScheduled { run_after: row.run_after },
        Status::Cancelled => FailOutcome::Cancelled,
        _ => FailOutcome::Failed,
    })
}

/// [`almanac_domain::WorkQueue::complete_many_and_claim`]: the completions and the claim after them in one
/// transaction, the claim in a savepoint of its own. Skipped by mutation testing as the port's method is
/// (ADR 0005: a claim refused either way answers nothing claimed; only its log tells a lost race apart).
#[mutants::skip]
pub(super) async fn complete_many_and_claim(
    store: &PgStore,
    done: &[Completion<'_>],
    next: &ClaimRequest,
    claim: usize,
) -> Result<CompletedMany, QueueError> {
    let results: Vec<_> = done.iter().map(|(_, result)| result.map(storable::json)).collect();
    let done: Vec<Completion<'_>> = done.iter().zip(&results).map(|((f, _), r)| (*f, r.as_deref())).collect();
    let binds = completion_binds(&done);
    let (written, next) = if claim == 0 {
        // Completions alone: one statement sent alone, in one round trip (a second try of a batch whose answer
        // was lost finds its items succeeded under their claims; `succeeded_under`).
        let written = store.alone(Lane::Attempt, async |conn| completed(conn, binds).await).await?;
        (written, Ok(Vec::new()))
    } else {
        completed_then_claimed(store, binds, next, claim).await?
    };
    // Matched on (id, claim token): a batch may hold a stale attempt's completion beside the current one's, of
    // another attempt number or (after a failover lost a claim) of the same.
    let written: HashSet<(uuid::Uuid, uuid::Uuid)> = written.into_iter().map(|r| (r.id, r.claim_token)).collect();
    let written = done
        .iter()
        .map(|(fence, _)| match written.contains(&(fence.id.as_uuid(), fence.claim.as_uuid())) {
            true => WriteOutcome::Written,
            false => WriteOutcome::Lost,
        })
        .collect();
    let next = match next {
        Ok(rows) => claim::taken(store, rows),
        // Rule 2's lost race: nothing claimed, as in any claim.
        Err(e) if claim::lost_race(&e) => Ok(Vec::new()),
        // Anything else the server refused (a lock it would not wait for, above all) was rolled back to the
        // savepoint on a connection that still answered: nothing claimed this time, and the next poll's own
        // claim reports what persists. Told apart by where it happened, not by the server's words.
        Err(e) => {
            tracing::debug!(event = "chained_claim_gave_up", error = %e, "the claim after a completion claimed nothing");
            Ok(Vec::new())
        }
    };
    Ok(CompletedMany { written, next })
}

/// The values of [`COMPLETE_MANY`] for the completions `done`: ids, attempts, claim tokens and results.
pub(super) fn completion_binds<'a>(done: &[Completion<'a>]) -> Vec<Bind<'a>> {
    vec![
        Bind::UuidArray(done.iter().map(|(fence, _)| fence.id.as_uuid()).collect()),
        Bind::IntegerArray(done.iter().map(|(fence, _)| fence.attempt.get()).collect()),
        Bind::UuidArray(done.iter().map(|(fence, _)| fence.claim.as_uuid()).collect()),
        Bind::NullableJsonbArray(done.iter().map(|(_, result)| *result).collect()),
    ]
}

/// Runs [`COMPLETE_MANY`] with `binds` on `conn` (alone, or first in the transaction of the claim after it): the
/// `(id, claim_token)` of each row written.
async fn completed(conn: &diesel_async::AsyncPgConnection, binds: Vec<Bind<'_>>) -> diesel::QueryResult<Vec<IdRow>> {
    Prepared::new(COMPLETE_MANY, binds).load(&mut { conn }).await
}

/// The completions (`binds`, as [`COMPLETE_MANY`] takes them) and a claim of up to `claim` items after them, in one
/// transaction of three round trips once both statements are prepared on the connection (a statement prepares in
/// a round trip of its own, once per connection in session mode, in every transaction behind a transaction pooler):
/// `BEGIN` with the completions, the claim's settings and savepoint with the claim, and the awaited `COMMIT` (the
/// rollback to the savepoint, when the claim failed, a fourth). The savepoint reaches the server before the claim
/// whether or not the claim is prepared yet ([`pipelined`]; `complete_and_claim_does_not_wait_on_another_configs_lock`
/// claims on a connection that has not prepared it, and would wait for ever without its lock limit). The rows
/// written, and the claim's rows or the error that rolled it back alone.
async fn completed_then_claimed(
    store: &PgStore,
    binds: Vec<Bind<'_>>,
    next: &ClaimRequest,
    claim: usize,
) -> Result<(Vec<IdRow>, diesel::QueryResult<Vec<super::WorkItemRow>>), QueueError> {
    let mut conn = store.conn_from(Lane::Attempt).await?;
    let answer = begun_then(
        &mut conn,
        async |conn| completed(conn, binds).await,
        async |conn, written| {
            // The claim waits for no lock longer than CHAINED_CLAIM_LOCK_WAIT (set after the completions, so it
            // alone is bounded): it would otherwise hold these completions hostage to other configs' locks, and a
            // transaction enqueueing into several configs could wait on it in a cycle. In a savepoint: a claim
            // that fails (a lost race on the running-config index, or a lock it would not wait for) is rolled
            // back alone, and the completions still commit. The savepoint needs no release (the commit ends it).
            let settings = format!(
                "SET LOCAL lock_timeout = '{}ms'; SAVEPOINT chained_claim",
                CHAINED_CLAIM_LOCK_WAIT.as_millis()
            );
            let mut claimer = conn;
            let claimed = claim::statement(&mut claimer, next, claim, uuid::Uuid::new_v4());
            let (set, next) = pipelined(conn, &settings, claimed).await;
            set?;
            if next.is_err() {
                let mut conn = conn;
                conn.batch_execute("ROLLBACK TO SAVEPOINT chained_claim").await?;
            }
            Ok((written, next))
        },
    )
    .await;
    match answer {
        Ok(answer) => Ok(answer),
        Err(e) => Err(placed(&mut conn, e).await.into()),
    }
}
