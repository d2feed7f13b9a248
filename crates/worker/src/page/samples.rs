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
