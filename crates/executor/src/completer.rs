//! Completions written together (ADR 0008, "batched completions"): an attempt that succeeds hands its result to
//! one task, which writes every completion waiting at that moment and claims as many next items, in one
//! transaction. While a batch is being written the next one gathers (two are written at once at most), so
//! short items share their commits instead of paying one each; a lone completion is written at once (nothing
//! waits for company).
//!
//! Each completion stays fenced on its own attempt: batching changes how many rows one statement writes, never
//! which. A batch is bounded by one heartbeat interval, as a single completion was.

use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{
    QueueError, WorkQueue,
    ports::{ClaimRequest, ClaimedItem, Completed, CompletedMany, Completion, Fence, WriteOutcome},
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;
use tracing::warn;

use crate::worker::release_unrun;

/// What a completion came to: `None` when the batch's write did not answer within its time limit.
pub(crate) type Answer = Option<Result<Completed, QueueError>>;

/// One attempt's completion, waiting for its batch.
struct Request {
    fence: Fence,
    result: Option<serde_json::Value>,
    /// Whether the attempt's slot wants its next item claimed with the completion (not while shutting down).
    claim_next: bool,
    reply: oneshot::Sender<Answer>,
}

/// The handle attempts complete through; the task ends when every handle is dropped.
pub(crate) struct Completer {
    requests: mpsc::UnboundedSender<Request>,
}

impl Completer {
    /// Starts the task that writes completions for `queue`, claiming next items for `next`, each batch within
    /// `wait`.
    pub(crate) fn start<Q: WorkQueue + 'static>(
        queue: Arc<Q>,
        next: ClaimRequest,
        wait: Duration,
    ) -> (Arc<Self>, JoinHandle<()>) {
        let (requests, incoming) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_batches(queue, next, wait, incoming));
        (Arc::new(Self { requests }), task)
    }

    /// Completes the attempt under `fence` with `result` and, when `claim_next`, claims its slot's next item in
    /// the same transaction. Answers `None` when the write did not answer in time (or the task is gone).
    pub(crate) async fn complete(&self, fence: Fence, result: Option<serde_json::Value>, claim_next: bool) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.requests.send(Request { fence, result, claim_next, reply }).ok()?;
        answer.await.ok().flatten()
    }
}

/// Batches written at once, at most: two, so that while one batch is written the attempts whose items came
/// with the other run and complete, and neither the database nor the slots wait for the other in turn.
const BATCHES_IN_FLIGHT: usize = 2;

/// Writes batches until every handle is gone: each batch is whatever waits when a batch may start.
async fn write_batches<Q: WorkQueue + 'static>(
    queue: Arc<Q>,
    next: ClaimRequest,
    wait: Duration,
    mut incoming: mpsc::UnboundedReceiver<Request>,
) {
    let next = Arc::new(next);
    let mut writing = JoinSet::new();
    let mut open = true;
    while open || !writing.is_empty() {
        tokio::select! {
            Some(_) = writing.join_next(), if !writing.is_empty() => {}
            mut batch = async {
                let mut batch = Vec::new();
                incoming.recv_many(&mut batch, usize::MAX).await;
                batch
            }, if open && writing.len() < BATCHES_IN_FLIGHT => {
                // Nothing received: every handle is gone.
                if batch.is_empty() {
                    open = false;
                    continue;
                }
                let (queue, next) = (queue.clone(), next.clone());
                // An attempt that stopped waiting (its own time limit passed) gets no item claimed for it.
                for request in &mut batch {
                    request.claim_next &= !request.reply.is_closed();
                }
                writing.spawn(async move {
                    let done: Vec<Completion<'_>> = batch.iter().map(|r| (r.fence, r.result.as_ref())).collect();
                    let claim = batch.iter().filter(|r| r.claim_next).count();
                    let answer = timeout(wait, write_through_outages(&*queue, &done, &next, claim)).await;
                    drop(done);
                    let orphans = answer_each(batch, answer.ok());
                    hand_back(&queue, orphans, wait).await;
                });
            }
        }
    }
}

/// Writes a batch, and writes it again on a fresh connection while the database is unavailable to it (a killed
/// backend, a dropped connection), within the batch's time limit: one heartbeat interval, far inside the
/// attempts' leases, which run a lease past their last heartbeat. So one dead connection never sends a batch of
/// finished items back to run again (docs/safety.md, invariant 9). A batch written twice changes nothing the
/// second time: each completion is fenced on its attempt. When a try's answer was lost after its commit, the next
/// try finds those completions already written: an item that succeeded under this very claim (its token, not only
/// its attempt number) counts as written.
/// (Items that lost try claimed with the completions wait for lease recovery.)
async fn write_through_outages<Q: WorkQueue>(
    queue: &Q,
    done: &[Completion<'_>],
    next: &ClaimRequest,
    claim: usize,
) -> Result<CompletedMany, QueueError> {
    let mut pause = Duration::from_millis(50);
    let mut answer_lost = false;
    loop {
        match queue.complete_many_and_claim(done, next, claim).await {
            Err(QueueError::Unavailable(e)) => {
                warn!(event = "completion_retry", error = %e, items = done.len(), retry_in_ms = pause.as_millis() as u64,
                      "the database was unavailable to a batch of completions; writing it again on a fresh connection");
                answer_lost = true;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Ok(mut many) if answer_lost => {
                for ((fence, _), written) in done.iter().zip(many.written.iter_mut()) {
                    if *written == WriteOutcome::Lost && queue.succeeded_under(*fence).await == Ok(true) {
                        *written = WriteOutcome::Written;
                    }
                }
                return Ok(many);
            }
            other => return other,
        }
    }
}

/// Answers each request of a batch; returns the items claimed for attempts that no longer wait for them.
fn answer_each(batch: Vec<Request>, answer: Option<Result<CompletedMany, QueueError>>) -> Vec<ClaimedItem> {
    // Unless it was written, every request of the batch gets the same answer.
    let failed: Answer = match answer {
        Some(Ok(CompletedMany { written, next })) if written.len() == batch.len() => {
            return answer_written(batch, written, next);
        }
        Some(Ok(_)) => {
            Some(Err(QueueError::Unexpected("a batch of completions was answered for a different count".into())))
        }
        Some(Err(error)) => Some(Err(error)),
        None => None,
    };
    for request in batch {
        let _ = request.reply.send(failed.clone());
    }
    Vec::new()
}

/// Answers each request of a batch that was written; returns the items claimed for attempts that no longer
/// wait for them.
fn answer_written(
    batch: Vec<Request>,
    written: Vec<WriteOutcome>,
    next: Result<Vec<ClaimedItem>, QueueError>,
) -> Vec<ClaimedItem> {
    let mut orphans = Vec::new();
    let (mut claimed, claim_error) = match next {
        Ok(claimed) => (claimed.into_iter(), None),
        Err(e) => (Vec::new().into_iter(), Some(e)),
    };
    for (request, written) in batch.into_iter().zip(written) {
        let next = match (&claim_error, request.claim_next) {
            (Some(e), true) => Err(e.clone()),
            (_, true) => Ok(claimed.next()),
            (_, false) => Ok(None),
        };
        if let Err(Some(Ok(Completed { next: Ok(Some(item)), .. }))) =
            request.reply.send(Some(Ok(Completed { written, next })))
        {
            orphans.push(item);
        }
    }
    // More than asked for would be a store's bug; never leave them held.
    orphans.extend(claimed);
    orphans
}

/// Releases items claimed for attempts that stopped waiting (their own time limit passed first).
async fn hand_back<Q: WorkQueue + 'static>(queue: &Arc<Q>, orphans: Vec<ClaimedItem>, wait: Duration) {
    if orphans.is_empty() {
        return;
    }
    for id in release_unrun(queue, orphans, wait).await.released {
        warn!(event = "released", item_id = %id, "an item claimed with a completion nobody waited for was handed back");
    }
}
