//! The maintenance handlers, one per file with its settings and defaults beside it: purge, proxy deletion,
//! proxy sweep, token cleanup and work item retention; and the start-up removal of temporary debris.
//! `proxy_files` holds what they share about files under the proxy root; the sweep's check that proxies are
//! whole is `proxy_check` (one folder's files against its rows), `proxy_repair` (what is queued about it) and
//! `root_watch` (whether the proxy root is still the one the sweep began with).

mod debris;
mod proxy_check;
mod proxy_deletion;
mod proxy_files;
mod proxy_repair;
mod proxy_sweep;
mod purge;
mod retention;
mod root_watch;
mod token_cleanup;

use std::time::Duration;

use almanac_domain::DeletionReport;
use almanac_executor::{HandlerContext, HandlerError};

use crate::{report_progress, store_error};

pub use debris::{DebrisReport, remove_temporary_debris};
pub use proxy_deletion::ProxyDeletionHandler;
pub use proxy_sweep::ProxySweepHandler;
pub use purge::{PurgeHandler, PurgeSettings};
pub use retention::{RetentionSettings, WorkItemRetentionHandler};
pub use token_cleanup::TokenCleanupHandler;

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Rows deleted per batch by the cleanup handlers.
const DELETE_BATCH: i64 = 1000;

/// Calls `batch` with the batch size until it deletes nothing, honouring cancellation between batches and
/// reporting the running total as progress. Returns the total deleted. Only an empty batch ends it: a statement
/// more than stopping at a short batch, and no count to get wrong (a wrong one ended early or never).
async fn delete_in_batches<F, Fut>(ctx: &HandlerContext, mut batch: F) -> Result<u64, HandlerError>
where
    F: FnMut(i64) -> Fut,
    Fut: std::future::Future<Output = Result<u64, almanac_domain::ports::CatalogueError>>,
{
    let mut deleted = 0;
    loop {
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        let n = batch(DELETE_BATCH).await.map_err(store_error)?;
        if n == 0 {
            return Ok(deleted);
        }
        deleted += n;
        report_progress(&ctx.progress, &DeletionReport::new(deleted));
    }
}
