//! Almanac Worker's handlers, one per file. Each is an [`almanac_executor::WorkHandler`] of its kind's typed
//! arguments and result, and keeps the executor's handler contract: it honours its cancellation token between
//! steps, writes files idempotently (temporary name, then rename) and never touches an original.
//!
//! **Architecture invariant:** handlers depend on the domain's ports, never on the PostgreSQL adapter.

pub mod bursts;
pub mod crawl;
pub mod maintenance;
pub mod schedule;
pub mod watch;

pub use bursts::{BurstDetectionHandler, BurstSettings, group_bursts};
pub use crawl::{CrawlHandler, CrawlSettings, MassDeletionGuard};
pub use maintenance::{
    ProxyDeletionHandler, ProxySweepHandler, PurgeHandler, PurgeSettings, RetentionSettings, TokenCleanupHandler,
    WorkItemRetentionHandler,
};
pub use schedule::{QuietHours, ScheduleError, ScheduleSettings, Scheduler};
pub use watch::{InQuietHours, WatchSettings, Watching};

use almanac_domain::ports::CatalogueError;
use almanac_executor::{HandlerError, ProgressReporter};

/// A catalogue error ends the attempt. The database being unavailable (a lost connection, a killed backend, a
/// failover) is an outage, not a failure of the work: the item goes back to the queue and no failure is counted
/// (docs/safety.md, invariant 9). Anything else is retryable: an unexpected answer is logged with the item and retried
/// within its budget rather than dropping the work.
pub(crate) fn store_error(e: CatalogueError) -> HandlerError {
    store_error_while("", e)
}

/// The refusal of work on a config whose proxies the catalogue has under the proxy root when their folder is not
/// there (`found`: what is there instead): the proxy volume is not mounted, or the folder was removed. `then`
/// leads what became of the work ("Nothing was deleted; the proxy deletion"). The one home of what to do: a crawl
/// would write every proxy onto the disk beneath an empty mount point, and a deletion would take the rows that
/// make the crawl look (as if their files were deleted), so the operator confirms by making the folder again.
pub(crate) fn proxy_folder_missing(
    folder: &std::path::Path,
    found: &str,
    then: &str,
    config: almanac_domain::StorageConfigId,
) -> HandlerError {
    HandlerError::retryable(format!(
        "the catalogue has proxies of this config under the proxy root (storage.proxy_root), but their folder {} is \
         not there ({found}): the proxy volume is not mounted, or the folder was removed. {then} is tried again \
         while it has attempts left. Mount the proxy volume; if its proxies are really gone, make that folder again \
         (empty, writable by the Worker's user) and `almanac-worker regenerate --config {config}` makes them again",
        folder.display()
    ))
}

/// [`store_error`], its message led by what the handler was doing (`"could not enqueue burst detection: "`).
pub(crate) fn store_error_while(doing: &str, e: CatalogueError) -> HandlerError {
    let message = format!("{doing}{e}");
    match e {
        CatalogueError::Unavailable(_) => HandlerError::outage(message),
        CatalogueError::Lost | CatalogueError::Refused(_) | CatalogueError::Unexpected(_) => {
            HandlerError::retryable(message)
        }
    }
}

/// Reports a handler's typed progress (its JSON is what the page and `ProgressEstimate` read).
pub(crate) fn report_progress(reporter: &ProgressReporter, progress: &impl serde::Serialize) {
    reporter.report(serde_json::to_value(progress).expect("a handler's progress serializes to JSON"));
}
