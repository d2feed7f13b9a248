//! The executor's rules on paused time with an in-memory queue (rules 5–9 of ADR 0008).

mod fake;

use std::sync::Arc;
use std::time::Duration;

use almanac_domain::WorkKind;
use almanac_executor::{Executor, HandlerRegistry, ShutdownReport};
use fake::{Act, Beat, FakeQueue, Logs, Probe, Write, config, item};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;

const SECOND: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<ShutdownReport>,
    start: Instant,
}

impl Running {
    async fn stop(self) -> ShutdownReport {
        self.shutdown.cancel();
        self.task.await.unwrap()
    }

    async fn at(&self, offset: Duration) {
        sleep_until(self.start + offset).await;
    }
}

fn start(queue: &FakeQueue, probe: &Probe, config: almanac_executor::ExecutorConfig) -> Running {
    let executor =
        Executor::new(Arc::new(queue.clone()), HandlerRegistry::new().register(probe.clone()), config).unwrap();
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn(executor.run(shutdown.clone()));
    Running { shutdown, task, start }
}

fn one(kind: WorkKind) -> (FakeQueue, almanac_domain::WorkItemId) {
    let item = item(kind);
    let id = item.id;
    (FakeQueue::with_items([item]), id)
}

#[tokio::test(start_paused = true)]
async fn heartbeats_fail_continuously_handler_cancelled_at_half_a_lease_not_before() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    queue.set_beat(Beat::Fail);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::UntilCancelled { after: Duration::ZERO });
    let run = start(&queue, &probe, config());

    run.at(Duration::from_millis(29_999)).await;
    assert!(probe.cancelled().is_empty(), "cancelled before half a lease");
    run.at(40 * SECOND).await;
    let claimed_at = queue.claim_times()[0];
    assert_eq!(probe.cancelled(), [claimed_at + 30 * SECOND], "cancelled at exactly half a lease");
    assert_eq!(queue.beat_times(), [claimed_at + 10 * SECOND, claimed_at + 20 * SECOND]);
    run.stop().await;
    assert!(queue.writes().is_empty());
}

#[tokio::test(start_paused = true)]
async fn one_successful_beat_resets_the_self_stop_clock() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::UntilCancelled { after: Duration::ZERO });
    let run = start(&queue, &probe, config());
    run.at(15 * SECOND).await; // the beat at 10 s succeeded
    queue.set_beat(Beat::Fail);
    run.at(39 * SECOND).await;
    assert!(probe.cancelled().is_empty(), "the good beat at 10 s moved the deadline to 40 s");
    run.at(60 * SECOND).await;
    let claimed_at = queue.claim_times()[0];
    assert_eq!(probe.cancelled(), [claimed_at + 40 * SECOND]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn heartbeat_call_that_never_completes_still_cancels_at_half_a_lease() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    queue.set_beat(Beat::Hang);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::UntilCancelled { after: Duration::ZERO });
    let (logs, _guard) = Logs::capture();
    let run = start(&queue, &probe, config());
    run.at(45 * SECOND).await;
    let claimed_at = queue.claim_times()[0];
    assert_eq!(probe.cancelled(), [claimed_at + 30 * SECOND]);
    // The hung call at 10 s was given up after one interval and the next beat still went out on time.
    assert_eq!(queue.beat_times(), [claimed_at + 10 * SECOND, claimed_at + 20 * SECOND]);
    let timeouts = logs.lines().iter().filter(|l| l["fields"]["event"] == "heartbeat_failed").count();
    assert_eq!(timeouts, 2, "each hung beat is reported as failed, none replaced silently");
    run.stop().await;
    assert!(queue.writes().is_empty());
}

#[tokio::test(start_paused = true)]
async fn database_answers_again_after_the_self_stop_nothing_is_written_and_self_stopped_is_logged() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    queue.set_beat(Beat::Fail);
    // The handler takes 5 s to wind down and then reports an error; by then the database answers again.
    let probe = Probe::new(WorkKind::TokenCleanup, Act::UntilCancelled { after: 5 * SECOND });
    let (logs, _guard) = Logs::capture();
    let run = start(&queue, &probe, config());
    run.at(31 * SECOND).await;
    queue.set_beat(Beat::Renew);
    run.at(60 * SECOND).await;
    assert_eq!(probe.ended().len(), 1, "the handler returned its error");
    assert!(queue.writes().is_empty(), "a self-stopped attempt writes nothing: {:?}", queue.writes());
    let beats_after_stop = queue.beat_times().iter().filter(|t| **t > run.start + 30 * SECOND).count();
    assert_eq!(beats_after_stop, 0, "no heartbeat after the self-stop");
    let stopped: Vec<_> = logs.lines().into_iter().filter(|l| l["fields"]["event"] == "self_stopped").collect();
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0]["span"]["item_id"], id.to_string());
    assert_eq!(stopped[0]["fields"]["since_last_good_beat_ms"], 30_000);
    let returned: Vec<_> =
        logs.lines().into_iter().filter(|l| l["fields"]["event"] == "stopped_handler_returned").collect();
    assert_eq!(returned.len(), 1, "the late return of the stopped handler is logged");
    assert_eq!(returned[0]["fields"]["after_stop_ms"], 5_000);
    assert!(!logs.events().iter().any(|e| e == "failed" || e == "retry_scheduled"));
    let report = run.stop().await;
    assert!(report.is_clean());
}

#[tokio::test(start_paused = true)]
async fn self_stopped_handler_that_returns_an_error_at_once_is_not_failed() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    queue.set_beat(Beat::Fail);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::UntilCancelled { after: Duration::ZERO });
    let run = start(&queue, &probe, config());
    run.at(30 * SECOND).await;
    queue.set_beat(Beat::Renew);
    run.at(40 * SECOND).await;
    assert_eq!(probe.ended().len(), 1);
    assert!(queue.writes().is_empty());
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn lost_cancels_the_handler_and_writes_nothing() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    queue.set_beat(Beat::Lost);
    // Slow to stop: the attempt is still winding down when the self-stop deadline would have come.
    let probe = Probe::new(WorkKind::TokenCleanup, Act::UntilCancelled { after: 60 * SECOND });
    let (logs, _guard) = Logs::capture();
    let run = start(&queue, &probe, config());
    run.at(80 * SECOND).await;
    let claimed_at = queue.claim_times()[0];
    assert_eq!(probe.cancelled(), [claimed_at + 10 * SECOND]);
    assert_eq!(probe.ended(), [claimed_at + 70 * SECOND]);
    assert_eq!(queue.beat_times().len(), 1, "no beat after Lost");
    assert!(queue.writes().is_empty());
    let events = logs.events();
    assert!(events.contains(&"lost".to_owned()));
    assert!(!events.contains(&"self_stopped".to_owned()), "a lost attempt has nothing left to self-stop");
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cancel_request_cancels_the_handler_and_ends_cancelled() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    queue.set_beat(Beat::CancelRequested);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 3600 * SECOND });
    let run = start(&queue, &probe, config());
    run.at(11 * SECOND).await;
    assert_eq!(probe.cancelled().len(), 1);
    let writes = queue.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!((writes[0].0, &writes[0].1), (id, &Write::Cancelled));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_handler_winding_down_after_a_cancel_request_keeps_its_lease_alive() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    queue.set_beat(Beat::CancelRequested);
    // Takes 25 s to stop after being told to.
    let probe = Probe::new(WorkKind::TokenCleanup, Act::UntilCancelled { after: 25 * SECOND });
    let run = start(&queue, &probe, config());
    run.at(40 * SECOND).await;
    let claimed_at = queue.claim_times()[0];
    let beats = queue.beat_times();
    assert_eq!(beats, [10, 20, 30].map(|s| claimed_at + s * SECOND), "beats go on while it winds down");
    let writes = queue.writes();
    assert_eq!((writes.len(), &writes[0].1, writes[0].0), (1, &Write::Cancelled, id));
    assert_eq!(writes[0].2, claimed_at + 35 * SECOND);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_handler_winding_down_after_the_shutdown_grace_keeps_its_lease_alive() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::UntilCancelled { after: 15 * SECOND });
    let mut c = config();
    c.shutdown_grace = 5 * SECOND;
    let run = start(&queue, &probe, c);
    run.at(2 * SECOND).await;
    let report = run.stop().await;
    let claimed_at = queue.claim_times()[0];
    // Cancelled at 7 s, returns at 22 s: beats at 10 and 20 s kept the lease alive meanwhile.
    assert_eq!(queue.beat_times(), [claimed_at + 10 * SECOND, claimed_at + 20 * SECOND]);
    assert_eq!(report.released.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn success_completes_with_the_result_and_progress_rides_on_heartbeats() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 25 * SECOND });
    let (logs, _guard) = Logs::capture();
    let run = start(&queue, &probe, config());
    run.at(30 * SECOND).await;
    let succeeded: Vec<_> = logs.lines().into_iter().filter(|l| l["fields"]["event"] == "succeeded").collect();
    assert_eq!(succeeded.len(), 1);
    assert_eq!(succeeded[0]["fields"]["duration_ms"], 25_000, "the outcome carries the time since the claim");
    assert_eq!(succeeded[0]["fields"]["kind"], "token_cleanup");
    let writes = queue.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!((writes[0].0, &writes[0].1), (id, &Write::Complete(Some(serde_json::json!({"done": true})))));
    let beats = queue.state.lock().unwrap().beats.clone();
    assert_eq!(beats.len(), 2);
    assert!(beats.iter().all(|(_, p)| p == &Some(serde_json::json!({"step": "working"}))));
    run.stop().await;
}

/// A batch of completions whose connection died (before writing, or after its commit with the answer lost) is
/// written again on a fresh connection: the item succeeds once, runs once, and nothing waits for lease recovery.
#[tokio::test(start_paused = true)]
async fn completions_whose_connection_died_are_written_again_and_the_item_runs_once() {
    for (fail, lose_answer) in [(1, 0), (3, 0), (0, 1), (2, 1)] {
        let (queue, id) = one(WorkKind::TokenCleanup);
        {
            let mut s = queue.state.lock().unwrap();
            s.completions_fail = fail;
            s.completions_lose_answer = lose_answer;
        }
        let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 5 * SECOND });
        let (logs, _guard) = Logs::capture();
        let run = start(&queue, &probe, config());
        run.at(20 * SECOND).await;
        let events = logs.events();
        assert_eq!(probe.started().len(), 1, "({fail}, {lose_answer}): ran again");
        let completes: Vec<_> =
            queue.writes().into_iter().filter(|(item, w, _)| *item == id && matches!(w, Write::Complete(_))).collect();
        assert_eq!(completes.len(), 1, "({fail}, {lose_answer}): completed once");
        assert_eq!(events.iter().filter(|e| *e == "completion_retry").count(), fail + lose_answer);
        assert_eq!(events.iter().filter(|e| *e == "succeeded").count(), 1, "({fail}, {lose_answer}): {events:?}");
        assert!(!events.iter().any(|e| e == "lost" || e == "outcome_unwritten"), "({fail}, {lose_answer}): {events:?}");
        run.stop().await;
    }
}

/// After an outage, a completion the store answers Lost is looked up under its own claim: it counts as written
/// only if the item succeeded under that claim. One whose claim was taken back meanwhile (its lease recovered)
/// stays lost, whatever the outage.
#[tokio::test(start_paused = true)]
async fn after_an_outage_a_completion_whose_claim_was_taken_back_is_still_lost() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    {
        let mut s = queue.state.lock().unwrap();
        s.completions_fail = 1;
        s.claims_taken_back.push(id);
    }
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 5 * SECOND });
    let (logs, _guard) = Logs::capture();
    let run = start(&queue, &probe, config());
    run.at(20 * SECOND).await;
    let events = logs.events();
    assert_eq!(events.iter().filter(|e| *e == "completion_retry").count(), 1, "{events:?}");
    assert_eq!(events.iter().filter(|e| *e == "lost").count(), 1, "{events:?}");
    assert!(!events.iter().any(|e| e == "succeeded"), "{events:?}");
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn handler_error_is_retried_with_backoff_then_failed_at_the_budget() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Fail { retryable: true });
    let mut c = config();
    c.retry.base = 60 * SECOND;
    let (logs, _guard) = Logs::capture();
    let run = start(&queue, &probe, c);
    run.at(600 * SECOND).await;
    let fails: Vec<_> = queue
        .writes()
        .into_iter()
        .map(|(item, w, at)| match w {
            Write::Fail(f) => (item, f.retry_delay, f.retryable, at),
            other => panic!("unexpected write {other:?}"),
        })
        .collect();
    assert_eq!(fails.len(), 3, "three attempts: the fake's budget");
    assert!(fails.iter().all(|f| f.0 == id && f.2));
    assert_eq!(fails.iter().map(|f| f.1).collect::<Vec<_>>(), [60 * SECOND, 120 * SECOND, 240 * SECOND]);
    let started = probe.started();
    let waited = started[1] - started[0];
    assert!(
        (60 * SECOND..=65 * SECOND).contains(&waited),
        "the retry waited out its backoff, then at most a poll: {waited:?}"
    );
    assert!(started[2] - started[1] >= 120 * SECOND);
    let events = logs.events();
    let failed: Vec<_> = logs.lines().into_iter().filter(|l| l["fields"]["event"] == "failed").collect();
    let last_claim = *queue.claim_times().iter().rev().find(|t| **t <= started[2]).unwrap();
    assert_eq!(failed[0]["fields"]["duration_ms"], (started[2] - last_claim).as_millis() as u64);
    assert_eq!(events.iter().filter(|e| *e == "retry_scheduled").count(), 2);
    assert_eq!(events.iter().filter(|e| *e == "failed").count(), 1);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn non_retryable_error_is_reported_as_such() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Fail { retryable: false });
    let run = start(&queue, &probe, config());
    run.at(SECOND).await;
    let writes = queue.writes();
    assert!(matches!(&writes[..], [(_, Write::Fail(f), _)] if !f.retryable && f.error == "the share is gone"));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_outage_in_a_handler_releases_the_item_and_counts_no_failure() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Outage);
    let (logs, _guard) = Logs::capture();
    let run = start(&queue, &probe, config());
    run.at(SECOND).await;
    assert!(queue.writes().is_empty(), "released before a heartbeat interval passed: {:?}", queue.writes());
    run.at(11 * SECOND).await;
    let writes = queue.writes();
    assert!(matches!(&writes[..], [(item, Write::Release, _), ..] if *item == id), "{writes:?}");
    assert_eq!(writes[0].2 - probe.ended()[0], 10 * SECOND, "released one heartbeat interval after the handler");
    assert!(
        !writes.iter().any(|(_, w, _)| matches!(w, Write::Fail(_))),
        "an outage was counted as a failure: {writes:?}"
    );
    assert!(logs.events().iter().any(|e| e == "released_after_outage"), "{:?}", logs.events());
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn panic_in_a_handler_is_a_failure_with_its_message() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Panic);
    let run = start(&queue, &probe, config());
    run.at(SECOND).await;
    let writes = queue.writes();
    assert!(
        matches!(&writes[..], [(_, Write::Fail(f), _), ..] if f.error.contains("panicked") && f.error.contains("probe exploded")),
        "{writes:?}"
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_the_grace_then_cancels_and_releases() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 3600 * SECOND });
    let run = start(&queue, &probe, config());
    run.at(5 * SECOND).await;
    let shutdown_at = Instant::now();
    let report = run.stop().await;
    assert_eq!(probe.cancelled(), [shutdown_at + 30 * SECOND], "cancelled when the grace ran out");
    assert_eq!(report.released, [id]);
    assert!(report.is_clean());
    assert!(matches!(&queue.writes()[..], [(_, Write::Release, _)]));
}

#[tokio::test(start_paused = true)]
async fn handler_that_finishes_within_the_grace_completes() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 20 * SECOND });
    let run = start(&queue, &probe, config());
    run.at(5 * SECOND).await;
    let report = run.stop().await;
    assert!(report.released.is_empty());
    assert!(matches!(&queue.writes()[..], [(_, Write::Complete(_), _)]));
    assert!(probe.cancelled().is_empty());
}

#[tokio::test(start_paused = true)]
async fn release_that_cannot_be_written_makes_an_unclean_shutdown() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 3600 * SECOND });
    let run = start(&queue, &probe, config());
    run.at(5 * SECOND).await;
    queue.state.lock().unwrap().writes_fail = true;
    let report = run.stop().await;
    assert_eq!(report.unwritten, [id]);
    assert!(!report.is_clean());
}

#[tokio::test(start_paused = true)]
async fn idle_worker_polls_and_a_finished_item_triggers_an_immediate_claim() {
    let queue = FakeQueue::with_items([item(WorkKind::TokenCleanup), item(WorkKind::TokenCleanup)]);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 2 * SECOND });
    let run = start(&queue, &probe, config());
    run.at(13 * SECOND).await;
    let s = run.start;
    assert_eq!(probe.started(), [s, s + 2 * SECOND], "the second item is claimed as soon as the first ends");
    // Then nothing is left: the completion at 4 s claims with it and finds nothing; the claims after it back
    // off, 50 ms doubling up to the poll interval, and come no more often than it from then on.
    let claims = queue.claim_times();
    assert_eq!(claims[..3], [s, s + 2 * SECOND, s + 4 * SECOND]);
    assert_eq!(gaps(&claims[2..]), [50, 100, 200, 400, 800, 1600, 3200].map(|ms| ms * MS));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_frees_its_slot_for_a_claim_at_once() {
    let queue = FakeQueue::with_items([item(WorkKind::TokenCleanup), item(WorkKind::TokenCleanup)]);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Fail { retryable: false });
    let mut c = config();
    c.slots = 1;
    let run = start(&queue, &probe, c);
    run.at(3 * SECOND).await;
    let s = run.start;
    // Only a success claims its slot's next item with its completion; a failure's slot claims on its own, at
    // once, not at the next poll (5 s).
    assert_eq!(probe.started(), [s, s], "the second item is claimed as soon as the first failed");
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_while_a_claim_is_in_flight_asks_for_no_slot_twice() {
    let queue = FakeQueue::with_items((0..4).map(|_| item(WorkKind::TokenCleanup)));
    queue.state.lock().unwrap().claim_delay = 2 * SECOND;
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 10 * SECOND });
    let mut c = config();
    c.slots = 2;
    let executor = Executor::new(Arc::new(queue.clone()), HandlerRegistry::new().register(probe.clone()), c).unwrap();
    let waker = executor.waker();
    let shutdown = CancellationToken::new();
    let start_at = Instant::now();
    let task = tokio::spawn(executor.run(shutdown.clone()));
    sleep(SECOND).await;
    // Both slots are asked for by the claim in flight: the wake-up finds no free slot.
    waker.notify_one();
    sleep(2 * SECOND).await;
    // The claims sent, not only those answered (the fake never answers a flood of claims at one instant).
    assert_eq!(queue.claim_times(), [start_at], "one claim, for the two slots");
    assert_eq!(queue.state.lock().unwrap().claim_limits, [2]);
    assert_eq!(probe.started(), [start_at + 2 * SECOND; 2]);
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn wake_up_claims_at_once_instead_of_waiting_for_the_poll() {
    let queue = FakeQueue::default();
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: SECOND });
    let executor =
        Executor::new(Arc::new(queue.clone()), HandlerRegistry::new().register(probe.clone()), config()).unwrap();
    let waker = executor.waker();
    let shutdown = CancellationToken::new();
    let start_at = Instant::now();
    let task = tokio::spawn(executor.run(shutdown.clone()));
    sleep(2 * SECOND).await;
    queue.state.lock().unwrap().queued.push_back((item(WorkKind::TokenCleanup), Instant::now()));
    waker.notify_one();
    sleep(SECOND / 2).await;
    assert_eq!(probe.started(), [start_at + 2 * SECOND]);
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn slots_run_items_side_by_side_and_claims_ask_only_for_registered_kinds() {
    let queue =
        FakeQueue::with_items([item(WorkKind::TokenCleanup), item(WorkKind::Crawl), item(WorkKind::TokenCleanup)]);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 10 * SECOND });
    let mut c = config();
    c.slots = 2;
    let run = start(&queue, &probe, c);
    run.at(SECOND).await;
    assert_eq!(probe.started(), [run.start, run.start]);
    let kinds = queue.state.lock().unwrap().requests[0].kinds.clone();
    assert_eq!(kinds, [WorkKind::TokenCleanup]);
    assert_eq!(queue.state.lock().unwrap().queued.len(), 1, "the crawl has no handler here and stays queued");
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn lease_recovery_runs_on_its_own_interval_while_slots_are_busy() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 3600 * SECOND });
    let mut c = config();
    c.recovery_interval = 30 * SECOND;
    let run = start(&queue, &probe, c);
    run.at(95 * SECOND).await;
    let s = run.start;
    let recoveries = queue.state.lock().unwrap().recoveries.clone();
    assert_eq!(recoveries, [s, s + 30 * SECOND, s + 60 * SECOND, s + 90 * SECOND]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn free_slots_claim_together_instead_of_one_after_another() {
    let queue = FakeQueue::with_items((0..4).map(|_| item(WorkKind::TokenCleanup)));
    queue.state.lock().unwrap().claim_delay = SECOND;
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 10 * SECOND });
    let mut c = config();
    c.slots = 4;
    let run = start(&queue, &probe, c);
    run.at(2 * SECOND).await;
    let s = run.start;
    // One after another, the fourth would start at 4 s.
    assert_eq!(probe.started(), [s + SECOND; 4], "one claim of one second for the four slots");
    assert_eq!(queue.state.lock().unwrap().claim_limits, [4]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_slot_that_comes_free_while_a_claim_is_in_flight_claims_for_itself_at_once() {
    // Two items for two slots: the first runs 1 s; its completion finds nothing queued (the second is
    // claimed), and the poll is 5 s away. The queue then gets a third item.
    let queue = FakeQueue::with_items((0..2).map(|_| item(WorkKind::TokenCleanup)));
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 10 * SECOND });
    let mut c = config();
    c.slots = 3;
    let run = start(&queue, &probe, c);
    run.at(SECOND).await;
    let s = run.start;
    // Three slots asked in one claim, which found two: fewer than asked, so the third backs off (50, 100,
    // 200, 400 ms...), asking for one slot each time, never three.
    assert_eq!(queue.state.lock().unwrap().claim_limits, [3, 1, 1, 1, 1]);
    assert_eq!(probe.started(), [s; 2]);
    queue.state.lock().unwrap().queued.push_back((item(WorkKind::TokenCleanup), s));
    run.at(6 * SECOND).await;
    // The back-off's next claim (at 1.55 s, long before the poll at 5 s) takes it.
    assert_eq!(queue.state.lock().unwrap().claim_limits, [3, 1, 1, 1, 1, 1]);
    assert_eq!(probe.started(), [s, s, s + 1550 * MS]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn completions_that_wait_while_two_batches_are_written_go_together_in_the_next() {
    // Five slots: items of 1 s, 2 s and three of 2.5 s; each batch of completions takes 2 s to write.
    let probes = [
        Probe::new(WorkKind::TokenCleanup, Act::Work { work: SECOND }),
        Probe::new(WorkKind::ProxySweep, Act::Work { work: 2 * SECOND }),
        Probe::new(WorkKind::Purge, Act::Work { work: 2500 * MS }),
    ];
    let queue = FakeQueue::with_items(
        [WorkKind::TokenCleanup, WorkKind::ProxySweep, WorkKind::Purge, WorkKind::Purge, WorkKind::Purge].map(item),
    );
    queue.state.lock().unwrap().complete_delay = 2 * SECOND;
    let mut c = config();
    c.slots = 5;
    let handlers = probes.iter().fold(HandlerRegistry::new(), |r, p| r.register(p.clone()));
    let executor = Executor::new(Arc::new(queue.clone()), handlers, c).unwrap();
    let shutdown = CancellationToken::new();
    let s = Instant::now();
    let task = tokio::spawn(executor.run(shutdown.clone()));
    sleep_until(s + 6 * SECOND).await;
    {
        let state = queue.state.lock().unwrap();
        // 1 s: the first completion is written alone (1 s to 3 s); 2 s: the second alone, beside it (2 s to
        // 4 s); 2.5 s: the three others wait, two batches being in flight, and go together at 3 s.
        assert_eq!(state.completion_batches, [1, 1, 3]);
        // The first claim asked for five; each batch claimed as many as it completed.
        assert_eq!(state.claim_limits[0], 5);
        assert_eq!(state.chained_claim_limits, [1, 1, 3]);
    }
    let written: Vec<Instant> = queue.writes().iter().map(|w| w.2).collect();
    assert_eq!(written, [s + 3 * SECOND, s + 4 * SECOND, s + 5 * SECOND, s + 5 * SECOND, s + 5 * SECOND]);
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn after_a_claim_finds_less_than_it_asked_for_claims_back_off_up_to_the_poll_interval() {
    let (queue, _) = one(WorkKind::TokenCleanup);
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 2 * SECOND });
    let mut c = config();
    c.slots = 3;
    let run = start(&queue, &probe, c);
    run.at(8 * SECOND).await;
    let s = run.start;
    // Three free slots claim at once, in one claim (it finds the one item); the two others back off, 50 ms
    // doubling, not a busy loop; the attempt's completion at 2 s claims its slot's next item with it and finds
    // nothing, and the back-off goes on from where it was (3.2 s), never beyond the poll interval.
    let claims = queue.claim_times();
    assert_eq!(gaps(&claims), [50, 100, 200, 400, 800, 450, 3200].map(|ms| ms * MS));
    assert_eq!(claims[6], s + 2 * SECOND, "the completion's claim");
    assert_eq!(queue.state.lock().unwrap().claim_limits, [3, 2, 2, 2, 2, 2, 1, 3]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_item_claimed_while_shutting_down_is_handed_back_without_running() {
    let (queue, id) = one(WorkKind::TokenCleanup);
    queue.state.lock().unwrap().claim_delay = 2 * SECOND;
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: SECOND });
    let run = start(&queue, &probe, config());
    run.at(SECOND).await;
    let report = run.stop().await;
    assert!(probe.started().is_empty(), "the handler never ran");
    assert_eq!(report.released, [id]);
    assert!(matches!(queue.writes()[..], [(written, Write::Release, _)] if written == id));
}

#[tokio::test(start_paused = true)]
async fn a_completion_claims_its_slots_next_item_in_the_same_call() {
    let queue = FakeQueue::with_items((0..3).map(|_| item(WorkKind::TokenCleanup)));
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: SECOND });
    let run = start(&queue, &probe, config());
    run.at(4 * SECOND).await;
    let s = run.start;
    assert_eq!(probe.started(), [s, s + SECOND, s + 2 * SECOND]);
    // One claim of its own at the start; every later item came with the previous completion (the third
    // completion found nothing, and the slot backs off from there).
    assert_eq!(queue.state.lock().unwrap().chained_claims, 3);
    assert_eq!(queue.claim_times()[..4], [s, s + SECOND, s + 2 * SECOND, s + 3 * SECOND]);
    let completed = queue.writes().iter().filter(|w| matches!(w.1, Write::Complete(_))).count();
    assert_eq!(completed, 3);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_item_claimed_with_a_completion_while_shutting_down_is_handed_back_without_running() {
    let (first, second) = (item(WorkKind::TokenCleanup), item(WorkKind::TokenCleanup));
    let (first_id, second_id) = (first.id, second.id);
    let queue = FakeQueue::with_items([first, second]);
    // The first item's completion (with the next claim) is sent at 1 s and answers at 3 s; the shutdown
    // begins at 2 s, in between.
    queue.state.lock().unwrap().complete_delay = 2 * SECOND;
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: SECOND });
    let run = start(&queue, &probe, config());
    run.at(2 * SECOND).await;
    let report = run.stop().await;
    assert_eq!(probe.started(), [run_start(&queue)], "the second item never ran");
    assert_eq!(report.released, [second_id]);
    let writes: Vec<_> = queue.writes().into_iter().map(|(id, w, _)| (id, w)).collect();
    assert!(
        matches!(&writes[..], [(a, Write::Complete(_)), (b, Write::Release)] if *a == first_id && *b == second_id),
        "{writes:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_worker_with_default_settings_drains_a_backlog_without_waiting_for_the_poll() {
    // 5,000 short items, each claim and each batch of completions a round trip of 1 ms: one item per round
    // trip would take 5.5 s, past the poll interval (5 s).
    let items = 5_000;
    let queue = FakeQueue::with_items((0..items).map(|_| item(WorkKind::TokenCleanup)));
    queue.state.lock().unwrap().claim_delay = MS;
    queue.state.lock().unwrap().complete_delay = MS;
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: Duration::ZERO });
    let c = config();
    assert_eq!((c.slots, c.poll_interval), (1, 5 * SECOND), "the defaults");
    let run = start(&queue, &probe, c);
    run.at(5 * SECOND - MS).await;
    let (succeeded, batches) = {
        let state = queue.state.lock().unwrap();
        (state.succeeded.len(), state.completion_batches.len())
    };
    assert_eq!(succeeded, items, "every item ran before the clock reached the poll interval");
    // The one slot ran them one after another while the items claimed ahead waited their turn, and their
    // completions went out in batches (with as many claims).
    assert!(batches <= items / 8, "{batches} batches of completions for {items} items");
    assert_eq!(probe.started().len(), items, "each item ran once");
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_claim_that_lost_a_race_with_work_still_due_is_tried_again_long_before_the_poll() {
    let queue = FakeQueue::with_items((0..3).map(|_| item(WorkKind::TokenCleanup)));
    queue.state.lock().unwrap().claims_lose_race = 1;
    let probe = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 10 * MS });
    let run = start(&queue, &probe, config());
    run.at(SECOND).await;
    let s = run.start;
    // The first claim answered nothing (another Worker won the race) while three items were due: the next
    // claim comes after the back-off's first step (50 ms), not the poll (5 s).
    assert_eq!(probe.started()[0], s + 50 * MS);
    assert_eq!(queue.state.lock().unwrap().succeeded.len(), 3);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn items_claimed_ahead_that_find_no_slot_in_time_go_back_unrun_once_and_the_line_closes() {
    // One slot; eight items of 10 ms open the window of items claimed ahead, so the four of 10 s behind them
    // are claimed ahead too: the first runs, the three others wait in the line.
    let short = Probe::new(WorkKind::TokenCleanup, Act::Work { work: 10 * MS });
    let long = Probe::new(WorkKind::ProxySweep, Act::Work { work: 10 * SECOND });
    let kinds = [[WorkKind::TokenCleanup; 8].as_slice(), &[WorkKind::ProxySweep; 4]].concat();
    let queue = FakeQueue::with_items(kinds.into_iter().map(item));
    queue.state.lock().unwrap().release_requeues = true;
    let handlers = HandlerRegistry::new().register(short.clone()).register(long.clone());
    let c = config();
    let wait = c.prefetch_wait;
    let executor = Executor::new(Arc::new(queue.clone()), handlers, c).unwrap();
    let shutdown = CancellationToken::new();
    let s = Instant::now();
    let task = tokio::spawn(executor.run(shutdown.clone()));
    sleep_until(s + 45 * SECOND).await;
    let releases: Vec<_> =
        queue.writes().into_iter().filter(|w| matches!(w.1, Write::Release)).map(|w| (w.0, w.2)).collect();
    let (claimed, succeeded) = {
        let state = queue.state.lock().unwrap();
        (state.claimed.clone(), state.succeeded.clone())
    };
    let long_items: Vec<_> = claimed.iter().filter(|i| i.kind == WorkKind::ProxySweep).map(|i| i.id).collect();
    // The three that waited went back to the queue, unrun, no later than the wait after they were claimed...
    assert_eq!(releases.len(), 3, "{releases:?}");
    assert!(releases.iter().all(|(id, at)| long_items.contains(id) && *at <= s + SECOND + wait));
    // ... and the line closed: afterwards the slot claims only for itself, so none goes back twice, and every
    // item ran once, to its completion.
    assert_eq!(succeeded.len(), 12);
    assert_eq!(long.started().len(), 4);
    let mut ran: Vec<_> = succeeded.iter().map(|(id, _)| *id).collect();
    ran.sort();
    ran.dedup();
    assert_eq!(ran.len(), 12);
    shutdown.cancel();
    task.await.unwrap();
}

/// The time between each two instants.
fn gaps(at: &[Instant]) -> Vec<Duration> {
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

fn run_start(queue: &FakeQueue) -> Instant {
    queue.claim_times()[0]
}
