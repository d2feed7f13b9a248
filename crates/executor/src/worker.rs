//! The claim loop: slots, polling, wake-ups, lease recovery and shutdown.

use std::sync::Arc;

use almanac_domain::{ClaimRequest, WorkItemId, WorkQueue};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::attempt::{self, Outcome};
use crate::config::{ConfigError, ExecutorConfig};
use crate::handler::HandlerRegistry;

/// How a shutdown went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Items released to the queue for another Worker.
    pub released: Vec<WorkItemId>,
    /// Items whose outcome could not be written (database unavailable); lease recovery will requeue them.
    pub unwritten: Vec<WorkItemId>,
}

impl ShutdownReport {
    /// True when everything was written; the binary exits non-zero otherwise.
    pub fn is_clean(&self) -> bool {
        self.unwritten.is_empty()
    }
}

/// Claims work items and runs their handlers, `slots` at a time.
pub struct Executor<Q> {
    queue: Arc<Q>,
    handlers: HandlerRegistry,
    config: Arc<ExecutorConfig>,
    wake: Arc<Notify>,
}

impl<Q: WorkQueue + 'static> Executor<Q> {
    /// An executor over `queue` with these handlers, after checking `config`.
    pub fn new(queue: Arc<Q>, handlers: HandlerRegistry, config: ExecutorConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        if handlers.kinds().is_empty() {
            return Err(ConfigError { key: "handlers", problem: "a Worker needs at least one handler".into() });
        }
        Ok(Self { queue, handlers, config: Arc::new(config), wake: Arc::new(Notify::new()) })
    }

    /// Notify this to wake an idle executor at once (e.g. on a database notification that work was enqueued).
    /// A wake-up that arrives while it is busy is kept for the next wait, so none is lost.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Runs until `shutdown` is cancelled: then stops claiming, gives running handlers the shutdown grace,
    /// cancels and releases what is still running, and reports.
    pub async fn run(self, shutdown: CancellationToken) -> ShutdownReport {
        let request = ClaimRequest {
            worker_id: self.config.worker_id.clone(),
            served: self.config.served,
            kinds: self.handlers.kinds(),
            lease: self.config.lease,
        };
        let stop_recovery = CancellationToken::new();
        let recovery = tokio::spawn(recover_leases(self.queue.clone(), self.config.clone(), stop_recovery.clone()));
        let attempts_shutdown = CancellationToken::new();
        let mut attempts: JoinSet<(WorkItemId, Outcome)> = JoinSet::new();
        let mut report = ShutdownReport::default();
        info!(event = "worker_started", worker_id = %self.config.worker_id, kinds = ?request.kinds, slots = self.config.slots, "worker started");

        while !shutdown.is_cancelled() {
            while attempts.len() < self.config.slots && !shutdown.is_cancelled() {
                let sent_at = Instant::now();
                let claimed = match timeout(self.config.heartbeat_interval, self.queue.claim(&request)).await {
                    Ok(Ok(Some(claimed))) => claimed,
                    // Nothing eligible, or a lost race: wait for the next poll (no immediate retry).
                    Ok(Ok(None)) => break,
                    Ok(Err(e)) => {
                        warn!(event = "claim_failed", error = %e, "could not claim; trying again at the next poll");
                        break;
                    }
                    Err(_) => {
                        warn!(
                            event = "claim_failed",
                            error = "timed out",
                            "could not claim; trying again at the next poll"
                        );
                        break;
                    }
                };
                let Some(handler) = self.handlers.get(claimed.item.kind) else {
                    // The claim only asks for our kinds, so this is a bug; the lease will expire and requeue it.
                    warn!(event = "no_handler", kind = %claimed.item.kind, "claimed an item with no handler");
                    continue;
                };
                let item = &claimed.item;
                let span = info_span!(
                    "attempt",
                    item_id = %item.id,
                    kind = %item.kind,
                    storage_config = item.scope.storage_config().map(|c| c.to_string()),
                    attempt = %claimed.fence.attempt,
                    worker_id = %self.config.worker_id,
                );
                span.in_scope(|| info!(event = "claimed", "claimed"));
                let id = item.id;
                let run = attempt::run(
                    self.queue.clone(),
                    handler,
                    claimed,
                    sent_at,
                    self.config.clone(),
                    attempts_shutdown.clone(),
                );
                attempts.spawn(async move { (id, run.await) }.instrument(span));
            }
            tokio::select! {
                () = shutdown.cancelled() => {}
                Some(done) = attempts.join_next(), if !attempts.is_empty() => {
                    if let Ok((id, outcome)) = done {
                        debug!(item_id = %id, ?outcome, "attempt ended");
                    }
                }
                () = tokio::time::sleep(self.config.poll_interval) => {}
                () = self.wake.notified() => {}
            }
        }

        info!(event = "shutdown_started", running = attempts.len(), "shutting down: no more claims");
        attempts_shutdown.cancel();
        while let Some(done) = attempts.join_next().await {
            match done {
                Ok((id, Outcome::Released)) => report.released.push(id),
                Ok((id, Outcome::Unwritten)) => report.unwritten.push(id),
                Ok(_) => {}
                Err(e) => warn!(error = %e, "an attempt task ended abnormally"),
            }
        }
        stop_recovery.cancel();
        let _ = recovery.await;
        info!(
            event = "worker_stopped",
            released = report.released.len(),
            unwritten = report.unwritten.len(),
            "worker stopped"
        );
        report
    }
}

/// Requeues expired leases on its own interval, whatever the slots are doing (rule 8).
async fn recover_leases<Q: WorkQueue>(queue: Arc<Q>, config: Arc<ExecutorConfig>, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(config.recovery_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        match timeout(config.heartbeat_interval, queue.recover_expired_leases(config.max_stalls)).await {
            Ok(Ok(recovered)) => {
                for r in recovered {
                    warn!(event = "lease_recovered", item_id = %r.id, status = %r.status, stalls = r.stalls, "lease expired; item recovered");
                }
            }
            Ok(Err(e)) => warn!(event = "recovery_failed", error = %e, "lease recovery failed"),
            Err(_) => warn!(event = "recovery_failed", error = "timed out", "lease recovery failed"),
        }
    }
}
