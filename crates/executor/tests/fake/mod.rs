//! An in-memory `WorkQueue` with scripted heartbeat answers, and a probe handler, for paused-time tests.

#![allow(dead_code, missing_docs)]

use std::collections::VecDeque;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use almanac_domain::{
    CancelOutcome, Enqueued, NewWorkItem, QueueError, Scope, Status, WorkItem, WorkItemId, WorkKind, WorkQueue,
    WorkerId,
    ports::{
        Attempt, ClaimRequest, ClaimToken, ClaimedItem, CompletedMany, Completion, FailOutcome, Failure, Fence,
        Heartbeat, LeaseDuration, Recovered, ServedConfigs, WriteOutcome,
    },
};
use almanac_executor::{BoxFuture, ExecutorConfig, Handler, HandlerContext, HandlerError};
use tokio::time::Instant;

/// How the fake answers heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    Renew,
    Fail,
    Hang,
    Lost,
    CancelRequested,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Complete(Option<serde_json::Value>),
    Fail(Failure),
    Cancelled,
    Release,
}

#[derive(Default)]
pub struct State {
    pub queued: VecDeque<(WorkItem, Instant)>,
    pub requests: Vec<ClaimRequest>,
    pub claims: Vec<Instant>,
    pub beats: Vec<(Instant, Option<serde_json::Value>)>,
    pub beat_mode: Option<Beat>,
    pub writes: Vec<(WorkItemId, Write, Instant)>,
    pub recoveries: Vec<Instant>,
    pub writes_fail: bool,
    /// How long each claim takes to answer (the round trip to the database).
    pub claim_delay: Duration,
    /// How many items each claim asked for.
    pub claim_limits: Vec<usize>,
    /// Batches of completions that claimed their slots' next items in the same call.
    pub chained_claims: usize,
    /// How many items each of those claims asked for.
    pub chained_claim_limits: Vec<usize>,
    /// How many completions each batch held.
    pub completion_batches: Vec<usize>,
    /// How long a batch of completions takes to answer.
    pub complete_delay: Duration,
    /// How many of the next batches of completions fail before writing anything (a connection dead at once).
    pub completions_fail: usize,
    /// How many of the next batches of completions are written, then answer with an error (a commit whose
    /// answer was lost).
    pub completions_lose_answer: usize,
    /// The attempts completed, by their items and their claims' tokens (as the store's fence sees them): a
    /// second completion of one is Lost.
    pub succeeded: Vec<(WorkItemId, ClaimToken)>,
    /// Items whose claims the store no longer honours (their leases ran out and were recovered): their
    /// completions are Lost, and nothing succeeded under those claims.
    pub claims_taken_back: Vec<WorkItemId>,
    /// How many of the next claims (on their own or with completions) answer nothing although items are due
    /// (each lost a race to another Worker).
    pub claims_lose_race: usize,
    /// A release puts the item back at the head of the queue, due at once (as the store does, keeping its
    /// place in line); without it, a released item leaves the fake.
    pub release_requeues: bool,
    /// Every item as claimed (its attempt counted), in claim order.
    pub claimed: Vec<WorkItem>,
}

#[derive(Default, Clone)]
pub struct FakeQueue {
    pub state: Arc<Mutex<State>>,
}

pub fn item(kind: WorkKind) -> WorkItem {
    let now = chrono::Utc::now();
    WorkItem {
        id: WorkItemId::new(),
        kind,
        scope: Scope::Unscoped,
        status: Status::Queued,
        payload: serde_json::json!({}),
        dedup_key: None,
        requested_at: now,
        run_after: now,
        attempt: 0,
        failures: 0,
        stalls: 0,
        max_attempts: 5,
        lease_expires_at: None,
        worker_id: None,
        started_at: None,
        heartbeat_at: None,
        finished_at: None,
        cancel_requested_at: None,
        last_error: None,
        progress: None,
        result: None,
    }
}

impl FakeQueue {
    pub fn with_items(items: impl IntoIterator<Item = WorkItem>) -> Self {
        let q = Self::default();
        let now = Instant::now();
        q.state.lock().unwrap().queued.extend(items.into_iter().map(|i| (i, now)));
        q
    }

    pub fn set_beat(&self, mode: Beat) {
        self.state.lock().unwrap().beat_mode = Some(mode);
    }

    pub fn writes(&self) -> Vec<(WorkItemId, Write, Instant)> {
        self.state.lock().unwrap().writes.clone()
    }

    pub fn beat_times(&self) -> Vec<Instant> {
        self.state.lock().unwrap().beats.iter().map(|b| b.0).collect()
    }

    pub fn claim_times(&self) -> Vec<Instant> {
        self.state.lock().unwrap().claims.clone()
    }

    fn write(&self, fence: Fence, write: Write) -> Result<WriteOutcome, QueueError> {
        let mut s = self.state.lock().unwrap();
        if s.writes_fail {
            return Err(QueueError::Unavailable("fake outage".into()));
        }
        s.writes.push((fence.id, write, Instant::now()));
        Ok(WriteOutcome::Written)
    }
}

impl WorkQueue for FakeQueue {
    async fn enqueue(&self, item: &NewWorkItem) -> Result<Enqueued, QueueError> {
        let mut new = self::item(item.kind());
        new.scope = item.scope();
        self.state.lock().unwrap().queued.push_back((new.clone(), Instant::now()));
        Ok(Enqueued { item: new, created: true })
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Option<ClaimedItem>, QueueError> {
        Ok(self.claim_many(request, 1).await?.pop())
    }

    /// One call (one claim time, one delay) for up to `limit` items.
    async fn claim_many(&self, request: &ClaimRequest, limit: usize) -> Result<Vec<ClaimedItem>, QueueError> {
        let delay = {
            let mut s = self.state.lock().unwrap();
            let now = Instant::now();
            s.claims.push(now);
            s.requests.push(request.clone());
            // Time is paused: an executor that claims in a loop never lets it pass, and would hang the test
            // (a claim happens at a poll, a wake-up or an ended attempt: a few at one instant). Such a claim
            // never answers: the executor goes idle, time passes, and the test's own checks see the flood.
            let at_this_instant = s.claims.iter().rev().take_while(|&&at| at == now).count();
            if at_this_instant >= 1_000 {
                eprintln!("fake queue: 1,000 claims without time passing (a claim loop); this one never answers");
                None
            } else {
                Some(s.claim_delay)
            }
        };
        let Some(delay) = delay else { return std::future::pending().await };
        tokio::time::sleep(delay).await;
        let mut s = self.state.lock().unwrap();
        s.claim_limits.push(limit);
        let now = Instant::now();
        let mut claimed = Vec::new();
        if s.claims_lose_race > 0 {
            s.claims_lose_race -= 1;
            return Ok(claimed);
        }
        while claimed.len() < limit {
            let Some(pos) = s.queued.iter().position(|(i, due)| *due <= now && request.kinds.contains(&i.kind)) else {
                break;
            };
            let (mut item, _) = s.queued.remove(pos).unwrap();
            item.attempt += 1;
            item.status = Status::Running;
            // A token of each claim's own, as the store's claim sets one.
            let claim = ClaimToken::from_uuid(uuid::Uuid::from_u128(s.claimed.len() as u128 + 1));
            let fence = Fence::new(item.id, Attempt::new(item.attempt).unwrap(), claim);
            s.claimed.push(item.clone());
            claimed.push(ClaimedItem { item, fence });
        }
        Ok(claimed)
    }

    async fn heartbeat(
        &self,
        _fence: Fence,
        _lease: LeaseDuration,
        progress: Option<&serde_json::Value>,
    ) -> Result<Heartbeat, QueueError> {
        let mode = {
            let mut s = self.state.lock().unwrap();
            s.beats.push((Instant::now(), progress.cloned()));
            s.beat_mode.unwrap_or(Beat::Renew)
        };
        match mode {
            Beat::Renew => Ok(Heartbeat::Renewed { cancel_requested: false }),
            Beat::CancelRequested => Ok(Heartbeat::Renewed { cancel_requested: true }),
            Beat::Lost => Ok(Heartbeat::Lost),
            Beat::Fail => Err(QueueError::Unavailable("fake outage".into())),
            Beat::Hang => std::future::pending().await,
        }
    }

    async fn complete(&self, fence: Fence, result: Option<&serde_json::Value>) -> Result<WriteOutcome, QueueError> {
        self.write(fence, Write::Complete(result.cloned()))
    }

    /// Counts the batches that claimed too, and the size of each batch.
    async fn complete_many_and_claim(
        &self,
        done: &[Completion<'_>],
        next: &ClaimRequest,
        claim: usize,
    ) -> Result<CompletedMany, QueueError> {
        let delay = self.state.lock().unwrap().complete_delay;
        tokio::time::sleep(delay).await;
        {
            let mut s = self.state.lock().unwrap();
            if s.completions_fail > 0 {
                s.completions_fail -= 1;
                return Err(QueueError::Unavailable("fake: connection closed".into()));
            }
        }
        let mut written = Vec::new();
        for (fence, result) in done {
            let attempt = (fence.id, fence.claim);
            let lost = {
                let s = self.state.lock().unwrap();
                s.claims_taken_back.contains(&fence.id) || s.succeeded.contains(&attempt)
            };
            if lost {
                written.push(WriteOutcome::Lost);
                continue;
            }
            written.push(self.write(*fence, Write::Complete(result.cloned()))?);
            self.state.lock().unwrap().succeeded.push(attempt);
        }
        {
            let mut s = self.state.lock().unwrap();
            if s.completions_lose_answer > 0 {
                s.completions_lose_answer -= 1;
                return Err(QueueError::Unavailable("fake: connection closed before the commit's answer".into()));
            }
        }
        self.state.lock().unwrap().completion_batches.push(done.len());
        if claim == 0 {
            return Ok(CompletedMany { written, next: Ok(Vec::new()) });
        }
        {
            let mut s = self.state.lock().unwrap();
            s.chained_claims += 1;
            s.chained_claim_limits.push(claim);
        }
        Ok(CompletedMany { written, next: self.claim_many(next, claim).await })
    }

    /// Applies the store's budget rule, and requeues the item (due after the delay) when it retries.
    async fn fail(&self, fence: Fence, failure: &Failure) -> Result<FailOutcome, QueueError> {
        self.write(fence, Write::Fail(failure.clone()))?;
        let mut s = self.state.lock().unwrap();
        let failures = s.writes.iter().filter(|(id, w, _)| *id == fence.id && matches!(w, Write::Fail(_))).count();
        let retry = failure.retryable && (failures as i32) < 3;
        if retry {
            let mut again = item(WorkKind::TokenCleanup);
            again.id = fence.id;
            again.attempt = fence.attempt.get();
            again.failures = failures as i32;
            s.queued.push_back((again, Instant::now() + failure.retry_delay));
            Ok(FailOutcome::RetryScheduled { run_after: chrono::Utc::now() })
        } else {
            Ok(FailOutcome::Failed)
        }
    }

    async fn mark_cancelled(&self, fence: Fence) -> Result<WriteOutcome, QueueError> {
        self.write(fence, Write::Cancelled)
    }

    async fn release(&self, fence: Fence) -> Result<WriteOutcome, QueueError> {
        let written = self.write(fence, Write::Release)?;
        let mut s = self.state.lock().unwrap();
        if s.release_requeues {
            let mut again = s.claimed.iter().rev().find(|i| i.id == fence.id).expect("released a claimed item").clone();
            again.status = Status::Queued;
            s.queued.push_front((again, Instant::now()));
        }
        Ok(written)
    }

    async fn request_cancel(&self, _id: WorkItemId) -> Result<CancelOutcome, QueueError> {
        Ok(CancelOutcome::NotFound)
    }

    async fn recover_expired_leases(&self, _max_stalls: i32) -> Result<Vec<Recovered>, QueueError> {
        self.state.lock().unwrap().recoveries.push(Instant::now());
        Ok(Vec::new())
    }

    /// Only what completions wrote: an item that succeeded.
    async fn get(&self, id: WorkItemId) -> Result<Option<WorkItem>, QueueError> {
        let s = self.state.lock().unwrap();
        Ok(s.succeeded.iter().find(|(done, _)| *done == id).map(|_| {
            let mut done = item(WorkKind::TokenCleanup);
            done.id = id;
            done.status = Status::Succeeded;
            done
        }))
    }

    /// Whether a completion under this very claim was written.
    async fn succeeded_under(&self, fence: Fence) -> Result<bool, QueueError> {
        Ok(self.state.lock().unwrap().succeeded.contains(&(fence.id, fence.claim)))
    }
}

/// What the probe handler does.
#[derive(Debug, Clone)]
pub enum Act {
    /// Waits for its token, then returns an error `after` that much more time.
    UntilCancelled {
        after: Duration,
    },
    /// Works for `work`, reporting progress, then succeeds (or returns early with an error when cancelled).
    Work {
        work: Duration,
    },
    Fail {
        retryable: bool,
    },
    /// Returns the error a handler gives when the database was unavailable to it.
    Outage,
    Panic,
}

#[derive(Debug, Default)]
pub struct Record {
    pub started: Vec<Instant>,
    pub cancelled: Vec<Instant>,
    pub ended: Vec<Instant>,
}

#[derive(Clone)]
pub struct Probe {
    pub kind: WorkKind,
    pub act: Act,
    pub record: Arc<Mutex<Record>>,
}

impl Probe {
    pub fn new(kind: WorkKind, act: Act) -> Self {
        Self { kind, act, record: Arc::default() }
    }

    pub fn started(&self) -> Vec<Instant> {
        self.record.lock().unwrap().started.clone()
    }

    pub fn cancelled(&self) -> Vec<Instant> {
        self.record.lock().unwrap().cancelled.clone()
    }

    pub fn ended(&self) -> Vec<Instant> {
        self.record.lock().unwrap().ended.clone()
    }
}

impl Handler for Probe {
    fn kind(&self) -> WorkKind {
        self.kind
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            self.record.lock().unwrap().started.push(Instant::now());
            let result = match self.act.clone() {
                Act::UntilCancelled { after } => {
                    ctx.cancel.cancelled().await;
                    self.record.lock().unwrap().cancelled.push(Instant::now());
                    tokio::time::sleep(after).await;
                    Err(HandlerError::cancelled())
                }
                Act::Work { work } => {
                    ctx.progress.report(serde_json::json!({"step": "working"}));
                    tokio::select! {
                        () = tokio::time::sleep(work) => Ok(Some(serde_json::json!({"done": true}))),
                        () = ctx.cancel.cancelled() => {
                            self.record.lock().unwrap().cancelled.push(Instant::now());
                            Err(HandlerError::cancelled())
                        }
                    }
                }
                Act::Fail { retryable } => {
                    Err(HandlerError { message: "the share is gone".into(), retryable, outage: false })
                }
                Act::Outage => Err(HandlerError::outage("the catalogue is unavailable: connection closed")),
                Act::Panic => panic!("probe exploded"),
            };
            self.record.lock().unwrap().ended.push(Instant::now());
            result
        })
    }
}

pub fn config() -> ExecutorConfig {
    let mut c = ExecutorConfig::new(WorkerId::new("test-worker").unwrap(), ServedConfigs::All);
    c.retry.jitter = 0.0;
    c.recovery_interval = Duration::from_secs(3600);
    c
}

/// Log lines (JSON) written while the guard lives, on this thread.
///
/// One process-wide subscriber writes every line to the capture of the thread that logged it. (A scoped
/// subscriber per test, `set_default`, loses lines when tests share a process, as under plain `cargo test`:
/// tracing caches each callsite's interest across threads, and a test on another thread with no subscriber
/// can leave a callsite disabled for this one.)
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Stops this thread's capture when dropped.
pub struct CaptureGuard(());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| *c.borrow_mut() = None);
    }
}

/// Writes to the current thread's capture, if any.
struct ThreadCapture;

impl std::io::Write for ThreadCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(logs) = &*c.borrow() {
                logs.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub fn capture() -> (Self, CaptureGuard) {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .json()
                .with_max_level(tracing::Level::TRACE)
                .with_current_span(true)
                .with_span_list(false)
                .with_writer(|| ThreadCapture)
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber of this test");
        });
        let logs = Self::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(logs.clone()));
        (logs, CaptureGuard(()))
    }

    pub fn lines(&self) -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&self.0.lock().unwrap()).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    pub fn events(&self) -> Vec<String> {
        self.lines().iter().filter_map(|l| l["fields"]["event"].as_str().map(str::to_owned)).collect()
    }
}
