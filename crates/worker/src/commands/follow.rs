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
    let (mut last_line, mut last_printed) = (String::new(), None::<Instant>);
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
            println!("{id} {}", outcome(&item));
            return Ok(if item.status == Status::Succeeded { Exit::Success } else { Exit::Failure });
        }
        let line = state_line(&item, bar.as_ref());
        match &bar {
            Some(bar) => bar.set_message(line),
            None if line != last_line
                && (item.status != Status::Running || last_printed.is_none_or(|t| t.elapsed() >= LINES_EVERY)) =>
            {
                println!("{id} {line}");
                (last_line, last_printed) = (line, Some(Instant::now()));
            }
            None => {}
        }
        tokio::time::sleep(EVERY).await;
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
