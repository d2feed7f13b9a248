//! How far a running item has come, as people read it: done of total, percent, rate and the time left.
//!
//! A handler's progress (carried by heartbeats into `work_items.progress`) is a JSON object; those that can
//! say how far they are give `done` (units finished), `total` (units in all, once known) and `seconds` (how
//! long the units have been worked on). The crawl does, counting files.

use std::time::Duration;

use serde::Deserialize;

/// How far a handler says it has come: the part of its progress object an estimate reads (a crawl's is its
/// [`crate::CrawlCounts`]); the rest of the object is the handler's own.
#[derive(Deserialize)]
struct HowFar {
    done: u64,
    #[serde(default)]
    total: Option<u64>,
    #[serde(default)]
    seconds: Option<f64>,
}

/// A progress estimate.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProgressEstimate {
    /// Units finished.
    pub done: u64,
    /// Units in all, when known (a crawl knows once its listing is done).
    pub total: Option<u64>,
    /// Percent finished (0–100), when the total is known.
    pub percent: Option<f64>,
    /// Units a second so far, once some time has passed.
    pub per_second: Option<f64>,
    /// Time left at that rate, when the total and the rate are known.
    pub remaining: Option<Duration>,
}

impl ProgressEstimate {
    /// Reads `done`, `total` and `seconds` from a progress object; `None` when it has no `done`.
    pub fn from_progress(progress: &serde_json::Value) -> Option<Self> {
        let HowFar { done, total, seconds } = HowFar::deserialize(progress).ok()?;
        let seconds = seconds.filter(|s| *s > 0.0);
        let percent = total.map(|t| if t == 0 { 100.0 } else { (done.min(t) as f64 * 100.0) / t as f64 });
        let per_second = seconds.map(|s| done as f64 / s).filter(|r| *r > 0.0);
        let remaining = match (total, per_second) {
            (Some(t), Some(r)) => Some(Duration::from_secs_f64(t.saturating_sub(done) as f64 / r)),
            _ => None,
        };
        Some(Self { done, total, percent, per_second, remaining })
    }

    /// One line: `1,234 of 5,000 (24.7%), 310/s, about 12 s left`, with `unit` after the counts.
    pub fn describe(&self, unit: &str) -> String {
        let mut out = match (self.total, self.percent) {
            (Some(total), Some(percent)) => format!("{} of {} {unit} ({percent:.1}%)", self.done, total),
            _ => format!("{} {unit} so far (total not known yet)", self.done),
        };
        if let Some(rate) = self.per_second {
            out.push_str(&format!(", {rate:.0}/s"));
        }
        if let Some(left) = self.remaining {
            out.push_str(&format!(", about {} left", human(left)));
        }
        out
    }
}

/// `45 s`, `12 min`, `3 h 20 min`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s.div_ceil(60)),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn done_of_total_percent_rate_and_time_left() {
        let e = ProgressEstimate::from_progress(&json!({"done": 250, "total": 1000, "seconds": 5.0})).unwrap();
        assert_eq!((e.done, e.total), (250, Some(1000)));
        assert_eq!(e.percent, Some(25.0));
        assert_eq!(e.per_second, Some(50.0));
        assert_eq!(e.remaining, Some(Duration::from_secs(15)));
        assert_eq!(e.describe("files"), "250 of 1000 files (25.0%), 50/s, about 15 s left");
    }

    #[test]
    fn what_is_not_known_yet_is_not_invented() {
        let listing = ProgressEstimate::from_progress(&json!({"done": 0, "seconds": 0.0})).unwrap();
        assert_eq!((listing.total, listing.percent, listing.per_second, listing.remaining), (None, None, None, None));
        assert_eq!(listing.describe("files"), "0 files so far (total not known yet)");
        let started = ProgressEstimate::from_progress(&json!({"done": 0, "total": 10, "seconds": 1.0})).unwrap();
        assert_eq!((started.percent, started.per_second, started.remaining), (Some(0.0), None, None));
        let empty = ProgressEstimate::from_progress(&json!({"done": 0, "total": 0})).unwrap();
        assert_eq!(empty.percent, Some(100.0));
        let over = ProgressEstimate::from_progress(&json!({"done": 12, "total": 10, "seconds": 2.0})).unwrap();
        assert_eq!((over.percent, over.remaining), (Some(100.0), Some(Duration::ZERO)));
        let no_time = ProgressEstimate::from_progress(&json!({"done": 5, "total": 10, "seconds": 0.0})).unwrap();
        assert_eq!((no_time.per_second, no_time.remaining), (None, None), "no time passed: no rate");
        assert!(ProgressEstimate::from_progress(&json!({"found": 3})).is_none(), "no `done`: no estimate");
        assert!(ProgressEstimate::from_progress(&json!("text")).is_none());
        let counts = crate::CrawlCounts { done: 3, total: Some(4), seconds: 1.0, ..Default::default() };
        let crawl = ProgressEstimate::from_progress(&serde_json::to_value(&counts).unwrap()).unwrap();
        assert_eq!((crawl.done, crawl.total), (3, Some(4)), "a crawl's progress is its counts");
        let walking = crate::CrawlCounts { total: None, ..counts };
        let walking = ProgressEstimate::from_progress(&serde_json::to_value(walking).unwrap()).unwrap();
        assert_eq!(walking.describe("files"), "3 files so far (total not known yet), 3/s", "a crawl still walking");
    }

    #[test]
    fn time_left_reads_like_a_person_would_say_it() {
        assert_eq!(human(Duration::from_secs(45)), "45 s");
        assert_eq!(human(Duration::from_secs(61)), "2 min");
        assert_eq!(human(Duration::from_secs(3 * 3600 + 20 * 60)), "3 h 20 min");
    }
}
