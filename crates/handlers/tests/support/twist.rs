//! One delegating wrapper per port, for the tests that put one twist at one step of a handler: a test's type
//! implements [`RealStore`] (the real store every step goes to) and overrides only its twisted step of
//! [`MaintenanceTwist`]; [`Twisted`] makes it the port. Every other step goes to the real store unchanged, so a
//! test names nothing but its twist. (The catalogue port's wrappers in file_safety.rs and settling.rs are to
//! move here the same way, as a `CatalogueTwist`.)
//!
//! A step added to a port is added here once: to its twist trait (going to the real store) and to `Twisted`.

use std::future::Future;

use almanac_domain::{
    AssetId, NewWorkItem, ProxyType, StorageConfigId,
    ports::{
        BurstFrame, BurstGroup, CatalogueError, DatabaseClock, Fence, MaintenanceStore, PurgeCandidate, ServedConfigs,
        StoredProxy,
    },
};
use almanac_store_pg::PgStore;
use chrono::{DateTime, Utc};

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
