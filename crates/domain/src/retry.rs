use std::time::Duration;

/// The one retry policy: exponential backoff from `base`, doubled per failure, capped at `cap`, with up to
/// `jitter` of the delay taken off at random so that items failing together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failure.
    pub base: Duration,
    /// Longest delay.
    pub cap: Duration,
    /// Fraction of the delay (0 to 1) that jitter may remove.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { base: Duration::from_secs(30), cap: Duration::from_secs(3600), jitter: 0.2 }
    }
}

impl RetryPolicy {
    /// The delay before the retry that follows failure number `failures` (1 for the first), given a random
    /// `sample` in `[0, 1)`.
    pub fn delay(&self, failures: u32, sample: f64) -> Duration {
        let doublings = failures.saturating_sub(1).min(32);
        let exponential = self.base.saturating_mul(1u32 << doublings.min(31));
        let capped = exponential.min(self.cap);
        let cut = self.jitter.clamp(0.0, 1.0) * sample.clamp(0.0, 1.0);
        capped.mul_f64(1.0 - cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy { base: Duration::from_secs(10), cap: Duration::from_secs(100), jitter: 0.5 }
    }

    #[test]
    fn delay_doubles_per_failure_until_the_cap() {
        let p = policy();
        let delays: Vec<u64> = (1..=6).map(|f| p.delay(f, 0.0).as_secs()).collect();
        assert_eq!(delays, [10, 20, 40, 80, 100, 100]);
        assert_eq!(p.delay(0, 0.0), Duration::from_secs(10));
        assert_eq!(p.delay(u32::MAX, 0.0), Duration::from_secs(100));
    }

    #[test]
    fn jitter_only_shortens_and_by_at_most_its_fraction() {
        let p = policy();
        assert_eq!(p.delay(2, 1.0), Duration::from_secs(10));
        assert_eq!(p.delay(2, 0.5), Duration::from_secs(15));
        let wild = RetryPolicy { jitter: 7.0, ..p };
        assert_eq!(wild.delay(1, 2.0), Duration::ZERO);
    }
}
