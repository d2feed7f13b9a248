//! How long a test waits for something before it calls it a failure: the one rule, for every test crate.
//!
//! A test waits for an *event* (a row, a process, a page showing something), never for a stretch of time to
//! pass. The deadline on that wait is only a bound for a failure, so it must hold on a machine much slower than
//! the one the test was written on: a laptop building beside the suite, CI with a load of several times its
//! cores. Every such wait says what the event takes on an idle machine, with a margin ([`patience`]'s
//! argument); the deadline is that times the patience factor: [`DEFAULT_FACTOR`], or `ALMANAC_TEST_PATIENCE`
//! (a number; say `ALMANAC_TEST_PATIENCE=30` on a very slow machine, or `1` to find a hung test sooner).
//!
//! What this is *not* for: sleeps that make something happen (a lease meant to expire, a cancel sent after a
//! while), and windows in which a test checks that something did *not* happen (a longer window only makes
//! such a check slower; it never makes it fail).

use std::time::{Duration, Instant};

/// How many times slower than an idle machine a test machine may be before a wait calls it a failure.
pub const DEFAULT_FACTOR: f64 = 10.0;

/// The environment variable that sets the factor instead of [`DEFAULT_FACTOR`].
pub const FACTOR_VARIABLE: &str = "ALMANAC_TEST_PATIENCE";

/// The patience factor: `ALMANAC_TEST_PATIENCE` when it is a positive number, else [`DEFAULT_FACTOR`].
pub fn factor() -> f64 {
    factor_from(std::env::var(FACTOR_VARIABLE).ok().as_deref())
}

fn factor_from(value: Option<&str>) -> f64 {
    value.and_then(|v| v.trim().parse::<f64>().ok()).filter(|f| f.is_finite() && *f > 0.0).unwrap_or(DEFAULT_FACTOR)
}

/// How long to wait for something that takes up to `idle` on an idle machine: `idle` times the [`factor`].
pub fn patience(idle: Duration) -> Duration {
    idle.mul_f64(factor())
}

/// The deadline of one wait for an event, [`patience`] from now.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
    limit: Duration,
}

impl Deadline {
    /// A deadline for something that takes up to `idle` on an idle machine.
    pub fn after(idle: Duration) -> Self {
        let limit = patience(idle);
        Self { at: Instant::now() + limit, limit }
    }

    /// Whether it has passed.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// What is left of it (zero once passed): the bound for a `timeout` around one wait.
    pub fn left(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Panics, naming `what` was waited for, once the deadline has passed.
    #[track_caller]
    pub fn check(&self, what: impl std::fmt::Display) {
        if self.passed() {
            self.fail(what);
        }
    }

    /// Panics: `what` did not happen in time.
    #[track_caller]
    pub fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!("waited {:.0?} for {what} (the patience factor is {}; {FACTOR_VARIABLE} sets it)", self.limit, factor())
    }
}

/// Calls `found` every `every` until it gives something, and returns that; panics naming `what` once
/// `patience(idle)` has passed. For callers without a runtime (it sleeps the thread).
#[track_caller]
pub fn wait_for<T>(what: &str, idle: Duration, every: Duration, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Deadline::after(idle);
    loop {
        if let Some(found) = found() {
            return found;
        }
        deadline.check(what);
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_factor_is_a_positive_number_from_the_environment_or_the_default() {
        assert_eq!(factor_from(None), DEFAULT_FACTOR);
        assert_eq!(factor_from(Some("3")), 3.0);
        assert_eq!(factor_from(Some(" 0.5 ")), 0.5);
        for bad in ["", "slow", "0", "-2", "NaN", "inf"] {
            assert_eq!(factor_from(Some(bad)), DEFAULT_FACTOR, "{bad:?}");
        }
    }

    #[test]
    fn a_wait_returns_what_it_found_and_a_missed_deadline_names_what_was_awaited() {
        let mut calls = 0;
        let found = wait_for("the third call", Duration::from_secs(60), Duration::ZERO, || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(found, 3);
        let missed = Deadline { at: Instant::now(), limit: Duration::from_secs(1) };
        assert!(missed.passed());
        assert_eq!(missed.left(), Duration::ZERO);
        let message = std::panic::catch_unwind(|| missed.check("a row"))
            .expect_err("a passed deadline fails")
            .downcast::<String>()
            .unwrap();
        assert!(message.contains("for a row") && message.contains(FACTOR_VARIABLE), "{message}");
        assert!(!Deadline::after(Duration::from_secs(60)).passed());
    }
}
