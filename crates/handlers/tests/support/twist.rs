//! One delegating wrapper per port, for the tests that put one twist at one step of a handler: a test's type
//! implements [`RealStore`] (the real store every step goes to) and overrides only its twisted step of
//! [`MaintenanceTwist`] or [`CatalogueTwist`]; [`Twisted`] makes it the port. Every other step goes to the real
//! store unchanged, so a test names nothing but its twist.
//!
//! A step added to a port is added here once: to its twist trait (going to the real store) and to `Twisted`.
//! [`AfterListing`] is the twist the crawl tests share: a step run right after the walk listed a folder.

use std::future::Future;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Mutex;

use almanac_domain::{
    AssetId, CaptureTime, ContentHash, NewWorkItem, ProxyType, StorageConfig, StorageConfigId,
    ports::{
        BurstFrame, BurstGroup, CatalogueError, CatalogueStore, DatabaseClock, Fence, FileFacts, HashMatch,
        IngestOutcome, KnownFile, MaintenanceStore, NewAsset, NewProxy, PairingCandidate, PurgeCandidate,
        ServedConfigs, Sidecar, StoredProxy,
    },
};
use almanac_store_pg::PgStore;
use chrono::{DateTime, Utc};
use rustix::fs::inotify;

/// What every twist has: the real store, and the database's clock (twistable too).
pub trait RealStore: Send + Sync {
    /// The real store every step not twisted goes to.
    fn store(&self) -> &PgStore;

    fn db_now(&self) -> impl Future<Output = Result<DateTime<Utc>, CatalogueError>> + Send {
        self.store().db_now()
    }
}

/// The maintenance statements, each going to the real store unless the test overrides it.
pub trait MaintenanceTwist: RealStore {
    fn burst_frames(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<BurstFrame>, CatalogueError>> + Send {
        self.store().burst_frames(config)
    }

    fn replace_bursts(
        &self,
        fence: Fence,
        config: StorageConfigId,
        groups: &[BurstGroup],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().replace_bursts(fence, config, groups)
    }

    fn purge_candidates(
        &self,
        config: StorageConfigId,
        before: DateTime<Utc>,
        after: Option<&PurgeCandidate>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<PurgeCandidate>, CatalogueError>> + Send {
        self.store().purge_candidates(config, before, after, limit)
    }

    fn purge_rows(
        &self,
        fence: Fence,
        config: StorageConfigId,
        assets: &[AssetId],
        before: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<AssetId>, CatalogueError>> + Send {
        self.store().purge_rows(fence, config, assets, before)
    }

    fn proxies_of(
        &self,
        assets: &[AssetId],
        types: Option<&[ProxyType]>,
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send {
        self.store().proxies_of(assets, types)
    }

    fn assets_of_other_configs(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<AssetId>, CatalogueError>> + Send {
        self.store().assets_of_other_configs(config, assets)
    }

    fn storage_config_ids(&self) -> impl Future<Output = Result<Vec<StorageConfigId>, CatalogueError>> + Send {
        self.store().storage_config_ids()
    }

    fn delete_proxy_rows(
        &self,
        fence: Fence,
        proxies: &[StoredProxy],
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.store().delete_proxy_rows(fence, proxies)
    }

    fn referenced_proxy_paths(
        &self,
        paths: &[String],
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send {
        self.store().referenced_proxy_paths(paths)
    }

    fn configs_to_check(
        &self,
        served: ServedConfigs,
    ) -> impl Future<Output = Result<Vec<StorageConfigId>, CatalogueError>> + Send {
        self.store().configs_to_check(served)
    }

    fn proxy_folders(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send {
        self.store().proxy_folders(config)
    }

    fn referenced_proxy_paths_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send {
        self.store().referenced_proxy_paths_in(config, prefix)
    }

    fn proxies_to_check_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send {
        self.store().proxies_to_check_in(config, prefix)
    }

    fn proxies_to_check_of(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send {
        self.store().proxies_to_check_of(config, assets)
    }

    fn enqueue_follow_ups(
        &self,
        fence: Fence,
        items: &[NewWorkItem],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().enqueue_follow_ups(fence, items)
    }

    fn delete_refresh_tokens(
        &self,
        fence: Fence,
        expired_before: DateTime<Utc>,
        revoked_before: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.store().delete_refresh_tokens(fence, expired_before, revoked_before, limit)
    }

    fn delete_finished_work(
        &self,
        fence: Fence,
        done_before: DateTime<Utc>,
        failed_before: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.store().delete_finished_work(fence, done_before, failed_before, limit)
    }
}

/// The catalogue as the crawl sees it, each step going to the real store unless the test overrides it.
pub trait CatalogueTwist: RealStore {
    fn storage_config(
        &self,
        id: StorageConfigId,
    ) -> impl Future<Output = Result<Option<StorageConfig>, CatalogueError>> + Send {
        self.store().storage_config(id)
    }

    fn overlapping_roots(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<StorageConfig>, CatalogueError>> + Send {
        self.store().overlapping_roots(config)
    }

    fn record_root_identity(
        &self,
        fence: Fence,
        config: StorageConfigId,
        is_mount_point: bool,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().record_root_identity(fence, config, is_mount_point)
    }

    fn known_files(
        &self,
        config: StorageConfigId,
        folder: &[u8],
        after: Option<&KnownFile>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<KnownFile>, CatalogueError>> + Send {
        self.store().known_files(config, folder, after, limit)
    }

    fn extra_paths_of(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<KnownFile>, CatalogueError>> + Send {
        self.store().extra_paths_of(config, assets)
    }

    fn active_assets(&self, config: StorageConfigId) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.store().active_assets(config)
    }

    fn find_by_hash(
        &self,
        config: StorageConfigId,
        hash: &ContentHash,
    ) -> impl Future<Output = Result<Vec<HashMatch>, CatalogueError>> + Send {
        self.store().find_by_hash(config, hash)
    }

    fn relocate(
        &self,
        fence: Fence,
        asset: AssetId,
        facts: &FileFacts,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().relocate(fence, asset, facts)
    }

    fn redate(
        &self,
        fence: Fence,
        asset: AssetId,
        capture: &CaptureTime,
        sidecar: Option<&Sidecar>,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().redate(fence, asset, capture, sidecar)
    }

    fn record_extra_path(
        &self,
        fence: Fence,
        config: StorageConfigId,
        asset: AssetId,
        facts: &FileFacts,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().record_extra_path(fence, config, asset, facts)
    }

    fn put_proxies(
        &self,
        fence: Fence,
        asset: AssetId,
        proxies: &[NewProxy],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().put_proxies(fence, asset, proxies)
    }

    fn ingest(
        &self,
        fence: Fence,
        asset: &NewAsset,
    ) -> impl Future<Output = Result<IngestOutcome, CatalogueError>> + Send {
        self.store().ingest(fence, asset)
    }

    fn soft_delete(
        &self,
        fence: Fence,
        config: StorageConfigId,
        assets: &[AssetId],
        extra_paths: &[Vec<u8>],
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.store().soft_delete(fence, config, assets, extra_paths)
    }

    fn pairing_candidates(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<PairingCandidate>, CatalogueError>> + Send {
        self.store().pairing_candidates(config)
    }

    fn pair(
        &self,
        fence: Fence,
        still: AssetId,
        motion: AssetId,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().pair(fence, still, motion)
    }

    fn enqueue_follow_up(
        &self,
        fence: Fence,
        item: &NewWorkItem,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.store().enqueue_follow_up(fence, item)
    }
}

/// A twist, as the port it twists.
pub struct Twisted<T>(pub T);

impl<T: RealStore> DatabaseClock for Twisted<T> {
    fn db_now(&self) -> impl Future<Output = Result<DateTime<Utc>, CatalogueError>> + Send {
        self.0.db_now()
    }
}

impl<T: MaintenanceTwist> MaintenanceStore for Twisted<T> {
    fn burst_frames(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<BurstFrame>, CatalogueError>> + Send {
        self.0.burst_frames(config)
    }

    fn replace_bursts(
        &self,
        fence: Fence,
        config: StorageConfigId,
        groups: &[BurstGroup],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.replace_bursts(fence, config, groups)
    }

    fn purge_candidates(
        &self,
        config: StorageConfigId,
        before: DateTime<Utc>,
        after: Option<&PurgeCandidate>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<PurgeCandidate>, CatalogueError>> + Send {
        self.0.purge_candidates(config, before, after, limit)
    }

    fn purge_rows(
        &self,
        fence: Fence,
        config: StorageConfigId,
        assets: &[AssetId],
        before: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<AssetId>, CatalogueError>> + Send {
        self.0.purge_rows(fence, config, assets, before)
    }

    fn proxies_of(
        &self,
        assets: &[AssetId],
        types: Option<&[ProxyType]>,
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send {
        self.0.proxies_of(assets, types)
    }

    fn assets_of_other_configs(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<AssetId>, CatalogueError>> + Send {
        self.0.assets_of_other_configs(config, assets)
    }

    fn storage_config_ids(&self) -> impl Future<Output = Result<Vec<StorageConfigId>, CatalogueError>> + Send {
        self.0.storage_config_ids()
    }

    fn delete_proxy_rows(
        &self,
        fence: Fence,
        proxies: &[StoredProxy],
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.0.delete_proxy_rows(fence, proxies)
    }

    fn referenced_proxy_paths(
        &self,
        paths: &[String],
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send {
        self.0.referenced_proxy_paths(paths)
    }

    fn configs_to_check(
        &self,
        served: ServedConfigs,
    ) -> impl Future<Output = Result<Vec<StorageConfigId>, CatalogueError>> + Send {
        self.0.configs_to_check(served)
    }

    fn proxy_folders(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send {
        self.0.proxy_folders(config)
    }

    fn referenced_proxy_paths_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send {
        self.0.referenced_proxy_paths_in(config, prefix)
    }

    fn proxies_to_check_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send {
        self.0.proxies_to_check_in(config, prefix)
    }

    fn proxies_to_check_of(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send {
        self.0.proxies_to_check_of(config, assets)
    }

    fn enqueue_follow_ups(
        &self,
        fence: Fence,
        items: &[NewWorkItem],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.enqueue_follow_ups(fence, items)
    }

    fn delete_refresh_tokens(
        &self,
        fence: Fence,
        expired_before: DateTime<Utc>,
        revoked_before: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.0.delete_refresh_tokens(fence, expired_before, revoked_before, limit)
    }

    fn delete_finished_work(
        &self,
        fence: Fence,
        done_before: DateTime<Utc>,
        failed_before: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.0.delete_finished_work(fence, done_before, failed_before, limit)
    }
}

impl<T: CatalogueTwist> CatalogueStore for Twisted<T> {
    fn storage_config(
        &self,
        id: StorageConfigId,
    ) -> impl Future<Output = Result<Option<StorageConfig>, CatalogueError>> + Send {
        self.0.storage_config(id)
    }

    fn overlapping_roots(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<StorageConfig>, CatalogueError>> + Send {
        self.0.overlapping_roots(config)
    }

    fn record_root_identity(
        &self,
        fence: Fence,
        config: StorageConfigId,
        is_mount_point: bool,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.record_root_identity(fence, config, is_mount_point)
    }

    fn known_files(
        &self,
        config: StorageConfigId,
        folder: &[u8],
        after: Option<&KnownFile>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<KnownFile>, CatalogueError>> + Send {
        self.0.known_files(config, folder, after, limit)
    }

    fn extra_paths_of(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<KnownFile>, CatalogueError>> + Send {
        self.0.extra_paths_of(config, assets)
    }

    fn active_assets(&self, config: StorageConfigId) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.0.active_assets(config)
    }

    fn find_by_hash(
        &self,
        config: StorageConfigId,
        hash: &ContentHash,
    ) -> impl Future<Output = Result<Vec<HashMatch>, CatalogueError>> + Send {
        self.0.find_by_hash(config, hash)
    }

    fn relocate(
        &self,
        fence: Fence,
        asset: AssetId,
        facts: &FileFacts,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.relocate(fence, asset, facts)
    }

    fn redate(
        &self,
        fence: Fence,
        asset: AssetId,
        capture: &CaptureTime,
        sidecar: Option<&Sidecar>,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.redate(fence, asset, capture, sidecar)
    }

    fn record_extra_path(
        &self,
        fence: Fence,
        config: StorageConfigId,
        asset: AssetId,
        facts: &FileFacts,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.record_extra_path(fence, config, asset, facts)
    }

    fn put_proxies(
        &self,
        fence: Fence,
        asset: AssetId,
        proxies: &[NewProxy],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.put_proxies(fence, asset, proxies)
    }

    fn ingest(
        &self,
        fence: Fence,
        asset: &NewAsset,
    ) -> impl Future<Output = Result<IngestOutcome, CatalogueError>> + Send {
        self.0.ingest(fence, asset)
    }

    fn soft_delete(
        &self,
        fence: Fence,
        config: StorageConfigId,
        assets: &[AssetId],
        extra_paths: &[Vec<u8>],
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send {
        self.0.soft_delete(fence, config, assets, extra_paths)
    }

    fn pairing_candidates(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<PairingCandidate>, CatalogueError>> + Send {
        self.0.pairing_candidates(config)
    }

    fn pair(
        &self,
        fence: Fence,
        still: AssetId,
        motion: AssetId,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.pair(fence, still, motion)
    }

    fn enqueue_follow_up(
        &self,
        fence: Fence,
        item: &NewWorkItem,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send {
        self.0.enqueue_follow_up(fence, item)
    }
}

/// A step run once a crawl's walk has listed (and closed) a folder, from the crawl's first load of known files:
/// the walk hands over no file before the first page of known files has come, so the step lands between the
/// folder's listing and the reading of its files.
pub struct AfterListing {
    inotify: OwnedFd,
    step: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl AfterListing {
    /// `step` runs once the walk has listed `folder`.
    pub fn new(folder: &Path, step: impl FnOnce() + Send + 'static) -> Self {
        let inotify = inotify::init(inotify::CreateFlags::CLOEXEC).unwrap();
        inotify::add_watch(&inotify, folder, inotify::WatchFlags::CLOSE_NOWRITE).unwrap();
        Self { inotify, step: Mutex::new(Some(Box::new(step))) }
    }

    /// Waits until the walk has listed the folder, then runs the step; the first time only.
    pub async fn wait_and_run(&self) {
        let Some(step) = self.step.lock().unwrap().take() else { return };
        let inotify = self.inotify.try_clone().unwrap();
        tokio::task::spawn_blocking(move || {
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut events = inotify::Reader::new(&inotify, &mut buf);
            // The folder's own close (no name): the walk has read every entry of it.
            while events.next().unwrap().file_name().is_some_and(|n| !n.is_empty()) {}
            step();
        })
        .await
        .unwrap();
    }
}
