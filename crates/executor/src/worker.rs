//! The claim loop: slots, polling, wake-ups, lease recovery and shutdown.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{
    QueueError, WorkItemId, WorkQueue,
    ports::{ClaimRequest, ClaimedItem, WriteOutcome},
};
use tokio::sync::{Notify, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::attempt::{self, Chained, Outcome, ToRun};
use crate::completer::Completer;
use crate::config::{ConfigError, ExecutorConfig};
use crate::handler::HandlerRegistry;
use crate::pace::{Next, Pace, SlotHeld};

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
        info!(event = "worker_started", worker_id = %self.config.worker_id, kinds = ?request.kinds, slots = self.config.slots, "worker started");
        // Successful attempts complete through one completer, which writes the completions waiting together
        // and claims their slots' next items in the same transaction.
        let (completer, completions) =
            Completer::start(self.queue.clone(), request.clone(), self.config.heartbeat_interval);
        let mut slots = Slots::new(completer, Pace::new(&self.config), self.config.slots);
        while !shutdown.is_cancelled() {
            while slots.releases.try_join_next().is_some() {}
            self.start_waiting(&mut slots);
            self.claim_for_free_slots(&mut slots, &request);
            let (resume_at, line_due) = (slots.pace.resume_at(), slots.line_due());
            tokio::select! {
                () = shutdown.cancelled() => {}
                Some(landed) = slots.claims.join_next_with_id(), if !slots.claims.is_empty() => {
                    self.claim_landed(&mut slots, landed, &shutdown);
                }
                Some(done) = slots.attempts.join_next(), if !slots.attempts.is_empty() => {
                    self.attempt_ended(&mut slots, done, &shutdown);
                }
                () = sleep_until(line_due.unwrap_or_else(Instant::now)), if line_due.is_some() => {
                    self.hand_back_waited(&mut slots);
                }
                () = sleep_until(resume_at.unwrap_or_else(Instant::now)), if resume_at.is_some() => slots.pace.resume(),
                () = tokio::time::sleep(self.config.poll_interval) => slots.pace.resume(),
                () = self.wake.notified() => slots.pace.woken(),
                // A handler ended: its slot takes the next item in the line (at the top of the loop).
                () = slots.freed.notified() => {}
            }
        }
        let report = self.wind_down(slots, completions).await;
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

    /// Free slots claim together: one claim for all of them (a claim of up to k items of k different configs
    /// is one statement), and for the window of items claimed ahead while items are short (`pace.rs`), and a
    /// new one for room that comes free while it is in flight, so short items do not wait for each other's
    /// claim round trip. After a claim finds fewer than it asked for, no new claim starts before an ended
    /// attempt, a wake-up, the poll or the back-off's end (after a failed claim: the poll); claims already in
    /// flight still land.
    fn claim_for_free_slots(&self, slots: &mut Slots, request: &ClaimRequest) {
        let held = slots.attempts.len() + slots.waiting.len() + slots.asking.values().sum::<usize>();
        let free = slots.pace.capacity().saturating_sub(held);
        if !slots.pace.may_claim() || free == 0 {
            return;
        }
        let (queue, request, wait) = (self.queue.clone(), request.clone(), self.config.heartbeat_interval);
        let task = slots.claims.spawn(async move {
            let sent_at = Instant::now();
            let answer = timeout(wait, queue.claim_many(&request, free)).await;
            crate::metrics::claim(sent_at, crate::metrics::claim_outcome(&answer));
            (sent_at, answer)
        });
        slots.asking.insert(task.id(), free);
    }

    /// A claim landed: its items start in their slots (or, landing as the shutdown began, are handed back).
    fn claim_landed(
        &self,
        slots: &mut Slots,
        landed: Result<(tokio::task::Id, Claimed), tokio::task::JoinError>,
        shutdown: &CancellationToken,
    ) {
        let task = match &landed {
            Ok((task, _)) => *task,
            Err(e) => e.id(),
        };
        let asked = slots.asking.remove(&task).unwrap_or(0);
        let (sent_at, claimed) = match landed {
            Ok((_, (sent_at, Ok(Ok(claimed))))) => (sent_at, claimed),
            Ok((_, (_, Ok(Err(e))))) => {
                warn!(event = "claim_failed", error = %e, "could not claim; trying again at the next poll");
                slots.pace.failed(Instant::now());
                return;
            }
            Ok((_, (_, Err(_)))) => {
                warn!(event = "claim_failed", error = "timed out", "could not claim; trying again at the next poll");
                slots.pace.failed(Instant::now());
                return;
            }
            Err(e) => {
                warn!(event = "claim_failed", error = %e, "a claim task ended abnormally");
                slots.pace.failed(Instant::now());
                return;
            }
        };
        // Fewer than asked for (never more): nothing more was eligible, or a lost race: back off.
        slots.pace.claimed(asked, claimed.len(), Instant::now());
        for claimed in claimed {
            self.line_up_or_hand_back(slots, claimed, sent_at, shutdown);
        }
    }

    /// Lines a claimed item up for a slot (it starts at once when one is free), unless it landed as the
    /// shutdown began: then it is handed back in `wind_down` with the others, never run.
    fn line_up_or_hand_back(
        &self,
        slots: &mut Slots,
        claimed: ClaimedItem,
        sent_at: Instant,
        shutdown: &CancellationToken,
    ) {
        if shutdown.is_cancelled() {
            slots.late_claims.push(claimed);
        } else {
            slots.waiting.push_back(Waiting { claimed, sent_at, arrived: Instant::now() });
            self.start_waiting(slots);
        }
    }

    /// Starts the items waiting in the line, oldest first, in the free slots.
    fn start_waiting(&self, slots: &mut Slots) {
        while !slots.waiting.is_empty() {
            let Ok(permit) = slots.free.clone().try_acquire_owned() else { return };
            let slot = SlotHeld::new(permit, slots.freed.clone());
            let next = slots.waiting.pop_front().expect("not empty");
            self.start_attempt(slots, next.claimed, next.sent_at, slot);
        }
    }

    /// Items that waited in the line as long as they may go back to the queue unrun (for any Worker), and the
    /// window closes: the slots are busy with long items.
    fn hand_back_waited(&self, slots: &mut Slots) {
        let now = Instant::now();
        let mut overdue = Vec::new();
        while slots.line_due().is_some_and(|due| due <= now) {
            overdue.extend(slots.waiting.pop_front().map(|w| w.claimed));
        }
        slots.pace.waited_too_long();
        info!(
            event = "released",
            items = overdue.len(),
            waited_ms = slots.pace.wait().as_millis() as u64,
            "items claimed ahead found no free slot in time: handed back unrun, for any Worker"
        );
        let (queue, wait) = (self.queue.clone(), self.config.heartbeat_interval);
        slots.releases.spawn(async move { release_unrun(&queue, overdue, wait).await });
    }

    /// An attempt ended: the slot's next item, claimed with the completion (one commit for both), is lined up,
    /// and the pace learns how long the attempt took.
    fn attempt_ended(
        &self,
        slots: &mut Slots,
        done: Result<(WorkItemId, Outcome, Chained, Duration), tokio::task::JoinError>,
        shutdown: &CancellationToken,
    ) {
        let Ok((id, outcome, chained, took)) = done else { return };
        debug!(item_id = %id, ?outcome, "attempt ended");
        let next = match (&chained, outcome) {
            (Some(_), _) => Next::Claimed,
            // It found nothing: back off, as after any claim that found less than it asked for.
            (None, Outcome::Succeeded) => Next::FoundNothing,
            (None, _) => Next::NotAsked,
        };
        slots.pace.attempt_ended(took, next, Instant::now());
        if let Some((sent_at, claimed)) = chained {
            self.line_up_or_hand_back(slots, claimed, sent_at, shutdown);
        }
    }

    /// The shutdown: no more claims; what claims in flight bring goes back to the queue at once, for another
    /// Worker, before the running attempts' grace; then items claimed with a completion while the attempts wound
    /// down. Ends with the completer, once every attempt has ended.
    async fn wind_down(&self, mut slots: Slots, completions: JoinHandle<()>) -> ShutdownReport {
        info!(event = "shutdown_started", running = slots.attempts.len(), "shutting down: no more claims");
        slots.attempts_shutdown.cancel();
        let mut report = ShutdownReport::default();
        let waiting: Vec<ClaimedItem> = slots.waiting.drain(..).map(|w| w.claimed).collect();
        slots.late_claims.extend(waiting);
        while let Some(landed) = slots.claims.join_next().await {
            if let Ok((_, Ok(Ok(claimed)))) = landed {
                slots.late_claims.extend(claimed);
            }
        }
        self.hand_back(std::mem::take(&mut slots.late_claims), &mut report).await;
        while let Some(done) = slots.attempts.join_next().await {
            match done {
                Ok((id, Outcome::Released, _, _)) => report.released.push(id),
                Ok((id, Outcome::Unwritten, _, _)) => report.unwritten.push(id),
                Ok((_, _, chained, _)) => slots.late_claims.extend(chained.map(|(_, claimed)| claimed)),
                Err(e) => warn!(error = %e, "an attempt task ended abnormally"),
            }
        }
        self.hand_back(std::mem::take(&mut slots.late_claims), &mut report).await;
        // Items handed back from the line while running: the report counts them among the released.
        while let Some(released) = slots.releases.join_next().await {
            if let Ok(released) = released {
                report.released.extend(released.released);
                report.unwritten.extend(released.unwritten);
            }
        }
        // Every attempt has ended: the completer has answered them all and ends with the last handle.
        drop(slots);
        let _ = completions.await;
        report
    }
}

/// The slots' state in [`Executor::run`]: running attempts, claims in flight, items waiting for a slot, and
/// items to hand back.
struct Slots {
    /// Each attempt answers how long its handler held its slot.
    attempts: JoinSet<(WorkItemId, Outcome, Chained, Duration)>,
    claims: JoinSet<Claimed>,
    /// Items the claims in flight ask for, by task.
    asking: HashMap<tokio::task::Id, usize>,
    /// Items claimed, waiting for a slot, oldest first.
    waiting: VecDeque<Waiting>,
    /// Items handed back from the line, being released.
    releases: JoinSet<ShutdownReport>,
    /// How far ahead to claim, and when to claim again.
    pace: Pace,
    /// The slots: a permit per handler running.
    free: Arc<Semaphore>,
    /// Told when a handler ended and gave its slot up.
    freed: Arc<Notify>,
    /// Items claimed as the shutdown began, never run: handed back.
    late_claims: Vec<ClaimedItem>,
    /// Cancelled when the shutdown begins: the running attempts' grace starts.
    attempts_shutdown: CancellationToken,
    completer: Arc<Completer>,
}

/// A claimed item waiting for a slot: the claim's send time, and when it came.
struct Waiting {
    claimed: ClaimedItem,
    sent_at: Instant,
    arrived: Instant,
}

impl Slots {
    fn new(completer: Arc<Completer>, pace: Pace, slots: usize) -> Self {
        Slots {
            free: Arc::new(Semaphore::new(slots)),
            freed: Arc::new(Notify::new()),
            attempts: JoinSet::new(),
            claims: JoinSet::new(),
            asking: HashMap::new(),
            waiting: VecDeque::new(),
            releases: JoinSet::new(),
            pace,
            late_claims: Vec::new(),
            attempts_shutdown: CancellationToken::new(),
            completer,
        }
    }

    /// When the oldest item in the line has waited as long as it may.
    fn line_due(&self) -> Option<Instant> {
        self.waiting.front().map(|w| w.arrived + self.pace.wait())
    }
}

/// A claim's send time and what it came to (`Err` when it timed out).
type Claimed = (Instant, Result<Result<Vec<ClaimedItem>, QueueError>, tokio::time::error::Elapsed>);

impl<Q: WorkQueue + 'static> Executor<Q> {
    /// Releases items claimed while shutting down (never run), all at once.
    async fn hand_back(&self, claimed: Vec<ClaimedItem>, report: &mut ShutdownReport) {
        let released = release_unrun(&self.queue, claimed, self.config.heartbeat_interval).await;
        report.released.extend(released.released);
        report.unwritten.extend(released.unwritten);
    }

    /// Starts the attempt of a claimed item in its slot.
    fn start_attempt(&self, slots: &mut Slots, claimed: ClaimedItem, sent_at: Instant, slot: SlotHeld) {
        let Some(handler) = self.handlers.get(claimed.item.kind) else {
            // The claim only asks for our kinds, so this is a bug; the lease will expire and requeue it.
            warn!(event = "no_handler", kind = %claimed.item.kind, "claimed an item with no handler");
            return;
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
            ToRun { claimed, claim_sent_at: sent_at, slot },
            self.config.clone(),
            slots.attempts_shutdown.clone(),
            slots.completer.clone(),
        );
        slots.attempts.spawn(
            async move {
                let (outcome, chained, ran) = run.await;
                (id, outcome, chained, ran)
            }
            .instrument(span),
        );
    }
}

/// Releases items that were claimed but never run (at shutdown, or for an attempt that stopped waiting), all at
/// once, each within `wait`: which went back to the queue, and which could not be written (lease recovery
/// requeues those).
pub(crate) async fn release_unrun<Q: WorkQueue + 'static>(
    queue: &Arc<Q>,
    claimed: Vec<ClaimedItem>,
    wait: std::time::Duration,
) -> ShutdownReport {
    let mut report = ShutdownReport::default();
    let mut releases = JoinSet::new();
    for c in claimed {
        let queue = queue.clone();
        releases.spawn(async move { (c.item.id, timeout(wait, queue.release(c.fence)).await) });
    }
    while let Some(done) = releases.join_next().await {
        let Ok((id, answer)) = done else { continue };
        match answer {
            Ok(Ok(WriteOutcome::Written)) => report.released.push(id),
            Ok(Ok(WriteOutcome::Lost)) => {
                warn!(event = "lost", item_id = %id, "an item claimed but never run was no longer held; nothing was written");
            }
            _ => {
                warn!(event = "release_failed", item_id = %id, "could not hand back an item claimed but never run; lease recovery will requeue it");
                report.unwritten.push(id);
            }
        }
    }
    report
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
