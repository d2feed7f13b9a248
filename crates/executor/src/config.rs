use std::time::Duration;

use almanac_domain::{
    WorkerId,
    ports::{LeaseDuration, RetryPolicy, ServedConfigs},
};

/// The longest retry delay (`queue.retry_cap`): 30 days.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(30 * 86_400);

/// A knob with a value the executor cannot work with. The message names the knob and the accepted range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct ConfigError {
    /// The configuration key, as the binary's configuration names it (e.g. `queue.heartbeat_interval`).
    pub key: &'static str,
    /// What is wrong and what is accepted.
    pub problem: String,
}

/// The executor's knobs. Build with [`ExecutorConfig::new`] (the defaults) and check with
/// [`ExecutorConfig::validate`].
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutorConfig {
    /// Names this Worker in the queue and the logs.
    pub worker_id: WorkerId,
    /// Whose storage configs it serves (it also runs unscoped work).
    pub served: ServedConfigs,
    /// Lease taken by a claim and renewed by each heartbeat (default 60 s).
    pub lease: LeaseDuration,
    /// Time between heartbeats, and the limit on each heartbeat call (default 10 s).
    pub heartbeat_interval: Duration,
    /// Time between claims while idle (default 5 s).
    pub poll_interval: Duration,
    /// Items run at once (default 1).
    pub slots: usize,
    /// Lease expiries after which an item fails as stalled (default 3).
    pub max_stalls: i32,
    /// How long running handlers get to finish on shutdown before they are cancelled (default 30 s).
    pub shutdown_grace: Duration,
    /// Time between lease recoveries (default half a lease).
    pub recovery_interval: Duration,
    /// Backoff between retries of a failed item.
    pub retry: RetryPolicy,
    /// Items claimed at most beyond the free slots while items are short, held in a local line until a slot
    /// comes free (default 32; 0 claims only for free slots). See `pace.rs`.
    pub prefetch: usize,
    /// How long a claimed item may wait in that line before it goes back to the queue unrun; an attempt this
    /// long closes the line (default 1 s; never more than half the heartbeat interval, so a waiting item, which
    /// is not heartbeated, goes back long before its first beat would be due).
    pub prefetch_wait: Duration,
}

impl ExecutorConfig {
    /// Default time between heartbeats.
    pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);
    /// Default time between claims while idle.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);
    /// Default items run at once.
    pub const DEFAULT_SLOTS: usize = 1;
    /// Default lease expiries after which an item fails as stalled.
    pub const DEFAULT_MAX_STALLS: i32 = 3;
    /// Default time running handlers get to finish on shutdown.
    pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
    /// Default items claimed at most beyond the free slots.
    pub const DEFAULT_PREFETCH: usize = 32;
    /// Default time a claimed item may wait for a slot.
    pub const DEFAULT_PREFETCH_WAIT: Duration = Duration::from_secs(1);
    /// Default size of a Worker's shared pool of connections (`database.max_connections`: claims, lease
    /// recovery, the scheduler, the handlers' catalogue statements).
    pub const DEFAULT_SHARED_CONNECTIONS: usize = 10;

    /// Connections a Worker reserves for the heartbeats and outcomes of `slots` slots, beside its shared pool:
    /// one per slot and one to spare (the completions of items that left their slots go out in batches).
    /// `almanac-worker run` and the queue benchmark both size a Worker's store with it.
    pub const fn reserved_connections(slots: usize) -> usize {
        slots + 1
    }

    /// The defaults of the spec, for a Worker with this id serving these configs.
    pub fn new(worker_id: WorkerId, served: ServedConfigs) -> Self {
        Self {
            worker_id,
            served,
            lease: LeaseDuration::DEFAULT,
            heartbeat_interval: Self::DEFAULT_HEARTBEAT_INTERVAL,
            poll_interval: Self::DEFAULT_POLL_INTERVAL,
            slots: Self::DEFAULT_SLOTS,
            max_stalls: Self::DEFAULT_MAX_STALLS,
            shutdown_grace: Self::DEFAULT_SHUTDOWN_GRACE,
            recovery_interval: LeaseDuration::DEFAULT.half(),
            retry: RetryPolicy::default(),
            prefetch: Self::DEFAULT_PREFETCH,
            prefetch_wait: Self::DEFAULT_PREFETCH_WAIT,
        }
    }

    /// Checks the knobs against each other. The heartbeat interval must be at most a quarter of the lease, so
    /// at least two beats fall inside the self-stop window of half a lease.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let quarter = self.lease.get() / 4;
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval > quarter {
            return Err(ConfigError {
                key: "queue.heartbeat_interval",
                problem: format!(
                    "{:?} must be above zero and at most a quarter of the lease ({:?} for a lease of {:?}), so that \
                     at least two heartbeats fall inside the self-stop window of half a lease",
                    self.heartbeat_interval,
                    quarter,
                    self.lease.get()
                ),
            });
        }
        let positive =
            [("queue.poll_interval", self.poll_interval), ("queue.recovery_interval", self.recovery_interval)];
        for (key, value) in positive {
            if value.is_zero() {
                return Err(ConfigError { key, problem: "must be above zero".into() });
            }
        }
        if self.slots == 0 || self.slots > 256 {
            return Err(ConfigError { key: "worker.slots", problem: format!("{} must be from 1 to 256", self.slots) });
        }
        if self.prefetch > 256 {
            return Err(ConfigError {
                key: "executor.prefetch",
                problem: format!("{} must be from 0 to 256", self.prefetch),
            });
        }
        if self.prefetch_wait.is_zero() {
            return Err(ConfigError { key: "executor.prefetch_wait", problem: "must be above zero".into() });
        }
        if !(1..=100).contains(&self.max_stalls) {
            return Err(ConfigError {
                key: "queue.max_stalls",
                problem: format!("{} must be from 1 to 100", self.max_stalls),
            });
        }
        if self.retry.base.is_zero() || self.retry.cap < self.retry.base || !(0.0..=1.0).contains(&self.retry.jitter) {
            return Err(ConfigError {
                key: "queue.retry",
                problem: "base must be above zero, cap at least base, jitter between 0 and 1".into(),
            });
        }
        if self.retry.cap > MAX_RETRY_DELAY {
            return Err(ConfigError {
                key: "queue.retry",
                problem: format!(
                    "cap {:?} must be at most {} days (an item failed is retried within that; a retry far in the \
                     future would be a time no reader of the queue can read)",
                    self.retry.cap,
                    MAX_RETRY_DELAY.as_secs() / 86_400
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ExecutorConfig {
        ExecutorConfig::new(WorkerId::new("w").unwrap(), ServedConfigs::All)
    }

    #[test]
    fn defaults_are_valid_and_match_the_spec() {
        let c = config();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(
            (c.lease.get(), c.heartbeat_interval, c.poll_interval, c.slots, c.max_stalls, c.shutdown_grace),
            (Duration::from_secs(60), Duration::from_secs(10), Duration::from_secs(5), 1, 3, Duration::from_secs(30))
        );
        assert_eq!(c.recovery_interval, Duration::from_secs(30));
        assert_eq!((c.prefetch, c.prefetch_wait), (32, Duration::from_secs(1)));
    }

    #[test]
    fn heartbeat_interval_must_leave_two_beats_in_half_a_lease() {
        let mut c = config();
        c.heartbeat_interval = Duration::from_secs(15);
        assert_eq!(c.validate(), Ok(()));
        c.heartbeat_interval = Duration::from_millis(15_001);
        assert_eq!(c.validate().unwrap_err().key, "queue.heartbeat_interval");
        c.heartbeat_interval = Duration::ZERO;
        assert_eq!(c.validate().unwrap_err().key, "queue.heartbeat_interval");
    }

    #[test]
    fn other_knobs_are_range_checked_by_name() {
        type Breaker = fn(&mut ExecutorConfig);
        let cases: [(Breaker, &str); 9] = [
            (|c| c.prefetch = 257, "executor.prefetch"),
            (|c| c.prefetch_wait = Duration::ZERO, "executor.prefetch_wait"),
            (|c| c.poll_interval = Duration::ZERO, "queue.poll_interval"),
            (|c| c.recovery_interval = Duration::ZERO, "queue.recovery_interval"),
            (|c| c.slots = 0, "worker.slots"),
            (|c| c.slots = 257, "worker.slots"),
            (|c| c.max_stalls = 0, "queue.max_stalls"),
            (|c| c.max_stalls = 101, "queue.max_stalls"),
            (|c| c.retry.jitter = 1.5, "queue.retry"),
        ];
        for (break_it, key) in cases {
            let mut c = config();
            break_it(&mut c);
            assert_eq!(c.validate().map_err(|e| e.key), Err(key));
        }
        let mut c = config();
        c.slots = 256;
        c.max_stalls = 100;
        c.prefetch = 256;
        assert_eq!(c.validate(), Ok(()), "each knob's largest value is allowed");
        c.retry.cap = c.retry.base / 2;
        assert_eq!(c.validate().map_err(|e| e.key), Err("queue.retry"));
        let mut c = config();
        c.retry.cap = c.retry.base;
        assert_eq!(c.validate(), Ok(()), "a cap equal to the base is a constant delay");
        let mut c = config();
        c.retry.base = Duration::ZERO;
        assert_eq!(c.validate().map_err(|e| e.key), Err("queue.retry"));
        let mut c = config();
        c.retry.cap = MAX_RETRY_DELAY;
        assert_eq!(c.validate(), Ok(()), "the longest cap is allowed");
        c.retry.cap += Duration::from_secs(1);
        assert_eq!(c.validate().map_err(|e| e.key), Err("queue.retry"), "a cap past 30 days is refused");
    }
}
