//! Work item retention: finished items past retention go, in batches; never a queued or running one, nor what the
//! purge reads of a config's crawls (`MaintenanceStore::delete_finished_work`).

use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{DeletionReport, WorkItemRetentionArgs, ports::MaintenanceStore};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, WorkHandler};
use tracing::info;

use super::{chrono_duration, delete_in_batches};
use crate::store_error;

/// Retention of finished work items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Succeeded and cancelled items are kept this long (default 7 days).
    pub done: Duration,
    /// Failed items are kept this long (default 30 days).
    pub failed: Duration,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self { done: Duration::from_secs(7 * 86_400), failed: Duration::from_secs(30 * 86_400) }
    }
}

/// The retention handler (kind `work_item_retention`): deletes finished items past retention, in batches;
/// never a queued or running one, nor what the purge reads of a config's crawls.
pub struct WorkItemRetentionHandler<M> {
    store: Arc<M>,
    settings: RetentionSettings,
}

impl<M> WorkItemRetentionHandler<M> {
    /// A retention handler.
    pub fn new(store: Arc<M>, settings: RetentionSettings) -> Self {
        Self { store, settings }
    }
}

impl<M: MaintenanceStore + 'static> WorkHandler for WorkItemRetentionHandler<M> {
    type Args = WorkItemRetentionArgs;

    fn work(
        &self,
        _: WorkItemRetentionArgs,
        ctx: HandlerContext,
    ) -> BoxFuture<'_, Result<DeletionReport, HandlerError>> {
        Box::pin(async move {
            let now = self.store.db_now().await.map_err(store_error)?;
            let (done, failed) =
                (now - chrono_duration(self.settings.done), now - chrono_duration(self.settings.failed));
            let deleted =
                delete_in_batches(&ctx, |limit| self.store.delete_finished_work(ctx.fence, done, failed, limit))
                    .await?;
            info!(event = "work_items_deleted", deleted, "retention finished");
            Ok(DeletionReport::new(deleted))
        })
    }
}
