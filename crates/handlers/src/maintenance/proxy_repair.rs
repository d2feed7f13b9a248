//! What the proxy sweep does about one config's broken proxies: never a write into that config's catalogue rows
//! by the (unscoped) sweep itself, but its queue: a config-scoped `proxy_deletion` of the broken assets (their
//! files and rows go, and `proxies_missing` is set, so the config's next crawl reads them again and makes their
//! proxies again) and a crawl queued behind it. Unless the guard refuses: when more than half of 10 or more of a
//! config's proxy files are missing, the proxy root looks unmounted or emptied, and remaking a whole library onto
//! an unmounted mount point is the last thing to do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use almanac_domain::{
    AssetId, CrawlArgs, DedupKey, NewWorkItem, ProxyDeletionArgs, Scope, StorageConfigId, SweptProxyRoot, WorkArgs,
    WorkKind, ports::MaintenanceStore,
};
use almanac_executor::{HandlerContext, HandlerError};
use tracing::warn;

use crate::MassDeletionGuard;

/// The most assets one sweep queues for repair per config (16 bytes each held until the config's folders are
/// all walked); a later sweep finds the rest.
pub(super) const REPAIRS_PER_SWEEP: usize = 100_000;

/// Assets per `proxy_deletion` item the sweep queues.
pub(super) const ASSETS_PER_ITEM: usize = 1_000;

/// One config's proxies as the sweep found them, folder after folder.
#[derive(Debug)]
pub(super) struct ConfigCheck {
    config: StorageConfigId,
    /// Proxy files (rows of active assets) looked at.
    pub(super) checked: u64,
    /// Of those, confirmed missing.
    missing: u64,
    /// Assets confirmed broken (the first [`REPAIRS_PER_SWEEP`]).
    broken: BTreeSet<AssetId>,
    /// Assets confirmed broken, all of them.
    broken_total: u64,
}

impl ConfigCheck {
    pub(super) fn new(config: StorageConfigId) -> Self {
        Self { config, checked: 0, missing: 0, broken: BTreeSet::new(), broken_total: 0 }
    }

    /// Adds confirmed broken assets, each with how many of its files are missing.
    pub(super) fn add(&mut self, broken: BTreeMap<AssetId, u64>) {
        for (asset, missing) in broken {
            // An asset's files are all in its content's folder: it comes once, unless a folder's listing raced.
            if self.broken.contains(&asset) {
                continue;
            }
            self.missing += missing;
            self.broken_total += 1;
            if self.broken.len() < REPAIRS_PER_SWEEP {
                self.broken.insert(asset);
            }
        }
    }

    /// Assets confirmed broken so far.
    pub(super) fn broken_assets(&self) -> u64 {
        self.broken_total
    }

    /// Whether the guard refuses to repair: the proxy root looks unmounted or emptied for this config.
    pub(super) fn refused(&self, guard: &MassDeletionGuard) -> bool {
        guard.refuses(self.checked, self.missing)
    }

    /// The items that repair the broken assets: their `proxy_deletion`s, then a crawl of the config, each under a
    /// key of its own so that the next sweep's join them while they are queued.
    pub(super) fn repairs(&self) -> Result<Vec<NewWorkItem>, HandlerError> {
        let scope = Scope::Config(self.config);
        let assets: Vec<AssetId> = self.broken.iter().copied().collect();
        let mut items = Vec::new();
        for (part, chunk) in assets.chunks(ASSETS_PER_ITEM).enumerate() {
            let args = ProxyDeletionArgs { asset_ids: chunk.to_vec(), proxy_types: None };
            items.push(args.into_item(scope).map_err(permanent)?.with_dedup_key(follow_up_key(
                WorkKind::ProxyDeletion,
                scope,
                Some(part),
            )?));
        }
        let crawl = CrawlArgs::default().into_item(scope).map_err(permanent)?;
        items.push(crawl.with_dedup_key(follow_up_key(WorkKind::Crawl, scope, None)?));
        Ok(items)
    }

    /// At the end of the config's folders: the guard's refusal (one warning), or the repairs queued (fenced).
    pub(super) async fn settle(
        self,
        store: &impl MaintenanceStore,
        ctx: &HandlerContext,
        guard: &MassDeletionGuard,
        proxy_root: &Path,
        report: &mut SweptProxyRoot,
    ) -> Result<(), HandlerError> {
        let config = self.config;
        if self.refused(guard) {
            warn!(
                event = "proxy_root_looks_emptied",
                config = %config,
                checked = self.checked,
                missing = self.missing,
                proxy_root = %proxy_root.display(),
                "{} of the {} proxy files of storage config {config} are missing (more than {}% of {} or more): \
                 the proxy root {} looks unmounted or emptied, so none was queued to be made again. Mount the proxy \
                 volume (or restore the folder {config} beneath it) and the next sweep finds them; if they really \
                 are gone, remake them with: almanac-worker regenerate --config {config}",
                self.missing,
                self.checked,
                guard.max_percent,
                guard.min_assets,
                proxy_root.display()
            );
            report.refused_configs.push(config);
            return Ok(());
        }
        if self.broken.is_empty() {
            return Ok(());
        }
        report.broken_assets += self.broken_total;
        store
            .enqueue_follow_ups(ctx.fence, &self.repairs()?)
            .await
            .map_err(|e| crate::store_error_while("could not queue the repair of broken proxies: ", e))?;
        report.repairs_queued += self.broken.len() as u64;
        warn!(
            event = "proxies_found_broken",
            config = %config,
            assets = self.broken_total,
            queued = self.broken.len(),
            "proxy files of {} asset(s) of storage config {config} are missing, cut short or replaced; their \
             proxies are queued to be made again (proxy_deletion, then a crawl)",
            self.broken_total
        );
        Ok(())
    }
}

/// The key of a repair item: the kind's own key for the config with `:after:proxy_sweep` (and the part), so it
/// never joins a crawl queued before the repair's deletions, and the next sweep's joins it while it waits.
fn follow_up_key(kind: WorkKind, scope: Scope, part: Option<usize>) -> Result<DedupKey, HandlerError> {
    let key = DedupKey::for_work(kind, scope);
    let key = match part {
        Some(part) => format!("{key}:after:{}:{part}", WorkKind::ProxySweep),
        None => format!("{key}:after:{}", WorkKind::ProxySweep),
    };
    DedupKey::new(key).map_err(permanent)
}

fn permanent(e: almanac_domain::DomainError) -> HandlerError {
    HandlerError::permanent(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repairs_are_deletions_in_parts_then_one_crawl_each_under_a_key_of_its_own() {
        let config = StorageConfigId::from_uuid(uuid::Uuid::nil());
        let mut check = ConfigCheck::new(config);
        check.checked = 10_000;
        check.add((0..2_500).map(|_| (AssetId::new(), 1)).collect());
        let items = check.repairs().unwrap();
        let kinds: Vec<WorkKind> = items.iter().map(|i| i.kind()).collect();
        assert_eq!(kinds, [WorkKind::ProxyDeletion, WorkKind::ProxyDeletion, WorkKind::ProxyDeletion, WorkKind::Crawl]);
        let keys: Vec<&str> = items.iter().map(|i| i.dedup_key.as_deref().unwrap()).collect();
        let nil = "00000000-0000-0000-0000-000000000000";
        assert_eq!(keys[0], format!("proxy_deletion:{nil}:after:proxy_sweep:0"));
        assert_eq!(keys[2], format!("proxy_deletion:{nil}:after:proxy_sweep:2"));
        assert_eq!(keys[3], format!("crawl:{nil}:after:proxy_sweep"), "never the scheduled crawl's own key");
        let sizes: Vec<usize> =
            items[..3].iter().map(|i| ProxyDeletionArgs::from_payload(i.payload()).unwrap().asset_ids.len()).collect();
        assert_eq!(sizes, [1_000, 1_000, 500]);
        assert!(items.iter().all(|i| i.scope() == Scope::Config(config)));
    }

    #[test]
    fn the_guard_refuses_when_more_than_half_of_ten_or_more_files_are_missing() {
        let guard = MassDeletionGuard::default();
        let with = |checked, missing: u64| {
            let mut check = ConfigCheck::new(StorageConfigId::new());
            check.checked = checked;
            check.add((0..missing).map(|_| (AssetId::new(), 1)).collect());
            check
        };
        assert!(with(12, 12).refused(&guard) && with(12, 7).refused(&guard));
        assert!(!with(12, 6).refused(&guard), "exactly half is repaired");
        assert!(!with(9, 9).refused(&guard), "a library of fewer than ten files is not guarded");
        // Cut short or replaced is not missing: a volume that is mounted.
        let mut short = with(12, 0);
        short.add((0..12).map(|_| (AssetId::new(), 0)).collect());
        assert!(!short.refused(&guard) && short.broken_assets() == 12);
    }

    #[test]
    fn one_sweep_holds_and_queues_at_most_its_share_of_assets_and_counts_the_rest() {
        let mut check = ConfigCheck::new(StorageConfigId::new());
        let assets: Vec<AssetId> = (0..REPAIRS_PER_SWEEP + 5).map(|_| AssetId::new()).collect();
        check.add(assets.iter().map(|a| (*a, 0)).collect());
        check.add(assets[..3].iter().map(|a| (*a, 0)).collect());
        assert_eq!(check.broken.len(), REPAIRS_PER_SWEEP);
        assert_eq!(check.broken_assets(), (REPAIRS_PER_SWEEP + 5) as u64);
    }
}
