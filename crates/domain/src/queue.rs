use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::cause::Cause;
use crate::ids::{UserId, WorkItemId};
use crate::work::{Attempt, ClaimToken, LeaseDuration, NewWorkItem, Status, WorkItem, WorkKind, WorkerId};

/// Why a queue operation could not answer. The executor treats every variant as "no answer": it never
/// guesses an outcome from an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The database could not be reached, or did not answer in time. MUST be returned for connection, pool
    /// and timeout failures, so callers can tell an outage from a bug.
    #[error(
        "the work queue database is unavailable: {0}. Check that PostgreSQL is running and reachable at the configured DATABASE_URL"
    )]
    Unavailable(#[source] Cause),
    /// The request breaks a rule of the queue (e.g. a storage config that does not exist).
    #[error("the work queue refused the request: {0}")]
    Rejected(String),
    /// Anything else the database said; a bug or a schema that does not match this binary.
    #[error("the work queue failed unexpectedly: {0}")]
    Unexpected(#[source] Cause),
}

/// What [`WorkQueue::complete_and_claim`] came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    /// The completion.
    pub written: WriteOutcome,
    /// The claim that followed it (as [`WorkQueue::claim`] answers).
    pub next: Result<Option<ClaimedItem>, QueueError>,
}

/// One attempt's success, as [`WorkQueue::complete_many_and_claim`] takes it: its fence and its result.
pub type Completion<'a> = (Fence, Option<&'a serde_json::Value>);

/// What [`WorkQueue::complete_many_and_claim`] came to.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedMany {
    /// Each completion's outcome, in the order they were given.
    pub written: Vec<WriteOutcome>,
    /// The claim that followed them (as [`WorkQueue::claim_many`] answers).
    pub next: Result<Vec<ClaimedItem>, QueueError>,
}

/// The result of an enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueued {
    /// The queued item: the new one, or the one already queued under the same dedup key.
    pub item: WorkItem,
    /// False when an item with the same dedup key was already queued and is returned instead.
    pub created: bool,
}

/// Which storage configs' items a Worker claims. Every Worker also claims unscoped items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedConfigs {
    /// Every active storage config.
    All,
    /// The active storage configs of one user.
    User(UserId),
}

impl ServedConfigs {
    /// Whether a Worker serving these configs serves a config of `owner` (when it is active). The one
    /// definition in Rust; the claim states the same rule in SQL (`queue_heads.user_id`), and the contract test
    /// `per_user_worker_claims_only_its_user_configs_and_unscoped_work` holds the two together.
    pub fn includes(self, owner: UserId) -> bool {
        match self {
            ServedConfigs::All => true,
            ServedConfigs::User(user) => user == owner,
        }
    }
}

/// What a Worker asks for when it has a free slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Who claims; written to the item.
    pub worker_id: WorkerId,
    /// Whose configs it serves.
    pub served: ServedConfigs,
    /// The kinds it has handlers for; items of other kinds are never claimed by it.
    pub kinds: Vec<WorkKind>,
    /// The lease the claim takes.
    pub lease: LeaseDuration,
}

/// What fences every write of one attempt (rule 5): the item, and the claim that started the attempt, by its
/// number and its token. The token is what tells two claims apart: a claim that a failover lost (committed on a
/// primary whose last commits the promoted standby never got) shares its attempt number with the item's next
/// claim, never its token. Made by the claim ([`Fence::new`] for stores and test doubles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Fence {
    /// The item.
    pub id: WorkItemId,
    /// The number of the claim that started this attempt.
    pub attempt: Attempt,
    /// That claim's token.
    pub claim: ClaimToken,
}

impl Fence {
    /// The fence of the attempt that claim `claim`, number `attempt`, started on item `id`.
    pub const fn new(id: WorkItemId, attempt: Attempt, claim: ClaimToken) -> Self {
        Self { id, attempt, claim }
    }
}

/// A claimed item and the fence for its attempt's writes.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedItem {
    /// The item, as the claim left it (status running).
    pub item: WorkItem,
    /// The attempt's fence.
    pub fence: Fence,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease was renewed.
    Renewed {
        /// A cancel was requested for the item; the attempt should stop and mark it cancelled.
        cancel_requested: bool,
    },
    /// The attempt no longer holds the item (recovered, finished or re-claimed): write nothing more.
    Lost,
}

/// The answer to a fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written.
    Written,
    /// The attempt no longer holds the item; nothing was written.
    Lost,
}

/// A handler error, as reported to the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong, for `last_error` and the logs.
    pub error: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
    /// How long to wait before the retry, if one is scheduled.
    pub retry_delay: Duration,
}

/// The answer to reporting a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Requeued; it will not be claimed before `run_after`.
    RetryScheduled {
        /// Earliest next claim (database clock).
        run_after: DateTime<Utc>,
    },
    /// Failed for good: not retryable, or the retry budget is spent.
    Failed,
    /// A cancel had been requested: the item ends cancelled (its error kept), never retried.
    Cancelled,
    /// The attempt no longer holds the item; nothing was written.
    Lost,
}

/// The answer to a cancel request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The item was queued and is now cancelled.
    Cancelled,
    /// The item is running; its Worker sees the request at its next heartbeat.
    Requested,
    /// The item had already finished with this status; nothing changed.
    AlreadyFinished(Status),
    /// No such item.
    NotFound,
}

/// An item whose lease expired, as lease recovery left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// The item.
    pub id: WorkItemId,
    /// `Queued` (requeued), `Failed` (stalled too often) or `Cancelled` (a cancel had been requested).
    pub status: Status,
    /// Its stall count after this recovery.
    pub stalls: i32,
}

/// The durable work queue (ADR 0008), as the executor and the web backend see it.
///
/// Every write by an attempt takes its [`Fence`] and changes nothing unless the item is still running under the
/// claim it names; otherwise it answers `Lost`. Errors mean "no answer": the operation may or may not have
/// happened (the caller never assumes either).
pub trait WorkQueue: Send + Sync {
    /// Enqueues work. With a dedup key that is already queued, returns the queued item (`created: false`).
    fn enqueue(&self, item: &NewWorkItem) -> impl Future<Output = Result<Enqueued, QueueError>> + Send;

    /// Enqueues many items at once, in this order (they are claimed in this order too), answering for each
    /// what [`WorkQueue::enqueue`] would: the new item, or the item already queued under its dedup key (an
    /// earlier item of the same batch included). A store makes this one statement for thousands of items; this
    /// default enqueues them one by one. Not atomic: on an error, items before it may be enqueued (give dedup
    /// keys to batches that are retried).
    fn enqueue_many(&self, items: &[NewWorkItem]) -> impl Future<Output = Result<Vec<Enqueued>, QueueError>> + Send {
        async move {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(self.enqueue(item).await?);
            }
            Ok(out)
        }
    }

    /// Claims the oldest due item this Worker serves whose storage config has no running item (rules 1–3).
    /// MUST answer `Ok(None)` both when nothing is eligible and when a concurrent claim of the same config
    /// won the race (the running-config index rejected this one).
    fn claim(&self, request: &ClaimRequest) -> impl Future<Output = Result<Option<ClaimedItem>, QueueError>> + Send;

    /// Claims up to `limit` items at once, as that many claims one after another would, each of a different
    /// storage config (rules 1–3 hold for every one), oldest first. Answers fewer (or none) when no more are
    /// eligible, and none when a concurrent claim won the race for any of their configs. A store makes this one
    /// statement; this default claims one by one.
    fn claim_many(
        &self,
        request: &ClaimRequest,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ClaimedItem>, QueueError>> + Send {
        async move {
            let mut claimed = Vec::new();
            while claimed.len() < limit {
                match self.claim(request).await? {
                    Some(item) => claimed.push(item),
                    None => break,
                }
            }
            Ok(claimed)
        }
    }

    /// Renews the attempt's lease, stores progress when given, and reports a requested cancel.
    fn heartbeat(
        &self,
        fence: Fence,
        lease: LeaseDuration,
        progress: Option<&serde_json::Value>,
    ) -> impl Future<Output = Result<Heartbeat, QueueError>> + Send;

    /// Marks the attempt's item succeeded, with an optional result.
    fn complete(
        &self,
        fence: Fence,
        result: Option<&serde_json::Value>,
    ) -> impl Future<Output = Result<WriteOutcome, QueueError>> + Send;

    /// Completes an attempt as [`WorkQueue::complete`] does and, in the same transaction, claims the next item
    /// as [`WorkQueue::claim`] does: one commit for both; [`WorkQueue::complete_many_and_claim`] of one.
    fn complete_and_claim(
        &self,
        fence: Fence,
        result: Option<&serde_json::Value>,
        next: &ClaimRequest,
    ) -> impl Future<Output = Result<Completed, QueueError>> + Send {
        async move {
            let done = self.complete_many_and_claim(&[(fence, result)], next, 1).await?;
            let written = done
                .written
                .first()
                .copied()
                .ok_or_else(|| QueueError::Unexpected("a completion of one item answered for none".into()))?;
            Ok(Completed { written, next: done.next.map(|claimed| claimed.into_iter().next()) })
        }
    }

    /// Completes several attempts (each fenced on its own, as [`WorkQueue::complete`] does) and, in the same
    /// transaction, claims up to `claim` items as [`WorkQueue::claim_many`] does: one commit for all. The
    /// claim's own failure (a lost race included) never undoes the completions. An error means the
    /// completions' outcomes are unknown. This default completes one by one, then claims.
    fn complete_many_and_claim(
        &self,
        done: &[Completion<'_>],
        next: &ClaimRequest,
        claim: usize,
    ) -> impl Future<Output = Result<CompletedMany, QueueError>> + Send {
        async move {
            let mut written = Vec::with_capacity(done.len());
            for (fence, result) in done {
                written.push(self.complete(*fence, *result).await?);
            }
            let next = if claim == 0 { Ok(Vec::new()) } else { self.claim_many(next, claim).await };
            Ok(CompletedMany { written, next })
        }
    }

    /// Counts a handler error; requeues with a delay when retryable and under budget, else fails the item.
    fn fail(&self, fence: Fence, failure: &Failure) -> impl Future<Output = Result<FailOutcome, QueueError>> + Send;

    /// Whether the attempt under `fence` completed its item: the item succeeded, and that very claim wrote it.
    /// How a completion written again after its first answer was lost tells its own earlier commit (answered
    /// `Lost` the second time) from an item that another claim, of the same attempt number or not, completed.
    fn succeeded_under(&self, fence: Fence) -> impl Future<Output = Result<bool, QueueError>> + Send;

    /// Marks the attempt's item cancelled (after a cancel request was honoured).
    fn mark_cancelled(&self, fence: Fence) -> impl Future<Output = Result<WriteOutcome, QueueError>> + Send;

    /// Gives the item back to the queue on shutdown: no failure, no stall, claimable at once.
    fn release(&self, fence: Fence) -> impl Future<Output = Result<WriteOutcome, QueueError>> + Send;

    /// Cancels a queued item at once, or asks a running one to stop.
    fn request_cancel(&self, id: WorkItemId) -> impl Future<Output = Result<CancelOutcome, QueueError>> + Send;

    /// Requeues running items whose lease expired (`stalls + 1`, keeping their place), failing those that
    /// reach `max_stalls` and cancelling those whose cancel was requested.
    fn recover_expired_leases(
        &self,
        max_stalls: i32,
    ) -> impl Future<Output = Result<Vec<Recovered>, QueueError>> + Send;

    /// Reads one item.
    fn get(&self, id: WorkItemId) -> impl Future<Output = Result<Option<WorkItem>, QueueError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_serves_every_user_or_one() {
        let (ann, bob) = (UserId::new(), UserId::new());
        assert!(ServedConfigs::All.includes(ann) && ServedConfigs::All.includes(bob));
        assert!(ServedConfigs::User(ann).includes(ann));
        assert!(!ServedConfigs::User(ann).includes(bob));
    }
}
