//! Token cleanup: refresh tokens expired or revoked past a grace period go, in batches.

use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{DeletionReport, TokenCleanupArgs, ports::MaintenanceStore};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, WorkHandler};
use tracing::info;

use super::{chrono_duration, delete_in_batches};
use crate::store_error;

/// The token cleanup handler (kind `token_cleanup`): deletes refresh tokens expired or revoked longer than
/// `grace` ago, in batches.
pub struct TokenCleanupHandler<M> {
    store: Arc<M>,
    grace: Duration,
}

impl<M> TokenCleanupHandler<M> {
    /// How long refresh tokens are kept once expired or revoked, before they are deleted.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(7 * 86_400);

    /// A token cleanup handler.
    pub fn new(store: Arc<M>, grace: Duration) -> Self {
        Self { store, grace }
    }
}

impl<M: MaintenanceStore + 'static> WorkHandler for TokenCleanupHandler<M> {
    type Args = TokenCleanupArgs;

    fn work(&self, _: TokenCleanupArgs, ctx: HandlerContext) -> BoxFuture<'_, Result<DeletionReport, HandlerError>> {
        Box::pin(async move {
            let cutoff = self.store.db_now().await.map_err(store_error)? - chrono_duration(self.grace);
            let deleted =
                delete_in_batches(&ctx, |limit| self.store.delete_refresh_tokens(ctx.fence, cutoff, cutoff, limit))
                    .await?;
            info!(event = "tokens_deleted", deleted, "token cleanup finished");
            Ok(DeletionReport::new(deleted))
        })
    }
}
