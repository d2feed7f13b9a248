//! One delegating wrapper per port, for the tests that put one twist at one step of a handler: a test's type
//! implements [`RealStore`] (the real store every step goes to) and overrides only its twisted step of
//! [`MaintenanceTwist`] or [`CatalogueTwist`]; [`Twisted`] makes it the port. Every other step goes to the real
//! store unchanged, so a test names nothing but its twist.
//!
//! A step added to a port is added here once: a line in its `twist!` list, which makes the twist trait's step
//! (going to the real store) and `Twisted`'s (going to the twist).
//! [`AfterListing`] is the twist the crawl tests share: a step run right after the walk listed a folder.

use std::future::Future;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Mutex;

use almanac_domain::{
    AssetId, AssetMetadata, CaptureTime, ContentHash, NewWorkItem, ProxyType, StorageConfig, StorageConfigId,
    ports::{
        BurstFrame, BurstGroup, CatalogueError, CatalogueStore, DatabaseClock, FailedFile, FailingCrawl, Fence,
        FileFacts, HashMatch, IngestOutcome, KnownFile, MaintenanceStore, NewAsset, NewProxy, PairingCandidate,
        PurgeCandidate, ServedConfigs, Sidecar, StoredProxy,
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

/// A twist trait over a port, and [`Twisted`]'s implementation of the port through it, from one list of the
/// port's steps: each step of the trait goes to the real store unless the test overrides it, and each step of
/// the port goes to the trait.
macro_rules! twist {
    ($(#[$doc:meta])* $twist:ident => $port:ident {
        $(fn $step:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty;)*
    }) => {
        $(#[$doc])*
        pub trait $twist: RealStore {
            $(
                fn $step(&self, $($arg: $ty),*) -> impl Future<Output = Result<$out, CatalogueError>> + Send {
                    self.store().$step($($arg),*)
                }
            )*
        }

        impl<T: $twist> $port for Twisted<T> {
            $(
                fn $step(&self, $($arg: $ty),*) -> impl Future<Output = Result<$out, CatalogueError>> + Send {
                    $twist::$step(&self.0, $($arg),*)
                }
            )*
        }
    };
}

twist! {
    /// The maintenance statements, each going to the real store unless the test overrides it.
    MaintenanceTwist => MaintenanceStore {
        fn burst_frames(config: StorageConfigId) -> Vec<BurstFrame>;
        fn replace_bursts(fence: Fence, config: StorageConfigId, groups: &[BurstGroup]) -> ();
        fn purge_candidates(
            config: StorageConfigId,
            before: DateTime<Utc>,
            after: Option<&PurgeCandidate>,
            limit: i64,
        ) -> Vec<PurgeCandidate>;
        fn failing_crawl(config: StorageConfigId) -> Option<FailingCrawl>;
        fn purge_rows(
            fence: Fence,
            config: StorageConfigId,
            assets: &[AssetId],
            before: DateTime<Utc>,
        ) -> Vec<AssetId>;
        fn proxies_of(assets: &[AssetId], types: Option<&[ProxyType]>) -> Vec<StoredProxy>;
        fn assets_of_other_configs(config: StorageConfigId, assets: &[AssetId]) -> Vec<AssetId>;
        fn storage_config_ids() -> Vec<StorageConfigId>;
        fn still_holds(fence: Fence) -> ();
        fn proxies_going(fence: Fence, asset: AssetId) -> ();
        fn delete_proxy_rows(fence: Fence, proxies: &[StoredProxy]) -> u64;
        fn referenced_proxy_paths(paths: &[String]) -> Vec<String>;
        fn configs_to_check(served: ServedConfigs) -> Vec<StorageConfigId>;
        fn proxy_folders(config: StorageConfigId) -> Vec<String>;
        fn referenced_proxy_paths_in(config: StorageConfigId, prefix: &str) -> Vec<String>;
        fn proxies_to_check_in(config: StorageConfigId, prefix: &str) -> Vec<StoredProxy>;
        fn proxies_to_check_of(config: StorageConfigId, assets: &[AssetId]) -> Vec<StoredProxy>;
        fn enqueue_follow_ups(fence: Fence, items: &[NewWorkItem]) -> ();
        fn delete_refresh_tokens(
            fence: Fence,
            expired_before: DateTime<Utc>,
            revoked_before: DateTime<Utc>,
            limit: i64,
        ) -> u64;
        fn delete_finished_work(
            fence: Fence,
            done_before: DateTime<Utc>,
            failed_before: DateTime<Utc>,
            limit: i64,
        ) -> u64;
    }
}

twist! {
    /// The catalogue as the crawl sees it, each step going to the real store unless the test overrides it.
    CatalogueTwist => CatalogueStore {
        fn storage_config(id: StorageConfigId) -> Option<StorageConfig>;
        fn overlapping_roots(config: StorageConfigId) -> Vec<StorageConfig>;
        fn has_proxy_files(config: StorageConfigId) -> bool;
        fn record_root_identity(fence: Fence, config: StorageConfigId, is_mount_point: bool, mounts_below: &[Vec<u8>]) -> ();
        fn known_files(
            config: StorageConfigId,
            folder: &[u8],
            after: Option<&KnownFile>,
            limit: i64,
        ) -> Vec<KnownFile>;
        fn extra_paths_of(config: StorageConfigId, assets: &[AssetId]) -> Vec<KnownFile>;
        fn active_assets(config: StorageConfigId) -> u64;
        fn find_by_hash(config: StorageConfigId, hash: &ContentHash) -> Vec<HashMatch>;
        fn relocate(fence: Fence, asset: AssetId, facts: &FileFacts) -> ();
        fn redate(fence: Fence, asset: AssetId, capture: Option<&CaptureTime>, sidecar: Option<&Sidecar>) -> ();
        fn record_extra_path(fence: Fence, config: StorageConfigId, asset: AssetId, facts: &FileFacts) -> ();
        fn put_proxies(fence: Fence, asset: AssetId, proxies: &[NewProxy], metadata: &AssetMetadata) -> ();
        fn ingest(fence: Fence, asset: &NewAsset) -> IngestOutcome;
        fn soft_delete(fence: Fence, config: StorageConfigId, assets: &[AssetId], extra_paths: &[Vec<u8>]) -> u64;
        fn pairing_candidates(config: StorageConfigId, under: Option<&[Vec<u8>]>) -> Vec<PairingCandidate>;
        fn failed_files(config: StorageConfigId, under: Option<&[Vec<u8>]>) -> Vec<FailedFile>;
        fn remember_failed_file(fence: Fence, config: StorageConfigId, file: &FailedFile) -> ();
        fn forget_failed_files(fence: Fence, config: StorageConfigId, paths: &[Vec<u8>]) -> ();
        fn pair(fence: Fence, still: AssetId, motion: AssetId) -> ();
        fn enqueue_follow_up(fence: Fence, item: &NewWorkItem) -> ();
    }
}

/// A twist, as the port it twists.
pub struct Twisted<T>(pub T);

impl<T: RealStore> DatabaseClock for Twisted<T> {
    fn db_now(&self) -> impl Future<Output = Result<DateTime<Utc>, CatalogueError>> + Send {
        self.0.db_now()
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
