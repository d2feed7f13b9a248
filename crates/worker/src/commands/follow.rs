//! `--wait`: following a work item until it ends.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use almanac_domain::{ProgressEstimate, Status, WorkItem, WorkItemId, WorkQueue};
use almanac_store_pg::PgStore;

use super::{Exit, Failure};
use crate::ops::{self, OpError};

/// How often the item is read.
const EVERY: Duration = Duration::from_millis(500);
/// Plain lines while it runs come at most this often.
const LINES_EVERY: Duration = Duration::from_secs(5);

/// Follows a work item until it ends: a progress bar on a terminal (standard error), else a plain line whenever
/// its state or progress changes (at most every five seconds while it runs). 0 when it succeeded, 1 otherwise.
pub async fn follow(store: &PgStore, id: WorkItemId) -> Result<Exit, Failure> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(indicatif::ProgressStyle::with_template("{bar:30} {msg}").expect("a valid template"));
        bar
    });
    let mut lines = Lines::default();
    loop {
        let item = store
            .get(id)
            .await
            .map_err(OpError::from)?
            .ok_or_else(|| OpError::NotFound(format!("work item {id} no longer exists")))?;
        if item.status.is_finished() {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            say!("{id} {}", outcome(&item));
            return Ok(if item.status == Status::Succeeded { Exit::Success } else { Exit::Failure });
        }
        let line = state_line(&item, bar.as_ref());
        match &bar {
            Some(bar) => bar.set_message(crate::observe::value_shown(&line)),
            None => lines.print(id, line, item.status),
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// The plain lines printed while an item is followed: a line whenever its state or progress changes, at most every
/// [`LINES_EVERY`] while it runs.
#[derive(Default)]
struct Lines {
    /// The last line printed.
    last: String,
    /// When it was printed.
    printed_at: Option<Instant>,
}

impl Lines {
    /// Prints `line`, the state in words of item `id` with `status`, when it is due now.
    fn print(&mut self, id: WorkItemId, line: String, status: Status) {
        if self.due(&line, status, Instant::now()) {
            say!("{id} {line}");
        }
    }

    /// Whether `line`, the state in words of an item with `status`, is printed at `now`; when it is, it is the
    /// last line from then on.
    fn due(&mut self, line: &str, status: Status, now: Instant) -> bool {
        let paced = status == Status::Running && self.printed_at.is_some_and(|t| now - t < LINES_EVERY);
        if line == self.last || paced {
            return false;
        }
        (self.last, self.printed_at) = (line.to_owned(), Some(now));
        true
    }
}

/// A queued or running item's state in words; the bar, when there is one, shows its progress.
fn state_line(item: &WorkItem, bar: Option<&indicatif::ProgressBar>) -> String {
    if item.status != Status::Running {
        return "queued".to_owned();
    }
    let estimate = item.progress.as_ref().and_then(ProgressEstimate::from_progress);
    if let (Some(bar), Some(e)) = (bar, &estimate) {
        bar.set_length(e.total.unwrap_or(0));
        bar.set_position(e.done);
    }
    let progress = if estimate.is_some() { ops::progress_text(item) } else { "started".to_owned() };
    format!("running on {}: {progress}", item.worker_id.as_deref().unwrap_or("-"))
}

/// A finished item's outcome: `succeeded`, or its status and error.
fn outcome(item: &WorkItem) -> String {
    match (item.status, item.last_error.as_deref()) {
        (Status::Succeeded, _) => "succeeded".to_owned(),
        (status, Some(error)) => format!("{status}: {error}"),
        (status, None) => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use almanac_domain::WorkKind;

    use super::*;
    use crate::tests::item;

    #[test]
    fn a_line_is_printed_when_it_changes_and_at_most_every_five_seconds_while_the_item_runs() {
        let (mut lines, t0) = (Lines::default(), Instant::now());
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(lines.due("queued", Status::Queued, t0));
        assert!(!lines.due("queued", Status::Queued, at(500)), "the same line is not printed again");
        assert!(!lines.due("running on w: started", Status::Running, at(1_000)), "too soon after the last");
        assert!(lines.due("running on w: 1 file", Status::Running, t0 + LINES_EVERY));
        assert!(!lines.due("running on w: 2 files", Status::Running, t0 + LINES_EVERY + LINES_EVERY / 2));
        // Back in the queue (a retry) half a pace after the last line: said at once.
        assert!(lines.due("queued", Status::Queued, t0 + LINES_EVERY + LINES_EVERY / 2));
        assert!(!lines.due("queued", Status::Queued, t0 + 3 * LINES_EVERY), "unchanged");
        assert!(lines.due("running on w: started", Status::Running, t0 + 3 * LINES_EVERY));
    }

    #[test]
    fn the_state_and_the_outcome_are_said_in_words() {
        let queued = item(WorkKind::Crawl, Status::Queued, None);
        assert_eq!(state_line(&queued, None), "queued");
        let mut running = item(WorkKind::Crawl, Status::Running, None);
        assert_eq!(state_line(&running, None), "running on -: started");
        running.worker_id = Some(almanac_domain::WorkerId::new("worker-a").unwrap());
        running.progress = Some(serde_json::json!({"done": 3, "total": 4}));
        assert_eq!(state_line(&running, None), "running on worker-a: 3 of 4 files (75.0%)");
        assert_eq!(outcome(&item(WorkKind::Crawl, Status::Succeeded, None)), "succeeded");
        assert_eq!(outcome(&item(WorkKind::Crawl, Status::Cancelled, None)), "cancelled");
        let mut failed = item(WorkKind::Crawl, Status::Failed, None);
        failed.last_error = Some("the share is gone".into());
        assert_eq!(outcome(&failed), "failed: the share is gone");
    }
}
