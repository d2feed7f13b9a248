use std::future::Future;

use chrono::{DateTime, Utc};

use crate::catalogue::ProxyType;
use crate::catalogue_port::CatalogueError;
use crate::ids::{AssetId, StorageConfigId, WorkItemId};
use crate::queue::{Fence, QueueError};
use crate::work::NewWorkItem;

/// An active still considered for burst grouping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BurstFrame {
    /// The asset.
    pub asset_id: AssetId,
    /// Camera make, if known.
    pub camera_make: Option<String>,
    /// Camera model, if known.
    pub camera_model: Option<String>,
    /// When it was taken.
    pub captured_at: DateTime<Utc>,
    /// The camera's own burst identifier, if it wrote one.
    pub camera_burst_id: Option<String>,
    /// Its size in bytes (a tie-breaker for the primary frame).
    pub size: u64,
}

/// A burst as burst detection computed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BurstGroup {
    /// Stable id: the first frame's asset id, so a re-run gives the same id.
    pub id: AssetId,
    /// The frame shown for the burst.
    pub primary: AssetId,
    /// Every frame, in capture order.
    pub members: Vec<AssetId>,
    /// True when grouped by the camera's own burst id, false when by time gap.
    pub from_camera: bool,
    /// Camera make.
    pub camera_make: Option<String>,
    /// Camera model.
    pub camera_model: Option<String>,
    /// First frame's capture time.
    pub started_at: DateTime<Utc>,
    /// Last frame's capture time.
    pub ended_at: DateTime<Utc>,
}

/// A proxy of an asset, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProxy {
    /// The asset.
    pub asset_id: AssetId,
    /// Its type.
    pub proxy_type: ProxyType,
    /// The file, relative to the proxy root (none for a BlurHash).
    pub relative_path: Option<String>,
    /// The file's size in bytes when it was made (0 for a BlurHash): a file of another size is not whole.
    pub size_bytes: u64,
}

/// A soft-deleted asset due for purging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeCandidate {
    /// The asset.
    pub asset_id: AssetId,
    /// Its proxies.
    pub proxies: Vec<StoredProxy>,
    /// True when an active asset of the same config has the same content, so the proxy files are its too and
    /// must stay.
    pub content_still_active: bool,
    /// When it was soft-deleted: candidates come in (this, asset id) order.
    pub soft_deleted_at: DateTime<Utc>,
}

/// A crawl of a config that leaves the library's state unknown: it failed (or stalled) after the config's last
/// crawl of the whole root that succeeded. While there is one, the config's purge deletes nothing
/// ([`MaintenanceStore::failing_crawl`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingCrawl {
    /// The crawl.
    pub item: WorkItemId,
    /// Why its last attempt failed (`last_error`).
    pub error: String,
    /// Whether it is queued to be tried again (else it failed for good, or was cancelled).
    pub retrying: bool,
}

/// The statements of burst detection, purge, proxy deletion and sweep, token cleanup and retention. Their writes
/// take the attempt's [`Fence`] and are fenced as in [`crate::CatalogueStore`]. The scheduler's statements are
/// [`QueueMaintenance`].
pub trait MaintenanceStore: DatabaseClock {
    /// Active stills of the config, for burst grouping.
    fn burst_frames(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<BurstFrame>, CatalogueError>> + Send;

    /// Makes the config's bursts exactly `groups` (in one transaction): bursts not among them dissolve, their
    /// frames leave them.
    fn replace_bursts(
        &self,
        fence: Fence,
        config: StorageConfigId,
        groups: &[BurstGroup],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Up to `limit` soft-deleted assets of the config soft-deleted before `before`, with their proxies, in
    /// (soft-deleted time, asset id) order, after the candidate `after` when one is given (so assets that stay,
    /// their files undeletable, are passed over instead of read again).
    fn purge_candidates(
        &self,
        config: StorageConfigId,
        before: DateTime<Utc>,
        after: Option<&PurgeCandidate>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<PurgeCandidate>, CatalogueError>> + Send;

    /// The config's crawl that leaves its library's state unknown, if there is one: the latest crawl, of any
    /// scope, that failed or stalled since the config's last crawl of the whole root that succeeded, whether it is
    /// to be tried again, failed for good, cancelled or put back by the operator. Soft-deleted assets are then not
    /// known to be gone for good: a share that went away, or a disk that dropped out beneath the root, may bring
    /// their files back, and only a crawl that reads the library revives them. A crawl of some folders reads only
    /// those, so its success clears nothing.
    fn failing_crawl(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Option<FailingCrawl>, CatalogueError>> + Send;

    /// Deletes the rows (asset, metadata, proxies, extra paths) of those assets that are still soft-deleted
    /// since before `before`, re-checked in the same transaction; returns the ones deleted.
    fn purge_rows(
        &self,
        fence: Fence,
        config: StorageConfigId,
        assets: &[AssetId],
        before: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<AssetId>, CatalogueError>> + Send;

    /// The proxies of these assets (optionally only of these types).
    fn proxies_of(
        &self,
        assets: &[AssetId],
        types: Option<&[ProxyType]>,
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send;

    /// Those of `assets` that belong to a storage config other than `config` (a config-scoped item refuses
    /// them: it touches only its own config).
    fn assets_of_other_configs(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<AssetId>, CatalogueError>> + Send;

    /// Every storage config's id, active or not (the proxy sweep leaves alone folders of configs that do not
    /// exist).
    fn storage_config_ids(&self) -> impl Future<Output = Result<Vec<StorageConfigId>, CatalogueError>> + Send;

    /// Answers [`CatalogueError::Lost`] unless the attempt `fence` names still holds its item (a fenced transaction
    /// that writes nothing). Asked right before a file side effect no fenced write can carry, an unlink: an
    /// attempt whose host slept (suspended, or its VM paused) past its lease, the executor's clock stopped with it,
    /// would otherwise delete files a newer attempt of the config made meanwhile, before its next fenced write.
    fn still_holds(&self, fence: Fence) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Marks the asset `proxies_missing`, in a fenced write, before its proxy files are deleted: like
    /// [`Self::still_holds`], the attempt must still hold its item; and a purge stopped after the files went but
    /// before the rows did (an outage, a shutdown) leaves an asset whose next crawl makes its proxies again,
    /// should its file come back and revive it, instead of rows naming files that are gone.
    fn proxies_going(&self, fence: Fence, asset: AssetId) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Deletes these proxy rows.
    fn delete_proxy_rows(
        &self,
        fence: Fence,
        proxies: &[StoredProxy],
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send;

    /// Which of these paths (relative to the proxy root) a proxy row still references.
    fn referenced_proxy_paths(
        &self,
        paths: &[String],
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send;

    /// The active storage configs whose proxies the sweep checks: those a Worker serving `served` crawls (with a
    /// proxy root per host, only this host's configs have their files here).
    fn configs_to_check(
        &self,
        served: crate::ports::ServedConfigs,
    ) -> impl Future<Output = Result<Vec<StorageConfigId>, CatalogueError>> + Send;

    /// The `<2 hex>` folders of the config's proxy folder (`<config id>/<2 hex>/`) that a proxy row has a file
    /// in, sorted: with the folders found on disk, what the sweep walks one at a time.
    fn proxy_folders(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send;

    /// Every path a proxy row references in the folder `<config id>/<prefix>/` (whatever the asset: a file a
    /// row references is never an orphan).
    fn referenced_proxy_paths_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, CatalogueError>> + Send;

    /// The proxy files (rows with a path) of the config's active assets whose paths lie in the folder
    /// `<config id>/<prefix>/`: what must be whole there.
    fn proxies_to_check_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send;

    /// The proxy files (rows with a path) of those of `assets` that are active assets of the config, wherever
    /// their paths lie: read again to confirm a proxy found broken right before acting on it.
    fn proxies_to_check_of(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<StoredProxy>, CatalogueError>> + Send;

    /// Enqueues follow-up work (the sweep's repairs), fenced like every other write, in order, in one
    /// transaction: an item whose key is already queued is left as it is.
    fn enqueue_follow_ups(
        &self,
        fence: Fence,
        items: &[NewWorkItem],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Deletes up to `limit` refresh tokens expired before `expired_before` or revoked before `revoked_before`.
    fn delete_refresh_tokens(
        &self,
        fence: Fence,
        expired_before: DateTime<Utc>,
        revoked_before: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send;

    /// Deletes up to `limit` finished work items (succeeded or cancelled before `done_before`, failed before
    /// `failed_before`) and schedule records older than `failed_before`. Kept however old: what
    /// [`Self::failing_crawl`] reads (each config's newest crawl of the whole root that succeeded, and a crawl with a
    /// failure on it that no such success answered).
    fn delete_finished_work(
        &self,
        fence: Fence,
        done_before: DateTime<Utc>,
        failed_before: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send;
}

/// The database's clock: every cut-off (purge, retention, token grace, the scheduler's periods) is computed from
/// it, never from a Worker's clock (ARCHITECTURE, "Time").
pub trait DatabaseClock: Send + Sync {
    /// The database's `now()`.
    fn db_now(&self) -> impl Future<Output = Result<DateTime<Utc>, CatalogueError>> + Send;
}

/// The scheduler's statements on the queue: which configs get periodic work, enqueuing each period's work once,
/// and cancelling what was queued for configs deactivated since. Unfenced: no attempt makes them.
pub trait QueueMaintenance: DatabaseClock {
    /// The active storage configs a Worker serves (all, or one user's).
    fn served_configs(
        &self,
        served: crate::ports::ServedConfigs,
    ) -> impl Future<Output = Result<Vec<StorageConfigId>, QueueError>> + Send;

    /// Enqueues each `(schedule_key, item)` unless its period (the key) already has one, all at once; answers
    /// the keys this call enqueued. Exactly one of any number of concurrent callers wins each period.
    fn enqueue_once(
        &self,
        due: &[(String, NewWorkItem)],
    ) -> impl Future<Output = Result<Vec<String>, QueueError>> + Send;

    /// Cancels queued items of inactive storage configs; returns how many.
    fn cancel_queued_of_inactive(&self) -> impl Future<Output = Result<u64, QueueError>> + Send;

    /// Quiet hours: moves the `run_after` of queued items the scheduler enqueued (their period's record names
    /// them), of `configs` and unscoped, to `until` where it is earlier, so none is claimed before; returns how
    /// many moved. An item an operator asked to run now is no longer the scheduler's, and stays due.
    fn defer_scheduled(
        &self,
        configs: &[StorageConfigId],
        until: DateTime<Utc>,
    ) -> impl Future<Output = Result<u64, QueueError>> + Send;
}
