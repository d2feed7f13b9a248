//! Proxy deletion: given assets' proxies go, files then rows, so the next crawl makes them again.

use std::path::PathBuf;
use std::sync::Arc;

use almanac_domain::{
    DeletionReport, ProxyDeletionArgs, Scope,
    ports::{MaintenanceStore, StoredProxy},
};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, WorkHandler};
use tracing::info;

use super::proxy_files::{check_folders_in_place, delete_files};
use crate::{report_progress, store_error};

/// The proxy deletion handler (kind `proxy_deletion`, arguments [`ProxyDeletionArgs`]: the assets, and
/// optionally which types of proxy). Deletes the files, then the rows, so the next crawl can regenerate them.
pub struct ProxyDeletionHandler<M> {
    store: Arc<M>,
    proxy_root: PathBuf,
}

impl<M> ProxyDeletionHandler<M> {
    /// A proxy deletion handler.
    pub fn new(store: Arc<M>, proxy_root: PathBuf) -> Self {
        Self { store, proxy_root }
    }
}

/// The assets whose files one check that the attempt holds its item covers: what an attempt that lost its item
/// while asleep may still delete once it wakes is at most their files.
const ASSETS_PER_CHECK: usize = 100;

impl<M: MaintenanceStore + 'static> WorkHandler for ProxyDeletionHandler<M> {
    type Args = ProxyDeletionArgs;

    fn work(
        &self,
        args: ProxyDeletionArgs,
        ctx: HandlerContext,
    ) -> BoxFuture<'_, Result<DeletionReport, HandlerError>> {
        Box::pin(async move {
            let ProxyDeletionArgs { asset_ids: assets, proxy_types: types } = args;
            // A config-scoped item touches only its config: ids of another config's assets are refused, and
            // nothing is deleted.
            if let Scope::Config(config) = ctx.item.scope {
                let foreign = self.store.assets_of_other_configs(config, &assets).await.map_err(store_error)?;
                if !foreign.is_empty() {
                    return Err(HandlerError::permanent(format!(
                        "{} of the asset ids belong to another storage config than {config}, which this item is \
                         scoped to; nothing was deleted. Enqueue proxy_deletion for their own config, or without \
                         a config. Foreign ids: {}",
                        foreign.len(),
                        foreign.iter().take(20).map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
            let mut deleted = 0u64;
            let mut problems = Vec::new();
            for chunk in assets.chunks(ASSETS_PER_CHECK) {
                if ctx.cancel.is_cancelled() {
                    return Err(HandlerError::cancelled());
                }
                // The attempt must still hold its item before it unlinks: one whose host slept past its lease,
                // its clock stopped, would delete files a newer attempt of the config made meanwhile.
                self.store.still_holds(ctx.fence).await.map_err(store_error)?;
                let proxies = self.store.proxies_of(chunk, types.as_deref()).await.map_err(store_error)?;
                let (root, files) = (self.proxy_root.clone(), proxies.clone());
                let scope = ctx.item.scope.storage_config();
                // The folders of the proxies' configs are there (a proxy volume mounted): a deletion keeps them.
                let delete = move || {
                    check_folders_in_place(&root, &files, "Nothing more was deleted; the proxy deletion")?;
                    delete_files(&root, &files, scope)
                };
                let (blocked, p) = tokio::task::spawn_blocking(delete)
                    .await
                    .map_err(|e| HandlerError::retryable(format!("deleting proxy files ended abnormally: {e}")))??;
                problems.extend(p);
                let gone: Vec<StoredProxy> = proxies.into_iter().filter(|p| !blocked.contains(&p.asset_id)).collect();
                deleted += self.store.delete_proxy_rows(ctx.fence, &gone).await.map_err(store_error)?;
                report_progress(&ctx.progress, &DeletionReport::new(deleted));
            }
            info!(event = "proxies_deleted", deleted, "proxies deleted");
            if !problems.is_empty() {
                return Err(HandlerError::retryable(format!(
                    "{} proxy file(s) could not be deleted (their rows are kept): {}",
                    problems.len(),
                    problems.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
                )));
            }
            Ok(DeletionReport::new(deleted))
        })
    }
}
