//! Progress samples of running items, a few minutes' worth each, for a crawl's rate over time.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use almanac_domain::{ProgressEstimate, WorkItem, WorkItemId};
use chrono::{DateTime, Utc};

/// One progress sample: when, and units done.
pub type Sample = (DateTime<Utc>, u64);

/// Progress samples of running items, a few minutes' worth each.
#[derive(Default)]
pub struct Samples(Mutex<HashMap<WorkItemId, VecDeque<Sample>>>);

/// Samples kept per item (at one every two seconds, about ten minutes).
const SAMPLES_KEPT: usize = 300;

impl Samples {
    /// Records the running items' progress; forgets items no longer running.
    pub fn record(&self, running: &[WorkItem], now: DateTime<Utc>) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|id, _| running.iter().any(|i| i.id == *id));
        for item in running {
            let Some(done) = item.progress.as_ref().and_then(ProgressEstimate::from_progress).map(|e| e.done) else {
                continue;
            };
            let series = all.entry(item.id).or_default();
            if series.back().is_some_and(|(at, _)| (now - *at).num_milliseconds() < 1_000) {
                continue;
            }
            if series.len() == SAMPLES_KEPT {
                series.pop_front();
            }
            series.push_back((now, done));
        }
    }

    /// An item's samples, oldest first.
    pub fn series(&self, id: WorkItemId) -> Vec<Sample> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use almanac_domain::{Status, WorkKind};
    use chrono::TimeDelta;

    use super::*;

    /// A running crawl with `id` that reports `done` units, or nothing.
    fn running(id: WorkItemId, done: Option<u64>) -> WorkItem {
        let progress = done.map(|done| serde_json::json!({ "done": done }));
        WorkItem { id, ..crate::tests::item(WorkKind::Crawl, Status::Running, progress) }
    }

    fn at(t0: DateTime<Utc>, ms: i64) -> DateTime<Utc> {
        t0 + TimeDelta::milliseconds(ms)
    }

    #[test]
    fn a_running_item_s_progress_is_kept_at_most_once_a_second_oldest_first() {
        let (samples, t0, id) = (Samples::default(), Utc::now(), WorkItemId::new());
        samples.record(&[running(id, Some(5))], t0);
        samples.record(&[running(id, Some(6))], at(t0, 999));
        samples.record(&[running(id, Some(7))], at(t0, 1_000));
        samples.record(&[running(id, Some(8))], at(t0, 1_500));
        samples.record(&[running(id, Some(9))], at(t0, 2_500));
        assert_eq!(samples.series(id), [(t0, 5), (at(t0, 1_000), 7), (at(t0, 2_500), 9)]);
        assert_eq!(samples.series(WorkItemId::new()), [], "an item never seen has no samples");
    }

    #[test]
    fn items_without_progress_have_no_samples_and_items_no_longer_running_are_forgotten() {
        let (samples, t0) = (Samples::default(), Utc::now());
        let (a, b, silent) = (WorkItemId::new(), WorkItemId::new(), WorkItemId::new());
        samples.record(&[running(a, Some(1)), running(b, Some(2)), running(silent, None)], t0);
        assert_eq!(samples.series(silent), []);
        samples.record(&[running(b, Some(3))], at(t0, 1_000));
        assert_eq!(samples.series(a), [], "a finished item's samples are forgotten");
        assert_eq!(samples.series(b), [(t0, 2), (at(t0, 1_000), 3)]);
    }

    #[test]
    fn an_item_keeps_its_newest_samples_up_to_the_limit() {
        let (samples, t0, id) = (Samples::default(), Utc::now(), WorkItemId::new());
        for s in 0..=SAMPLES_KEPT as u64 {
            samples.record(&[running(id, Some(s))], at(t0, 1_000 * s as i64));
        }
        let series = samples.series(id);
        assert_eq!(series.len(), SAMPLES_KEPT);
        assert_eq!(series.first(), Some(&(at(t0, 1_000), 1)), "the oldest went first");
        assert_eq!(series.last(), Some(&(at(t0, 1_000 * SAMPLES_KEPT as i64), SAMPLES_KEPT as u64)));
    }
}
