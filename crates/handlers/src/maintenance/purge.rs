//! Purge: a config's soft-deleted assets past retention go, proxy files first, then rows.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{PurgeArgs, PurgeReport, ports::MaintenanceStore};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, WorkHandler};
use serde::Serialize;
use tracing::{info, warn};

use super::chrono_duration;
use super::proxy_files::{check_folders_in_place, delete_files};
use crate::{report_progress, store_error};

/// Purge's settings.
#[derive(Debug, Clone)]
pub struct PurgeSettings {
    /// Where proxies live.
    pub proxy_root: PathBuf,
    /// Soft-deleted assets older than this are purged (default 30 days).
    pub purge_after: Duration,
    /// Assets per batch.
    pub batch: i64,
}

impl PurgeSettings {
    /// Assets purged per batch (one transaction each).
    pub const DEFAULT_BATCH: i64 = 100;
    /// How long a soft-deleted asset is kept before it is purged (`schedule.purge_after`).
    pub const DEFAULT_PURGE_AFTER: Duration = Duration::from_secs(30 * 86_400);
    /// The longest `purge_after`: a century (36,525 days), never in practice. The purge's cutoff, this long before
    /// the database's clock, is then a time the database holds.
    pub const MAX_PURGE_AFTER: Duration = Duration::from_secs(36_525 * 86_400);

    /// Purge of soft-deleted assets older than `purge_after`, whose proxies live under `proxy_root`.
    pub fn new(proxy_root: PathBuf, purge_after: Duration) -> Self {
        Self { proxy_root, purge_after, batch: Self::DEFAULT_BATCH }
    }
}

/// A purge's progress: assets purged so far, and proxy files kept (they could not be deleted).
#[derive(Serialize)]
struct PurgeProgress {
    purged: usize,
    kept: u64,
}

/// The purge handler (kind `purge`): proxy files first, then rows, each batch's rows in one transaction that
/// re-checks every asset is still soft-deleted. Nothing is purged while a crawl of the config is failing
/// ([`MaintenanceStore::failing_crawl`]). Safe beside a crawl only because no crawl of the same config
/// runs meanwhile (ADR 0008). Originals are never touched.
pub struct PurgeHandler<M> {
    store: Arc<M>,
    settings: PurgeSettings,
}

impl<M> PurgeHandler<M> {
    /// A purge handler over this store.
    pub fn new(store: Arc<M>, settings: PurgeSettings) -> Self {
        Self { store, settings }
    }
}

impl<M: MaintenanceStore + 'static> WorkHandler for PurgeHandler<M> {
    type Args = PurgeArgs;

    fn work(&self, _: PurgeArgs, ctx: HandlerContext) -> BoxFuture<'_, Result<PurgeReport, HandlerError>> {
        Box::pin(async move {
            let config = ctx.config()?;
            // Deleting is for good, and a soft-deleted asset is known gone only as of the last crawl that read the
            // library: while the config's crawls fail, a share that went away may bring its files back.
            if let Some(crawl) = self.store.failing_crawl(config).await.map_err(store_error)? {
                warn!(event = "purge_held", crawl = %crawl.item, retrying = crawl.retrying, error = %crawl.error,
                      "nothing was purged: a crawl of the config failed since the library was last read whole, so \
                       whether its soft-deleted photos and videos are gone for good is not known (a share or disk \
                       that went away may bring them back). Mend what the crawl's error names; the first purge after \
                       a crawl of the whole library succeeds deletes as usual");
                return Ok(PurgeReport::held_by(crawl.item));
            }
            let cutoff = self.store.db_now().await.map_err(store_error)? - chrono_duration(self.settings.purge_after);
            // The files that keep their assets: the first few named, all counted.
            let (mut purged, mut files_kept, mut kept) = (0usize, Vec::new(), 0u64);
            let limit = self.settings.batch.max(1);
            let mut after = None;
            loop {
                if ctx.cancel.is_cancelled() {
                    return Err(HandlerError::cancelled());
                }
                let mut batch =
                    self.store.purge_candidates(config, cutoff, after.as_ref(), limit).await.map_err(store_error)?;
                // Only an empty batch is the end: no count to get wrong (a wrong one ended early or never).
                if batch.is_empty() {
                    break;
                }
                let mut to_delete = Vec::new();
                for candidate in &batch {
                    // Before each asset's files: a stopped attempt deletes nothing more (a takeover may be
                    // reviving this very content).
                    if ctx.cancel.is_cancelled() {
                        return Err(HandlerError::cancelled());
                    }
                    // Proxy files derive from (config, content): while an active asset has the same content,
                    // they are its files too and stay.
                    let (blocked, problems) = if candidate.content_still_active {
                        (HashSet::new(), Vec::new())
                    } else {
                        // And the attempt must still hold its item: one whose host slept past its lease, its
                        // clock stopped, would delete what a newer attempt made meanwhile. The asset is marked as
                        // losing its proxies first: stopped before its rows go, it gets them again if revived.
                        let asset = candidate.asset_id;
                        self.store.proxies_going(ctx.fence, asset).await.map_err(store_error)?;
                        let root = self.settings.proxy_root.clone();
                        let proxies = candidate.proxies.clone();
                        // The config's proxy folder is there (a proxy volume mounted): a deletion keeps it.
                        let delete = move || {
                            check_folders_in_place(&root, &proxies, "Nothing more was purged; the purge")?;
                            delete_files(&root, &proxies, Some(config))
                        };
                        tokio::task::spawn_blocking(delete).await.map_err(|e| {
                            HandlerError::retryable(format!("deleting proxy files ended abnormally: {e}"))
                        })??
                    };
                    if blocked.is_empty() {
                        to_delete.push(candidate.asset_id);
                    } else {
                        for problem in problems {
                            almanac_domain::list_one(&mut files_kept, &mut kept, problem);
                        }
                    }
                }
                let deleted =
                    self.store.purge_rows(ctx.fence, config, &to_delete, cutoff).await.map_err(store_error)?;
                purged += deleted.len();
                report_progress(&ctx.progress, &PurgeProgress { purged, kept });
                // The next batch starts after this one's last asset, so assets that stay (their files cannot be
                // deleted; retried next time) never hold back the ones after them.
                after = batch.pop();
            }
            info!(event = "purged", purged, kept, "purge finished");
            if !files_kept.is_empty() {
                warn!(event = "purge_incomplete", files = ?files_kept.iter().take(20).collect::<Vec<_>>(),
                      "some proxy files could not be deleted; their assets stay soft-deleted and are retried next time");
            }
            Ok(PurgeReport::new(purged as u64, files_kept, kept))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_goes_in_batches_of_a_hundred_unless_set() {
        assert_eq!(PurgeSettings::new("/p".into(), Duration::from_secs(1)).batch, PurgeSettings::DEFAULT_BATCH);
        assert_eq!(PurgeSettings::DEFAULT_BATCH, 100);
    }
}
