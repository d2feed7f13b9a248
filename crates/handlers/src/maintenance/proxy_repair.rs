//! What the proxy sweep does about one config's broken proxies: never a write into that config's catalogue rows
//! by the (unscoped) sweep itself, but its queue: a config-scoped `proxy_deletion` of the broken assets (their
//! files and rows go, and `proxies_missing` is set, so the config's next crawl reads them again and makes their
//! proxies again) and a crawl queued behind it. Unless the proxy root looks unmounted or emptied, since remaking a
//! whole library onto an unmounted mount point is the last thing to do: more of a config's proxy files missing
//! than the operator's mass-deletion guard allows (`storage.mass_deletion_*`: more than half of 10 or more by
//! default), or the root changed, emptied or lost part-way through the sweep ([`super::root_watch`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use almanac_domain::{
    AssetId, CrawlArgs, DedupKey, NewWorkItem, ProxyDeletionArgs, Scope, StorageConfigId, SweptProxyRoot, WorkArgs,
    WorkKind, ports::MaintenanceStore,
};
use almanac_executor::{HandlerContext, HandlerError};
use almanac_media::RootFolder;
use tracing::warn;

use super::proxy_sweep::blocking;
use super::root_watch::{RootAtStart, gone_witnesses};
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
    /// Folders that were there at the config's start and gone at their turn, with broken assets' files in them.
    vanished: Vec<String>,
    /// One file found whole in each folder found whole: looked at again right before repairs are queued.
    witnesses: Vec<String>,
    /// Why the proxy root stopped looking like the one the sweep began with, when it did.
    lost: Option<String>,
}

impl ConfigCheck {
    pub(super) fn new(config: StorageConfigId) -> Self {
        Self {
            config,
            checked: 0,
            missing: 0,
            broken: BTreeSet::new(),
            broken_total: 0,
            vanished: Vec::new(),
            witnesses: Vec::new(),
            lost: None,
        }
    }

    /// A folder (`<2 hex>`) that was there at the config's start is gone at its turn, while its rows expected
    /// files that are confirmed missing: a volume lost or emptied part-way through.
    pub(super) fn vanished(&mut self, prefix: &str) {
        self.vanished.push(prefix.to_owned());
    }

    /// A file found whole, to look at again before any repair is queued (one per folder).
    pub(super) fn witness(&mut self, file: String) {
        self.witnesses.push(file);
    }

    /// The proxy root changed part-way through the config's folders (`why`): nothing of it is repaired.
    pub(super) fn lost(&mut self, why: String) {
        self.lost.get_or_insert(why);
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

    /// Why nothing is repaired, when the proxy root looks unmounted or emptied for this config: it changed or
    /// lost folders during the sweep, or more of the config's files are missing than the guard allows.
    pub(super) fn refusal(&self, guard: &MassDeletionGuard) -> Option<String> {
        let config = self.config;
        if let Some(why) = &self.lost {
            return Some(format!("{why} (found while checking the proxy files of storage config {config})"));
        }
        if let Some(first) = self.vanished.first() {
            return Some(format!(
                "{} folder(s) of storage config {config}'s proxies (the first {config}/{first}) were there when the \
                 sweep began and gone when it came to them",
                self.vanished.len()
            ));
        }
        guard.refuses(self.checked, self.missing).then(|| {
            format!(
                "{} of the {} proxy files of storage config {config} are missing (more than {}% of {} or more)",
                self.missing, self.checked, guard.max_percent, guard.min_assets
            )
        })
    }

    /// The items that repair the broken assets: their `proxy_deletion`s, then a crawl of the config, under keys
    /// naming these very findings (a digest of the assets), so that a later sweep finding the same joins them
    /// while they are queued, and one finding other assets queues its own deletions and a crawl after them
    /// (joining would keep the earlier list and lose its assets).
    pub(super) fn repairs(&self) -> Result<Vec<NewWorkItem>, HandlerError> {
        let scope = Scope::Config(self.config);
        let assets: Vec<AssetId> = self.broken.iter().copied().collect();
        let ids: Vec<u8> = assets.iter().flat_map(|a| a.as_uuid().into_bytes()).collect();
        let digest = almanac_media::hash_bytes(&ids).hash;
        let findings = &digest.as_hex()[..16];
        let mut items = Vec::new();
        for (part, chunk) in assets.chunks(ASSETS_PER_ITEM).enumerate() {
            let args = ProxyDeletionArgs { asset_ids: chunk.to_vec(), proxy_types: None };
            let key = follow_up_key(WorkKind::ProxyDeletion, scope, &format!("{findings}:{part}"))?;
            items.push(args.into_item(scope).map_err(permanent)?.with_dedup_key(key));
        }
        let crawl = CrawlArgs::default().into_item(scope).map_err(permanent)?;
        items.push(crawl.with_dedup_key(follow_up_key(WorkKind::Crawl, scope, findings)?));
        Ok(items)
    }

    /// At the end of the config's folders: the refusal (one warning), or, once the root and the files found
    /// whole are looked at again, the repairs queued (fenced).
    pub(super) async fn settle(
        mut self,
        store: &impl MaintenanceStore,
        ctx: &HandlerContext,
        guard: &MassDeletionGuard,
        (root, at_start): (&Arc<RootFolder>, &RootAtStart),
        report: &mut SweptProxyRoot,
    ) -> Result<(), HandlerError> {
        if !self.broken.is_empty() && self.refusal(guard).is_none() {
            self.look_again(root, at_start).await?;
        }
        let config = self.config;
        if let Some(why) = self.refusal(guard) {
            warn!(
                event = "proxy_root_looks_emptied",
                config = %config,
                checked = self.checked,
                missing = self.missing,
                proxy_root = %at_start.path().display(),
                "{why}: the proxy root {} looks unmounted or emptied, so none was queued to be made again. Mount \
                 the proxy volume (or restore the folder {config} beneath it) and the next sweep finds them; if they \
                 really are gone, remake them with: almanac-worker regenerate --config {config}",
                at_start.path().display()
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

    /// Right before repairs are queued: the root is still the one the sweep opened, and every file found whole
    /// in an earlier folder is still there (a volume lost since takes them too).
    async fn look_again(&mut self, root: &Arc<RootFolder>, at_start: &RootAtStart) -> Result<(), HandlerError> {
        if let Some(why) = at_start.changed() {
            self.lost(why);
            return Ok(());
        }
        let (root, witnesses) = (root.clone(), std::mem::take(&mut self.witnesses));
        let gone = blocking(move || gone_witnesses(&root, &witnesses)).await?;
        if let Some(first) = gone.first() {
            self.lost(format!(
                "{} proxy file(s) found whole earlier in this sweep are gone now (the first {first})",
                gone.len()
            ));
        }
        Ok(())
    }
}

/// The key of a repair item: the kind's own key for the config with `:after:proxy_sweep:` and what names the
/// findings (and the part), so it never joins a crawl queued before the repair's deletions, nor a repair of
/// other findings.
fn follow_up_key(kind: WorkKind, scope: Scope, findings: &str) -> Result<DedupKey, HandlerError> {
    let key = DedupKey::for_work(kind, scope);
    DedupKey::new(format!("{key}:after:{}:{findings}", WorkKind::ProxySweep)).map_err(permanent)
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
        let findings =
            keys[3].strip_prefix(&format!("crawl:{nil}:after:proxy_sweep:")).expect("never the scheduled key");
        assert_eq!(findings.len(), 16);
        assert_eq!(keys[0], format!("proxy_deletion:{nil}:after:proxy_sweep:{findings}:0"));
        assert_eq!(keys[2], format!("proxy_deletion:{nil}:after:proxy_sweep:{findings}:2"));
        assert_eq!(check.repairs().unwrap()[0].dedup_key, items[0].dedup_key, "the same findings, the same keys");
        check.add([(AssetId::new(), 1)].into());
        let other = check.repairs().unwrap();
        assert!(other.iter().zip(&items).all(|(a, b)| a.dedup_key != b.dedup_key), "other findings, other keys");
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
        let refused = |check: &ConfigCheck| check.refusal(&guard).is_some();
        assert!(refused(&with(12, 12)) && refused(&with(12, 7)));
        assert!(with(12, 7).refusal(&guard).unwrap().contains("7 of the 12 proxy files"));
        assert!(!refused(&with(12, 6)), "exactly half is repaired");
        assert!(!refused(&with(9, 9)), "a library of fewer than ten files is not guarded");
        // Cut short or replaced is not missing: a volume that is mounted.
        let mut short = with(12, 0);
        short.add((0..12).map(|_| (AssetId::new(), 0)).collect());
        assert!(!refused(&short) && short.broken_assets() == 12);
        // A folder gone part-way through, or a root that changed, refuses whatever the counts.
        let mut vanished = with(100, 1);
        vanished.vanished("ab");
        assert!(vanished.refusal(&guard).unwrap().contains("/ab) were there when the sweep began"));
        let mut lost = with(100, 0);
        lost.lost("the proxy root /p is gone".into());
        assert!(lost.refusal(&guard).unwrap().starts_with("the proxy root /p is gone"));
        let strict = MassDeletionGuard { min_assets: 3, max_percent: 10 };
        assert!(with(12, 2).refusal(&strict).is_some() && with(12, 2).refusal(&guard).is_none(), "the guard given");
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
