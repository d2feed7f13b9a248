//! Almanac Worker's handlers. Each implements the executor's [`almanac_executor::Handler`] contract: it
//! honours its cancellation token between steps, writes files idempotently (temporary name, then rename) and
//! never touches an original.
//!
//! **Architecture invariant:** handlers depend on the domain's ports, never on the PostgreSQL adapter.

pub mod bursts;
pub mod crawl;
pub mod maintenance;
pub mod schedule;

pub use bursts::{BurstDetectionHandler, BurstSettings, group_bursts};
pub use crawl::{CrawlHandler, CrawlSettings, MassDeletionGuard};
pub use maintenance::{
    ProxyDeletionHandler, ProxySweepHandler, PurgeHandler, PurgeSettings, RetentionSettings, TokenCleanupHandler,
    WorkItemRetentionHandler,
};
pub use schedule::{ScheduleError, ScheduleSettings, Scheduler};

use almanac_domain::CatalogueError;
use almanac_executor::HandlerError;

/// A catalogue error ends the attempt as retryable: an outage passes, and an unexpected answer is logged with
/// the item and retried within its budget rather than dropping the work.
pub(crate) fn store_error(e: CatalogueError) -> HandlerError {
    HandlerError::retryable(e.to_string())
}
