//! How far ahead of its free slots an executor claims, and how soon it claims again after a claim found less
//! than it asked for (docs/queue.md, "Draining").
//!
//! **Claiming ahead.** Each item is one transaction for its completion and the next claim, so a Worker that
//! only ever holds as many items as it has slots pays a database round trip between every two short items,
//! and its batches hold one or two completions each. So it claims up to `window` items beyond its free slots
//! and keeps them in a local line until a slot comes free; their completions then go out in large batches.
//! The window is sized from how long attempts take, so that an item waits in the line about half of
//! `prefetch_wait` at most, and it closes at once when an attempt takes `prefetch_wait` or longer (a crawl)
//! or an item waited that long (it is handed back unrun, for any Worker). A Worker whose items are long thus
//! claims only for its free slots, as before; one whose items are short holds up to `prefetch` more.
//!
//! **Claiming again.** A claim that finds fewer items than it asked for may mean that nothing else is
//! claimable (every other config busy, the queue empty) or that it lost a race to another Worker with due
//! work left. The next claim waits for an ended attempt, a wake-up, the poll, or a back-off that starts
//! short and doubles up to the poll interval: a lost race costs milliseconds, not a poll, and a Worker that
//! keeps finding nothing claims no more often than it polls.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;

use crate::config::ExecutorConfig;

/// The shortest back-off after a claim that found fewer than it asked for.
pub(crate) const CLAIM_AGAIN_FLOOR: Duration = Duration::from_millis(50);

/// What the claim made with an attempt's outcome came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// It claimed the slot's next item.
    Claimed,
    /// It found nothing.
    FoundNothing,
    /// No claim was made with this outcome (only a success's completion claims).
    NotAsked,
}

/// The executor's pace: the window of items claimed ahead, and the back-off after short claims.
#[derive(Debug)]
pub(crate) struct Pace {
    /// Items claimed beyond the slots: 0 to `max`.
    window: usize,
    max: usize,
    /// An item may wait this long in the local line; an attempt this long closes the window.
    wait: Duration,
    slots: usize,
    /// No claim before this instant (an ended attempt, a wake-up or the poll lift it sooner).
    resume_at: Option<Instant>,
    backoff: Duration,
    floor: Duration,
    ceiling: Duration,
}

impl Pace {
    pub(crate) fn new(config: &ExecutorConfig) -> Self {
        let floor = CLAIM_AGAIN_FLOOR.min(config.poll_interval);
        Pace {
            window: 0,
            max: config.prefetch,
            wait: config.prefetch_wait.min(config.heartbeat_interval / 2),
            slots: config.slots,
            resume_at: None,
            backoff: floor,
            floor,
            ceiling: config.poll_interval,
        }
    }

    /// Items the executor may hold at once: running, waiting in the line, and asked for.
    pub(crate) fn capacity(&self) -> usize {
        self.slots + self.window
    }

    /// How long an item may wait in the local line for a slot.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// Whether a claim may start now.
    pub(crate) fn may_claim(&self) -> bool {
        self.resume_at.is_none()
    }

    /// When the back-off ends, if one runs.
    pub(crate) fn resume_at(&self) -> Option<Instant> {
        self.resume_at
    }

    /// A claim answered `got` of `asked` (a failed claim got nothing): a full answer keeps claiming at once;
    /// a short one backs off.
    pub(crate) fn claimed(&mut self, asked: usize, got: usize, now: Instant) {
        if got >= asked {
            self.backoff = self.floor;
        } else {
            self.resume_at = Some(now + self.backoff);
            self.backoff = (self.backoff * 2).min(self.ceiling);
        }
    }

    /// A claim failed (the database did not answer, or refused it): claim again at the next poll, as before
    /// an ended attempt or a wake-up.
    pub(crate) fn failed(&mut self, now: Instant) {
        self.resume_at = Some(now + self.ceiling);
    }

    /// The back-off is over, or the poll came: claim again.
    pub(crate) fn resume(&mut self) {
        self.resume_at = None;
    }

    /// A wake-up (work was enqueued): claim at once, and back off from the floor again.
    pub(crate) fn woken(&mut self) {
        self.resume_at = None;
        self.backoff = self.floor;
    }

    /// An attempt ended whose handler held its slot for `took` (its outcome's write no longer holds it), and its
    /// completion's claim came to `next`. The window is sized so that the line drains within half the wait at
    /// this pace, and closes for a handler as long as the wait.
    pub(crate) fn attempt_ended(&mut self, took: Duration, next: Next, now: Instant) {
        match next {
            // The completion claimed as many as it completed: nothing more can have become claimable through
            // this attempt (its config's next item is the one it claimed), so the back-off stands.
            Next::Claimed => {}
            Next::FoundNothing => self.claimed(1, 0, now),
            // A failure, a cancel, a release: its config is free and nothing was claimed with it.
            Next::NotAsked => self.resume_at = None,
        }
        if took >= self.wait {
            self.window = 0;
            return;
        }
        let per_item = took.max(Duration::from_micros(1)).as_secs_f64();
        let fits = (self.wait.as_secs_f64() / 2.0 * self.slots as f64 / per_item) as usize;
        self.window = (self.window * 2 + 1).min(fits).min(self.max);
    }

    /// An item waited in the line as long as it may: the window closes.
    pub(crate) fn waited_too_long(&mut self) {
        self.window = 0;
    }

    #[cfg(test)]
    fn window(&self) -> usize {
        self.window
    }
}

/// A slot, held by an attempt while its handler runs: dropped once the handler has ended (its outcome may still
/// be on its way to the database), it frees the slot for the next item in the line and wakes the claim loop.
pub(crate) struct SlotHeld {
    permit: Option<OwnedSemaphorePermit>,
    freed: Arc<Notify>,
}

impl SlotHeld {
    pub(crate) fn new(permit: OwnedSemaphorePermit, freed: Arc<Notify>) -> Self {
        SlotHeld { permit: Some(permit), freed }
    }
}

impl Drop for SlotHeld {
    fn drop(&mut self) {
        // The permit first: the loop this wakes must find the slot free.
        drop(self.permit.take());
        self.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use almanac_domain::{WorkerId, ports::ServedConfigs};

    fn pace(slots: usize) -> Pace {
        let mut c = ExecutorConfig::new(WorkerId::new("w").unwrap(), ServedConfigs::All);
        c.slots = slots;
        Pace::new(&c)
    }

    #[test]
    fn short_attempts_open_the_window_up_to_its_limit_and_long_ones_close_it() {
        let mut p = pace(1);
        assert_eq!(p.capacity(), 1, "a Worker starts by claiming for its slots only");
        p.attempt_ended(Duration::from_millis(2), Next::Claimed, Instant::now());
        assert_eq!(p.window(), 1);
        for _ in 0..10 {
            p.attempt_ended(Duration::from_millis(2), Next::Claimed, Instant::now());
        }
        assert_eq!(p.window(), ExecutorConfig::DEFAULT_PREFETCH);
        p.attempt_ended(ExecutorConfig::DEFAULT_PREFETCH_WAIT, Next::Claimed, Instant::now());
        assert_eq!(p.capacity(), 1, "an attempt as long as the wait closes the window");
    }

    #[test]
    fn the_window_holds_no_more_than_the_slots_run_in_half_the_wait() {
        let mut p = pace(2);
        let wait = ExecutorConfig::DEFAULT_PREFETCH_WAIT;
        // Items of a tenth of the wait: two slots run ten of them in half the wait.
        for _ in 0..10 {
            p.attempt_ended(wait / 10, Next::Claimed, Instant::now());
        }
        assert_eq!(p.window(), 10);
        p.waited_too_long();
        assert_eq!(p.window(), 0);
    }

    #[test]
    fn short_claims_back_off_doubling_up_to_the_poll_and_a_full_one_or_a_wake_up_resets_it() {
        let mut p = pace(1);
        let t = Instant::now();
        p.claimed(4, 4, t);
        assert!(p.may_claim());
        let mut gaps = Vec::new();
        for _ in 0..10 {
            p.claimed(4, 1, t);
            gaps.push(p.resume_at().unwrap() - t);
            p.resume();
        }
        assert_eq!(gaps[0], CLAIM_AGAIN_FLOOR);
        assert_eq!(gaps[1], CLAIM_AGAIN_FLOOR * 2);
        assert_eq!(*gaps.last().unwrap(), ExecutorConfig::DEFAULT_POLL_INTERVAL, "never longer than the poll");
        p.woken();
        p.claimed(4, 0, t);
        assert_eq!(p.resume_at(), Some(t + CLAIM_AGAIN_FLOOR), "a wake-up starts from the floor again");
        p.attempt_ended(Duration::from_millis(1), Next::Claimed, t);
        assert!(!p.may_claim(), "an attempt whose completion claimed its next item leaves the back-off standing");
        p.attempt_ended(Duration::from_millis(1), Next::NotAsked, t);
        assert!(p.may_claim(), "an attempt that failed (its config free, nothing claimed) lifts the back-off");
        p.attempt_ended(Duration::from_millis(1), Next::FoundNothing, t);
        assert_eq!(p.resume_at(), Some(t + CLAIM_AGAIN_FLOOR * 2), "a completion that found nothing backs off");
        p.resume();
        p.claimed(4, 4, t);
        p.claimed(4, 0, t);
        assert_eq!(p.resume_at(), Some(t + CLAIM_AGAIN_FLOOR), "a full claim starts from the floor again");
    }

    #[test]
    fn a_failed_claim_waits_for_the_poll_and_the_end_of_a_wait_lets_claims_go() {
        let mut p = pace(1);
        let t = Instant::now();
        p.failed(t);
        assert!(!p.may_claim());
        assert_eq!(p.resume_at(), Some(t + ExecutorConfig::DEFAULT_POLL_INTERVAL), "not a tight loop on a failure");
        p.resume();
        assert!(p.may_claim(), "the poll came");
        assert_eq!(p.resume_at(), None);
    }
}
