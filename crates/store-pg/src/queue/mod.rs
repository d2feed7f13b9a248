//! The work queue's statements (ADR 0008, docs/queue.md), one file per subject: `row.rs` (a work item's row),
//! `enqueue.rs`, `claim.rs` (the claim, alone and after completions), `outcome.rs` (an attempt's own writes:
//! heartbeats, completions, failures, releases) and `recovery.rs` (expired leases, cancel requests). They are
//! PostgreSQL-only (SKIP LOCKED, partial unique indexes, `now()` as the one clock), so they carry
//! `#[mutants::skip]` and are covered by the contract tests named in ADR 0005. Every statement reaches the
//! database through `crate::tx`.

mod claim;
mod enqueue;
#[cfg(test)]
mod heads_tests;
mod outcome;
mod recovery;
mod row;
#[cfg(test)]
mod tests;
mod upkeep;

use almanac_domain::{
    CancelOutcome, Enqueued, NewWorkItem, QueueError, WorkItem, WorkItemId, WorkQueue,
    ports::{
        ClaimRequest, ClaimedItem, CompletedMany, Completion, FailOutcome, Failure, Fence, Heartbeat, LeaseDuration,
        Recovered, WriteOutcome,
    },
};
use diesel::sql_query;
use diesel::sql_types::Uuid;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::PgStore;
use crate::error;
use crate::tx::Lane;

pub(crate) use claim::hand_back_failed;
#[cfg(feature = "test-support")]
pub use claim::{claim_binds, claim_with, configs_taken};
pub(crate) use enqueue::{many_query as enqueue_many_query, query as enqueue_query};
pub(crate) use recovery::delete_finished_query;
pub(crate) use row::WorkItemRow;
pub(crate) use upkeep::HeadsUpkeep;

/// Enqueues work on a connection of the caller's, inside the caller's transaction: the item exists exactly when
/// that transaction commits (the web backend writes its own rows and enqueues their work atomically). Answers as
/// [`WorkQueue::enqueue`] does.
#[mutants::skip]
pub async fn enqueue_in(conn: &mut AsyncPgConnection, item: &NewWorkItem) -> Result<Enqueued, QueueError> {
    for _ in 0..enqueue::TRIES {
        if let Some((row, created)) = enqueue::once_on(conn, item).await.map_err(error::queue)? {
            return Ok(Enqueued { item: row.try_into()?, created });
        }
    }
    Err(enqueue::kept_racing())
}

/// Requests a cancel on a connection of the caller's, inside the caller's transaction; answers as
/// [`WorkQueue::request_cancel`] does.
#[mutants::skip]
pub async fn request_cancel_in(conn: &mut AsyncPgConnection, id: WorkItemId) -> Result<CancelOutcome, QueueError> {
    recovery::cancel_on(conn, id).await.map_err(error::queue)?
}

impl WorkQueue for PgStore {
    #[mutants::skip]
    async fn enqueue(&self, item: &NewWorkItem) -> Result<Enqueued, QueueError> {
        enqueue::one(self, item).await
    }

    #[mutants::skip]
    async fn enqueue_many(&self, items: &[NewWorkItem]) -> Result<Vec<Enqueued>, QueueError> {
        enqueue::many(self, items).await
    }

    #[mutants::skip]
    async fn claim(&self, request: &ClaimRequest) -> Result<Option<ClaimedItem>, QueueError> {
        Ok(claim::claim(self, request, 1).await?.into_iter().next())
    }

    #[mutants::skip]
    async fn claim_many(&self, request: &ClaimRequest, limit: usize) -> Result<Vec<ClaimedItem>, QueueError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        claim::claim(self, request, limit).await
    }

    #[mutants::skip]
    async fn heartbeat(
        &self,
        fence: Fence,
        lease: LeaseDuration,
        progress: Option<&serde_json::Value>,
    ) -> Result<Heartbeat, QueueError> {
        outcome::heartbeat(self, fence, lease, progress).await
    }

    #[mutants::skip]
    async fn complete_many_and_claim(
        &self,
        done: &[Completion<'_>],
        next: &ClaimRequest,
        claim: usize,
    ) -> Result<CompletedMany, QueueError> {
        outcome::complete_many_and_claim(self, done, next, claim).await
    }

    #[mutants::skip]
    async fn complete(&self, fence: Fence, result: Option<&serde_json::Value>) -> Result<WriteOutcome, QueueError> {
        outcome::complete(self, fence, result).await
    }

    #[mutants::skip]
    async fn succeeded_under(&self, fence: Fence) -> Result<bool, QueueError> {
        outcome::succeeded_under(self, fence).await
    }

    #[mutants::skip]
    async fn fail(&self, fence: Fence, failure: &Failure) -> Result<FailOutcome, QueueError> {
        outcome::fail(self, fence, failure).await
    }

    #[mutants::skip]
    async fn mark_cancelled(&self, fence: Fence) -> Result<WriteOutcome, QueueError> {
        outcome::mark_cancelled(self, fence).await
    }

    #[mutants::skip]
    async fn release(&self, fence: Fence) -> Result<WriteOutcome, QueueError> {
        outcome::release(self, fence).await
    }

    #[mutants::skip]
    async fn request_cancel(&self, id: WorkItemId) -> Result<CancelOutcome, QueueError> {
        self.transaction(Lane::Shared, async |conn| recovery::cancel_on(conn, id).await).await?
    }

    #[mutants::skip]
    async fn recover_expired_leases(&self, max_stalls: i32) -> Result<Vec<Recovered>, QueueError> {
        recovery::recover_expired_leases(self, max_stalls).await
    }

    #[mutants::skip]
    async fn get(&self, id: WorkItemId) -> Result<Option<WorkItem>, QueueError> {
        let rows: Vec<WorkItemRow> = self
            .read(async |conn| {
                sql_query("SELECT * FROM work_items WHERE id = $1").bind::<Uuid, _>(id.as_uuid()).load(conn).await
            })
            .await?;
        rows.into_iter().next().map(WorkItem::try_from).transpose()
    }
}
