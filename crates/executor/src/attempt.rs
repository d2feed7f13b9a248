//! One attempt: run the handler, beat, keep the self-stop deadline, and write the outcome (rules 5–9).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{
    QueueError, WorkQueue,
    ports::{ClaimedItem, Completed, FailOutcome, Failure, Heartbeat, WriteOutcome},
};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::{Instant, Sleep, error::Elapsed, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::completer::Completer;
use crate::config::ExecutorConfig;
use crate::handler::{Handler, HandlerContext, HandlerError, ProgressReporter};
use crate::pace::SlotHeld;

/// Why the executor cancelled the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// A cancel was requested: the item ends cancelled.
    CancelRequested,
    /// A heartbeat answered Lost: write nothing more.
    Lost,
    /// Half a lease passed without a successful heartbeat: write nothing more.
    SelfStopped,
    /// The shutdown grace ran out: release the item.
    Shutdown,
}

impl Stop {
    /// Whether the attempt may still write (beats and an outcome).
    fn may_write(self) -> bool {
        matches!(self, Stop::CancelRequested | Stop::Shutdown)
    }
}

/// How an attempt ended, as far as the queue knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Succeeded,
    RetryScheduled,
    Failed,
    Cancelled,
    Released,
    /// The attempt no longer held the item; nothing was written.
    Lost,
    /// The attempt stopped itself; nothing was written and lease recovery will requeue the item.
    SelfStopped,
    /// The outcome could not be written (database unavailable); lease recovery will requeue the item.
    Unwritten,
}

type HandlerResult = Result<Result<Option<serde_json::Value>, HandlerError>, JoinError>;
type BeatAnswer = (Instant, Result<Result<Heartbeat, QueueError>, Elapsed>);
type BeatFuture<'a> = Pin<Box<dyn Future<Output = BeatAnswer> + Send + 'a>>;

/// The next item, claimed in the same transaction that completed an attempt, and when that was sent.
pub(crate) type Chained = Option<(Instant, ClaimedItem)>;

/// A claimed item about to run: when its claim was sent, and the slot it runs in.
pub(crate) struct ToRun {
    pub(crate) claimed: ClaimedItem,
    /// It counts as the first successful heartbeat for the self-stop deadline.
    pub(crate) claim_sent_at: Instant,
    /// Given up as soon as the handler has ended.
    pub(crate) slot: SlotHeld,
}

/// Runs one claimed item to its end. On success the completion goes through `completer` and, unless shutting
/// down, also claims the slot's next item (one commit for both), which is returned, with how long the item held
/// its slot.
pub(crate) async fn run<Q: WorkQueue + 'static>(
    queue: Arc<Q>,
    handler: Arc<dyn Handler>,
    to_run: ToRun,
    config: Arc<ExecutorConfig>,
    shutdown: CancellationToken,
    completer: Arc<Completer>,
) -> (Outcome, Chained, Duration) {
    let ToRun { claimed, claim_sent_at, slot } = to_run;
    let attempt = Attempt { queue, claimed, claim_sent_at, config, shutdown, completer };
    let cancel = CancellationToken::new();
    let progress = ProgressReporter::default();
    let ctx = HandlerContext {
        item: attempt.claimed.item.clone(),
        fence: attempt.claimed.fence,
        cancel: cancel.clone(),
        progress: progress.clone(),
    };
    let span = tracing::Span::current();
    let started = Instant::now();
    let handler_task = tokio::spawn(tracing::Instrument::instrument(async move { handler.run(ctx).await }, span));
    let mut watch = Watch::new(&attempt.config, claim_sent_at, cancel);
    let joined = attempt.supervise(&mut watch, handler_task, &progress).await;
    let ran = started.elapsed();
    // The handler has ended: its slot is free for the next item while the outcome is written.
    drop(slot);
    watch.report_stopped_handler();
    let (outcome, chained) = attempt.conclude(watch.stop, joined).await;
    (outcome, chained, ran)
}

/// What an attempt works with.
struct Attempt<Q> {
    queue: Arc<Q>,
    claimed: ClaimedItem,
    claim_sent_at: Instant,
    config: Arc<ExecutorConfig>,
    shutdown: CancellationToken,
    completer: Arc<Completer>,
}

/// The watch over a running handler (rules 6–8): the last good heartbeat, the self-stop deadline's state, and
/// why the handler was stopped, if it was. The timers themselves live in [`Attempt::supervise`].
struct Watch {
    interval: Duration,
    half_lease: Duration,
    last_good_beat: Instant,
    stop: Option<Stop>,
    /// When the attempt stopped writing (lost or self-stopped): its handler may take a while to return.
    stopped_writing_at: Option<Instant>,
    cancel: CancellationToken,
}

impl Watch {
    fn new(config: &ExecutorConfig, claim_sent_at: Instant, cancel: CancellationToken) -> Self {
        Watch {
            interval: config.heartbeat_interval,
            half_lease: config.lease.half(),
            last_good_beat: claim_sent_at,
            stop: None,
            stopped_writing_at: None,
            cancel,
        }
    }

    /// Whether the attempt may still write (beats and an outcome).
    fn may_write(&self) -> bool {
        self.stop.is_none_or(Stop::may_write)
    }

    /// Stops the handler for `why`.
    fn stop(&mut self, why: Stop) {
        self.stop = Some(why);
        if !why.may_write() {
            self.stopped_writing_at = Some(Instant::now());
        }
        self.cancel.cancel();
    }

    /// A heartbeat's answer: a renewal moves the self-stop deadline and may carry a cancel request; Lost stops
    /// the handler and every write.
    fn on_beat(
        &mut self,
        sent_at: Instant,
        answer: Result<Result<Heartbeat, QueueError>, Elapsed>,
        self_stop: Pin<&mut Sleep>,
    ) {
        crate::metrics::heartbeat(
            sent_at,
            match &answer {
                Ok(Ok(Heartbeat::Renewed { .. })) => "renewed",
                Ok(Ok(Heartbeat::Lost)) => "lost",
                Ok(Err(_)) => "error",
                Err(_) => "timeout",
            },
        );
        match answer {
            Ok(Ok(Heartbeat::Renewed { cancel_requested })) => {
                if self.may_write() {
                    self.last_good_beat = self.last_good_beat.max(sent_at);
                    self_stop.reset(self.last_good_beat + self.half_lease);
                }
                if cancel_requested && matches!(self.stop, None | Some(Stop::Shutdown)) {
                    info!(event = "cancel_requested", "a cancel was requested; stopping the handler");
                    self.stop(Stop::CancelRequested);
                }
            }
            Ok(Ok(Heartbeat::Lost)) => {
                if self.may_write() {
                    warn!(
                        event = "lost",
                        "the item is no longer held by this attempt; stopping the handler and writing nothing more"
                    );
                    self.stop(Stop::Lost);
                }
            }
            Ok(Err(e)) => warn!(event = "heartbeat_failed", error = %e, "heartbeat failed"),
            Err(_) => self.beat_timed_out("heartbeat did not answer within one heartbeat interval"),
        }
    }

    /// Half a lease without a successful heartbeat (rule 8): stop, and write nothing. `beat_pending` says
    /// whether a beat was still waiting for its answer (it is given up).
    fn on_self_stop(&mut self, beat_pending: bool) {
        let since = Instant::now() - self.last_good_beat;
        warn!(
            event = "self_stopped",
            since_last_good_beat_ms = since.as_millis() as u64,
            "no successful heartbeat for half a lease: stopping the handler and writing nothing; lease recovery will requeue the item"
        );
        if beat_pending {
            self.beat_timed_out("heartbeat did not answer before the self-stop");
        }
        self.stop(Stop::SelfStopped);
    }

    fn beat_timed_out(&self, message: &'static str) {
        let timeout_ms = self.interval.as_millis() as u64;
        warn!(event = "heartbeat_failed", error = "timed out", timeout_ms, "{message}");
    }

    /// How long a stopped handler kept running matters: that is the window ADR 0008's margin must cover.
    fn report_stopped_handler(&self) {
        if let (Some(stopped), Some(at)) = (self.stop.filter(|s| !s.may_write()), self.stopped_writing_at) {
            let after_stop_ms = elapsed_ms(at);
            warn!(event = "stopped_handler_returned", after_stop_ms, stop = ?stopped, "the stopped handler has returned; nothing was written");
        }
    }
}

impl<Q: WorkQueue + 'static> Attempt<Q> {
    /// Waits for the handler while beating every interval, keeping the self-stop deadline and the shutdown
    /// grace; answers the handler's end.
    async fn supervise(
        &self,
        watch: &mut Watch,
        mut handler_task: JoinHandle<Result<Option<serde_json::Value>, HandlerError>>,
        progress: &ProgressReporter,
    ) -> HandlerResult {
        let interval = watch.interval;
        let mut self_stop = Box::pin(sleep_until(self.claim_sent_at + watch.half_lease));
        let mut beats = tokio::time::interval_at(self.claim_sent_at + interval, interval);
        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut beat: Option<BeatFuture<'_>> = None;
        let mut grace: Option<Pin<Box<Sleep>>> = None;
        let mut self_stop_armed = true;
        loop {
            let may_write = watch.may_write();
            tokio::select! {
                biased;
                joined = &mut handler_task => return joined,
                (sent_at, answer) = async { beat.as_mut().expect("guarded").await }, if beat.is_some() => {
                    beat = None;
                    watch.on_beat(sent_at, answer, self_stop.as_mut());
                }
                () = &mut self_stop, if may_write && self_stop_armed => {
                    // Disarmed here, whatever the watch does: the deadline has done its work.
                    self_stop_armed = false;
                    watch.on_self_stop(beat.take().is_some());
                }
                _ = beats.tick(), if may_write => {
                    if beat.is_some() {
                        // The pending beat reaches its time limit at this very tick; say so before it is replaced.
                        watch.beat_timed_out("heartbeat did not answer within one heartbeat interval");
                    }
                    beat = Some(self.beat(progress.latest()));
                }
                () = self.shutdown.cancelled(), if grace.is_none() && watch.stop.is_none() => {
                    grace = Some(Box::pin(tokio::time::sleep(self.config.shutdown_grace)));
                }
                () = async { grace.as_mut().expect("guarded").await }, if grace.is_some() && watch.stop.is_none() => {
                    info!(event = "shutdown_grace_over", "the shutdown grace is over; stopping the handler");
                    watch.stop(Stop::Shutdown);
                }
            }
        }
    }

    /// One heartbeat, limited to one interval, carrying the handler's latest progress.
    fn beat(&self, latest: Option<serde_json::Value>) -> BeatFuture<'_> {
        let (fence, lease, interval) = (self.claimed.fence, self.config.lease, self.config.heartbeat_interval);
        let sent_at = Instant::now();
        Box::pin(async move { (sent_at, timeout(interval, self.queue.heartbeat(fence, lease, latest.as_ref())).await) })
    }

    /// Writes what the attempt came to (nothing, once lost or self-stopped).
    async fn conclude(&self, stop: Option<Stop>, joined: HandlerResult) -> (Outcome, Chained) {
        let outcome = match (stop, joined) {
            (Some(Stop::Lost), _) => Outcome::Lost,
            (Some(Stop::SelfStopped), _) => Outcome::SelfStopped,
            (_, Ok(Ok(result))) => return self.succeeded(result).await,
            (Some(Stop::CancelRequested), _) => self.cancelled().await,
            (Some(Stop::Shutdown), _) => self.released().await,
            (None, Ok(Err(error))) if error.outage => self.released_after_outage(error).await,
            (None, Ok(Err(error))) => self.fail(error).await,
            (None, Err(join)) => {
                let message = panic_message(join);
                self.fail(HandlerError::retryable(format!("the handler panicked: {message}"))).await
            }
        };
        (outcome, None)
    }

    /// The success, with the other completions waiting at this moment, and (unless stopping or shutting down)
    /// the slot's next item claimed in the same transaction. The completer bounds each batch's write by one
    /// interval; waiting for the batch before it can take one more.
    async fn succeeded(&self, result: Option<serde_json::Value>) -> (Outcome, Chained) {
        // A handler stopped by the shutdown grace ends after the shutdown began: it claims nothing. One that
        // succeeded although a cancel was requested frees its slot like any other.
        let claim_next = !self.shutdown.is_cancelled();
        let interval = self.config.heartbeat_interval;
        let sent_at = Instant::now();
        let answer =
            timeout(2 * interval, self.completer.complete(self.claimed.fence, result, claim_next)).await.ok().flatten();
        let (answer, chained) = match answer {
            Some(Ok(Completed { written, next })) => {
                let chained = match next {
                    Ok(claimed) => claimed.map(|c| (sent_at, c)),
                    Err(e) => {
                        warn!(event = "claim_failed", error = %e, "could not claim after completing; trying again at the next poll");
                        None
                    }
                };
                (Some(Ok(written)), chained)
            }
            Some(Err(e)) => (Some(Err(e)), None),
            None => (None, None),
        };
        let (kind, duration_ms) = (self.claimed.item.kind, elapsed_ms(self.claim_sent_at));
        let outcome = write_outcome(
            "complete",
            answer,
            Outcome::Succeeded,
            || info!(event = "succeeded", %kind, duration_ms, "succeeded"),
        );
        (outcome, chained)
    }

    async fn cancelled(&self) -> Outcome {
        let answer = timeout(self.config.heartbeat_interval, self.queue.mark_cancelled(self.claimed.fence)).await.ok();
        let (kind, duration_ms) = (self.claimed.item.kind, elapsed_ms(self.claim_sent_at));
        write_outcome(
            "mark cancelled",
            answer,
            Outcome::Cancelled,
            || info!(event = "cancelled", %kind, duration_ms, "cancelled on request"),
        )
    }

    async fn released(&self) -> Outcome {
        let answer = timeout(self.config.heartbeat_interval, self.queue.release(self.claimed.fence)).await.ok();
        let (kind, duration_ms) = (self.claimed.item.kind, elapsed_ms(self.claim_sent_at));
        write_outcome(
            "release",
            answer,
            Outcome::Released,
            || info!(event = "released", %kind, duration_ms, "released to the queue for another Worker"),
        )
    }

    /// Safety invariant 9 (docs/safety.md): an outage is not a failure of the work. The item goes back to the
    /// queue as at shutdown; if the release cannot be written either, lease recovery requeues it. It waits one
    /// heartbeat interval first (less if the Worker is shutting down; the lease still holds, so nobody else
    /// takes the config meanwhile): an item that meets the same outage at once comes round once an interval,
    /// never in a tight loop against a database that keeps dropping its connections.
    async fn released_after_outage(&self, error: HandlerError) -> Outcome {
        let interval = self.config.heartbeat_interval;
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = self.shutdown.cancelled() => {}
        }
        let answer = timeout(interval, self.queue.release(self.claimed.fence)).await.ok();
        let (kind, duration_ms) = (self.claimed.item.kind, elapsed_ms(self.claim_sent_at));
        write_outcome("release", answer, Outcome::Released, || {
            warn!(event = "released_after_outage", %kind, duration_ms, error = %error,
                  "the database was unavailable to the handler; released to the queue, no failure counted")
        })
    }

    async fn fail(&self, error: HandlerError) -> Outcome {
        fail(&*self.queue, &self.claimed, &self.config, error, self.claim_sent_at).await
    }
}

/// Milliseconds since `since`, for the outcome events' `duration_ms` (the metrics' item duration histograms).
fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

async fn fail<Q: WorkQueue>(
    queue: &Q,
    claimed: &ClaimedItem,
    config: &ExecutorConfig,
    error: HandlerError,
    claim_sent_at: Instant,
) -> Outcome {
    let (kind, duration_ms) = (claimed.item.kind, elapsed_ms(claim_sent_at));
    let failures = u32::try_from(claimed.item.failures).unwrap_or(0).saturating_add(1);
    let retry_delay = config.retry.delay(failures, rand::random::<f64>());
    let failure = Failure { error: error.message.clone(), retryable: error.retryable, retry_delay };
    let answer = timeout(config.heartbeat_interval, queue.fail(claimed.fence, &failure)).await;
    let written = answer.map(|r| {
        r.map(|outcome| match outcome {
            FailOutcome::RetryScheduled { run_after } => {
                warn!(event = "retry_scheduled", %kind, duration_ms, error = %error, failures, %run_after,
                      retry_in_ms = retry_delay.as_millis() as u64, "failed; will retry");
                Some(Outcome::RetryScheduled)
            }
            FailOutcome::Failed => {
                warn!(event = "failed", %kind, duration_ms, error = %error, failures, retryable = error.retryable, "failed for good");
                Some(Outcome::Failed)
            }
            FailOutcome::Cancelled => {
                info!(event = "cancelled", %kind, duration_ms, error = %error, "failed after a cancel was requested; ended cancelled");
                Some(Outcome::Cancelled)
            }
            FailOutcome::Lost => None,
        })
    });
    match written {
        Ok(Ok(Some(outcome))) => outcome,
        Ok(Ok(None)) => lost("fail"),
        Ok(Err(e)) => unwritten("fail", &e.to_string()),
        Err(_) => unwritten("fail", "timed out"),
    }
}

/// `answer` is `None` when the write did not answer in time.
fn write_outcome(
    what: &str,
    answer: Option<Result<WriteOutcome, QueueError>>,
    success: Outcome,
    log_success: impl FnOnce(),
) -> Outcome {
    match answer {
        Some(Ok(WriteOutcome::Written)) => {
            log_success();
            success
        }
        Some(Ok(WriteOutcome::Lost)) => lost(what),
        Some(Err(e)) => unwritten(what, &e.to_string()),
        None => unwritten(what, "timed out"),
    }
}

fn lost(what: &str) -> Outcome {
    warn!(event = "lost", write = what, "the item is no longer held by this attempt; nothing was written");
    Outcome::Lost
}

fn unwritten(what: &str, error: &str) -> Outcome {
    warn!(
        event = "outcome_unwritten",
        write = what,
        error,
        "could not confirm the outcome; unless it committed all the same, lease recovery will requeue the item"
    );
    Outcome::Unwritten
}

fn panic_message(join: JoinError) -> String {
    match join.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text panic payload".to_owned()),
        Err(join) => format!("the handler task ended abnormally: {join}"),
    }
}
