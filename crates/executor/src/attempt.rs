//! One attempt: run the handler, beat, keep the self-stop deadline, and write the outcome (rules 5–9).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use almanac_domain::{ClaimedItem, Completed, FailOutcome, Failure, Heartbeat, QueueError, WorkQueue, WriteOutcome};
use tokio::task::JoinError;
use tokio::time::{Instant, error::Elapsed, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::completer::Completer;
use crate::config::ExecutorConfig;
use crate::handler::{Handler, HandlerContext, HandlerError, ProgressReporter};

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

/// Runs one claimed item to its end. `claim_sent_at` is when the claim was sent: it counts as the first
/// successful heartbeat for the self-stop deadline. On success the completion goes through `completer` and,
/// unless shutting down, also claims the slot's next item (one commit for both), which is returned.
pub(crate) async fn run<Q: WorkQueue + 'static>(
    queue: Arc<Q>,
    handler: Arc<dyn Handler>,
    claimed: ClaimedItem,
    claim_sent_at: Instant,
    config: Arc<ExecutorConfig>,
    shutdown: CancellationToken,
    completer: Arc<Completer>,
) -> (Outcome, Chained) {
    let fence = claimed.fence;
    let cancel = CancellationToken::new();
    let progress = ProgressReporter::default();
    let ctx = HandlerContext { item: claimed.item.clone(), fence, cancel: cancel.clone(), progress: progress.clone() };
    let span = tracing::Span::current();
    let mut handler_task = tokio::spawn(tracing::Instrument::instrument(async move { handler.run(ctx).await }, span));

    let interval = config.heartbeat_interval;
    let half_lease = config.lease.half();
    let mut last_good_beat = claim_sent_at;
    let self_stop = sleep_until(claim_sent_at + half_lease);
    tokio::pin!(self_stop);
    let mut self_stop_armed = true;
    let mut beats = tokio::time::interval_at(claim_sent_at + interval, interval);
    beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut beat: Option<BeatFuture<'_>> = None;
    let mut stop: Option<Stop> = None;
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    // When the attempt stopped writing (lost or self-stopped): its handler may take a while to return.
    let mut stopped_writing_at: Option<Instant> = None;

    let joined: HandlerResult = loop {
        let may_write = stop.is_none_or(Stop::may_write);
        tokio::select! {
            biased;
            joined = &mut handler_task => break joined,
            (sent_at, answer) = async { beat.as_mut().expect("guarded").await }, if beat.is_some() => {
                beat = None;
                crate::metrics::heartbeat(sent_at, match &answer {
                    Ok(Ok(Heartbeat::Renewed { .. })) => "renewed",
                    Ok(Ok(Heartbeat::Lost)) => "lost",
                    Ok(Err(_)) => "error",
                    Err(_) => "timeout",
                });
                match answer {
                    Ok(Ok(Heartbeat::Renewed { cancel_requested })) => {
                        if may_write {
                            last_good_beat = last_good_beat.max(sent_at);
                            self_stop.as_mut().reset(last_good_beat + half_lease);
                        }
                        if cancel_requested && matches!(stop, None | Some(Stop::Shutdown)) {
                            info!(event = "cancel_requested", "a cancel was requested; stopping the handler");
                            stop = Some(Stop::CancelRequested);
                            cancel.cancel();
                        }
                    }
                    Ok(Ok(Heartbeat::Lost)) => {
                        if may_write {
                            warn!(event = "lost", "the item is no longer held by this attempt; stopping the handler and writing nothing more");
                            stop = Some(Stop::Lost);
                            stopped_writing_at = Some(Instant::now());
                            cancel.cancel();
                        }
                    }
                    Ok(Err(e)) => warn!(event = "heartbeat_failed", error = %e, "heartbeat failed"),
                    Err(_) => warn!(event = "heartbeat_failed", error = "timed out", timeout_ms = interval.as_millis() as u64, "heartbeat did not answer within one heartbeat interval"),
                }
            }
            () = &mut self_stop, if may_write && self_stop_armed => {
                let since = Instant::now() - last_good_beat;
                warn!(
                    event = "self_stopped",
                    since_last_good_beat_ms = since.as_millis() as u64,
                    "no successful heartbeat for half a lease: stopping the handler and writing nothing; lease recovery will requeue the item"
                );
                stop = Some(Stop::SelfStopped);
                stopped_writing_at = Some(Instant::now());
                if beat.take().is_some() {
                    warn!(event = "heartbeat_failed", error = "timed out", timeout_ms = interval.as_millis() as u64, "heartbeat did not answer before the self-stop");
                }
                cancel.cancel();
                // Disarm: the deadline has done its work.
                self_stop_armed = false;
            }
            _ = beats.tick(), if may_write => {
                if beat.is_some() {
                    // The pending beat reaches its time limit at this very tick; say so before it is replaced.
                    warn!(event = "heartbeat_failed", error = "timed out", timeout_ms = interval.as_millis() as u64, "heartbeat did not answer within one heartbeat interval");
                }
                let (queue, lease, latest) = (&queue, config.lease, progress.latest());
                let sent_at = Instant::now();
                beat = Some(Box::pin(async move {
                    (sent_at, timeout(interval, queue.heartbeat(fence, lease, latest.as_ref())).await)
                }));
            }
            () = shutdown.cancelled(), if grace.is_none() && stop.is_none() => {
                grace = Some(Box::pin(tokio::time::sleep(config.shutdown_grace)));
            }
            () = async { grace.as_mut().expect("guarded").await }, if grace.is_some() && stop.is_none() => {
                info!(event = "shutdown_grace_over", "the shutdown grace is over; stopping the handler");
                stop = Some(Stop::Shutdown);
                cancel.cancel();
            }
        }
    };
    drop(beat);

    if let (Some(stopped), Some(at)) = (stop.filter(|s| !s.may_write()), stopped_writing_at) {
        // How long a stopped handler kept running matters: that is the window ADR 0008's margin must cover.
        let after_stop_ms = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
        warn!(event = "stopped_handler_returned", after_stop_ms, stop = ?stopped, "the stopped handler has returned; nothing was written");
    }
    let outcome = match (stop, joined) {
        (Some(Stop::Lost), _) => Outcome::Lost,
        (Some(Stop::SelfStopped), _) => Outcome::SelfStopped,
        (_, Ok(Ok(result))) => {
            // With the other completions waiting at this moment, and (unless stopping or shutting down) the
            // slot's next item claimed in the same transaction. The completer bounds each batch's write by one
            // interval; waiting for the batch before it can take one more.
            let claim_next = stop.is_none() && !shutdown.is_cancelled();
            let sent_at = Instant::now();
            let answer = timeout(2 * interval, completer.complete(fence, result, claim_next)).await.ok().flatten();
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
            let outcome = write_outcome(
                "complete",
                answer,
                Outcome::Succeeded,
                || info!(event = "succeeded", kind = %claimed.item.kind, duration_ms = elapsed_ms(claim_sent_at), "succeeded"),
            );
            return (outcome, chained);
        }
        (Some(Stop::CancelRequested), _) => {
            let answer = timeout(interval, queue.mark_cancelled(fence)).await.ok();
            write_outcome(
                "mark cancelled",
                answer,
                Outcome::Cancelled,
                || info!(event = "cancelled", kind = %claimed.item.kind, duration_ms = elapsed_ms(claim_sent_at), "cancelled on request"),
            )
        }
        (Some(Stop::Shutdown), _) => {
            let answer = timeout(interval, queue.release(fence)).await.ok();
            write_outcome(
                "release",
                answer,
                Outcome::Released,
                || info!(event = "released", kind = %claimed.item.kind, duration_ms = elapsed_ms(claim_sent_at), "released to the queue for another Worker"),
            )
        }
        // Safety invariant 9: an outage is not a failure of the work. The item goes back to the queue as at
        // shutdown; if the release cannot be written either, lease recovery requeues it. It waits one heartbeat
        // interval first (less if the Worker is shutting down; the lease still holds, so nobody else takes the
        // config meanwhile): an item that meets the same outage at once comes round once an interval, never in a
        // tight loop against a database that keeps dropping its connections.
        (None, Ok(Err(error))) if error.outage => {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = shutdown.cancelled() => {}
            }
            let answer = timeout(interval, queue.release(fence)).await.ok();
            write_outcome("release", answer, Outcome::Released, || {
                warn!(event = "released_after_outage", kind = %claimed.item.kind, duration_ms = elapsed_ms(claim_sent_at),
                      error = %error, "the database was unavailable to the handler; released to the queue, no failure counted")
            })
        }
        (None, Ok(Err(error))) => fail(&*queue, &claimed, &config, error, claim_sent_at).await,
        (None, Err(join)) => {
            let message = panic_message(join);
            let error = HandlerError::retryable(format!("the handler panicked: {message}"));
            fail(&*queue, &claimed, &config, error, claim_sent_at).await
        }
    };
    (outcome, None)
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
        "could not write the outcome; lease recovery will requeue the item"
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
