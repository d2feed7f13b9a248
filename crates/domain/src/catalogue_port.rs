use std::future::Future;

use chrono::{DateTime, Utc};

use crate::catalogue::{AssetMetadata, CaptureTime, ContentHash, MediaType, ProxyType, StorageConfig};
use crate::cause::Cause;
use crate::ids::{AssetId, StorageConfigId};
use crate::queue::Fence;
use crate::work::NewWorkItem;

/// Why a catalogue operation could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogueError {
    /// The database could not be reached or did not answer in time. MUST be returned for connection, pool and
    /// timeout failures.
    #[error("the catalogue database is unavailable: {0}. Check that PostgreSQL is running and reachable")]
    Unavailable(#[source] Cause),
    /// The attempt no longer holds its work item (its lease was recovered, or another attempt claimed it):
    /// nothing of the write was committed. MUST be returned when a fenced write finds the fence stale.
    #[error("this attempt no longer holds its work item (another attempt took over); nothing was written")]
    Lost,
    /// The database refused the values of this write: a check of the schema, or a value larger than its index
    /// holds (a path longer than [`LONGEST_PATH`] whose bytes do not compress). The same write would be refused
    /// again; nothing of it was committed. A store MUST return it only when the values are what was refused, told
    /// by the error's kind and the constraint it names, never by the server's words.
    #[error("the catalogue refused the values of this write: {0}")]
    Refused(#[source] Cause),
    /// Anything else.
    #[error("the catalogue failed unexpectedly: {0}")]
    Unexpected(#[source] Cause),
}

/// The earliest time the catalogue holds: PostgreSQL's `timestamptz` begins on 24 November 4714 BC at midnight UTC
/// (its Julian day 0). chrono reaches further back, and so do some file systems' mtimes: a time before this is
/// none of a file's (the walk takes such an mtime as unknown).
pub const EARLIEST_TIME: DateTime<Utc> = match DateTime::from_timestamp_micros(-210_866_803_200_000_000) {
    Some(t) => t,
    None => panic!("within chrono's range"),
};

/// The longest path beneath a config's root, in bytes, that the catalogue holds. PostgreSQL indexes a file's path
/// with its config's id (`ix_media_assets_active_path`, `asset_extra_paths_pkey`) in B-tree entries of at most
/// 2,704 bytes: 8 for the entry's header, 16 for the id and 4 for the path's length leave this many for the path.
/// A longer path is held only when its bytes compress (names that repeat themselves); any other is refused by the
/// server. A store MUST hold every path up to this length, and answer [`CatalogueError::Refused`] for a longer one it
/// cannot hold; the crawl then records that file as failed, saying so, and goes on with the others.
pub const LONGEST_PATH: usize = 2676;

/// A file as the file system shows it, relative to its config's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    /// The path relative to the root, as the exact bytes the file system gave.
    pub file_path: Vec<u8>,
    /// The path decoded lossily, for people.
    pub display_path: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time.
    pub mtime: DateTime<Utc>,
}

/// An XMP sidecar next to an original, as the file system shows it: an asset remembers the one its capture
/// time was read with, so that a sidecar that appears, changes or vanishes has the date read again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sidecar {
    /// The sidecar's path relative to the root, as the exact bytes the file system gave.
    pub path: Vec<u8>,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, truncated to microseconds (what the database keeps).
    pub mtime: DateTime<Utc>,
}

/// A path the catalogue already knows for a config: an active asset's own path, or an extra path of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownFile {
    /// The asset.
    pub asset_id: AssetId,
    /// The path, size and mtime as last hashed.
    pub facts: FileFacts,
    /// True for an extra path (a copy), false for the asset's own path.
    pub extra: bool,
    /// The sidecar the asset's capture time was read with (always `None` for an extra path).
    pub sidecar: Option<Sidecar>,
    /// Whether the asset has all the proxies of its media type (a `proxy_deletion` removes some, so that the
    /// next crawl makes them again; the proxy sweep asks for one when it finds a proxy file gone or of another
    /// size).
    pub proxies_complete: bool,
    /// Whether the asset's capture date was read with the rules as they are (always true for an extra path): false
    /// when a rule it was read with has since been corrected, so that the next crawl reads the date again.
    pub date_current: bool,
}

/// An asset of the config with a given content hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashMatch {
    /// The asset.
    pub asset_id: AssetId,
    /// Its path.
    pub file_path: Vec<u8>,
    /// Whether it is soft-deleted.
    pub soft_deleted: bool,
}

/// A proxy row to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewProxy {
    /// Its type.
    pub proxy_type: ProxyType,
    /// File path relative to the proxy root (file proxies).
    pub relative_path: Option<String>,
    /// Inline value (BlurHash).
    pub inline_value: Option<String>,
    /// File size.
    pub size_bytes: u64,
}

/// New content to catalogue: asset, metadata and proxies, stored in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAsset {
    /// The config.
    pub storage_config_id: StorageConfigId,
    /// The file.
    pub facts: FileFacts,
    /// Its content hash.
    pub content_hash: ContentHash,
    /// Still or video.
    pub media_type: MediaType,
    /// When it was taken.
    pub capture: CaptureTime,
    /// What was read from it.
    pub metadata: AssetMetadata,
    /// Its proxies.
    pub proxies: Vec<NewProxy>,
    /// An active asset at the same path whose content changed: it loses the path in the same transaction, as
    /// in every write that gives a path (see [`CatalogueStore::relocate`]).
    pub replaces: Option<AssetId>,
    /// The XMP sidecar present when the capture time was read.
    pub sidecar: Option<Sidecar>,
}

/// How an ingest ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestOutcome {
    /// Stored as a new asset.
    Ingested(AssetId),
    /// Another active asset of the config already has this content (found at the same moment by a parallel
    /// step); nothing was stored and the caller records the path as an extra path of it.
    ContentExists(AssetId),
}

/// An active asset that may be half of a Live Photo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingCandidate {
    /// The asset.
    pub asset_id: AssetId,
    /// Its path.
    pub file_path: Vec<u8>,
    /// Still or video.
    pub media_type: MediaType,
    /// When it was taken.
    pub captured_at: DateTime<Utc>,
    /// Apple's content identifier, when known.
    pub content_id: Option<String>,
}

/// A file that failed for its content (damaged, not what its name says, over the pixel limit), remembered so that
/// later crawls do not read it again while it is the same file read by the same rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedFile {
    /// Its path, relative to the root.
    pub file_path: Vec<u8>,
    /// Its size when it failed.
    pub size: u64,
    /// Its mtime when it failed.
    pub mtime: DateTime<Utc>,
    /// Its inode number and when the inode last changed (`st_ctime`) when it failed: a file written over (even
    /// with its size and mtime put back) or another file moved to its path has other ones.
    pub inode: (u64, DateTime<Utc>),
    /// Why it failed.
    pub reason: String,
    /// The rules it was read by (the Worker's version, the settings that decide a file's fate): read by other
    /// rules, it is read again.
    pub read_by: String,
    /// When it failed.
    pub failed_at: DateTime<Utc>,
}

/// The catalogue as the crawl sees it.
///
/// Every write takes the attempt's [`Fence`] and is fenced (ADR 0008 rule 5, docs/safety.md invariant 1): it runs in a
/// transaction that first locks the work item's row (`FOR KEY SHARE`) and checks `(id, attempt, running)`, and
/// commits nothing when the check fails, answering [`CatalogueError::Lost`]. So lease recovery and a newer
/// claim can never interleave with a stale write, and a statement of an old attempt that reaches the server
/// late changes nothing.
pub trait CatalogueStore: Send + Sync {
    /// One storage config.
    fn storage_config(
        &self,
        id: StorageConfigId,
    ) -> impl Future<Output = Result<Option<StorageConfig>, CatalogueError>> + Send;

    /// Other storage configs whose roots are the same tree as this one's or nest with it (possible only in a
    /// catalogue older than the canonical-root rule): a crawl refuses to run while there are any.
    fn overlapping_roots(
        &self,
        config: StorageConfigId,
    ) -> impl Future<Output = Result<Vec<StorageConfig>, CatalogueError>> + Send;

    /// Whether the catalogue holds a proxy file of an active asset of the config (one beneath `<proxy
    /// root>/<config id>/`): a crawl then expects that folder under the proxy root, and does not write beside a proxy
    /// volume that is not mounted.
    fn has_proxy_files(&self, config: StorageConfigId) -> impl Future<Output = Result<bool, CatalogueError>> + Send;

    /// Records whether the config's root is a mount point, and which folders beneath it are (after a walk of the
    /// whole root), so a later crawl can tell a share or a disk that is no longer mounted.
    fn record_root_identity(
        &self,
        fence: Fence,
        config: StorageConfigId,
        is_mount_point: bool,
        mounts_below: &[Vec<u8>],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Up to `limit` of the paths the catalogue knows for the config's active assets (own and extra paths), in
    /// the byte order of their paths (an own path before an extra path at the same bytes), after `after` when
    /// one is given: the crawl reads them page by page beside a walk in the same order, so a library of any
    /// size is compared in bounded memory. Only paths inside `folder` (relative to the root, everything below
    /// it; empty: the whole root), which a crawl of changed folders reads. Their `display_path` is left empty:
    /// the crawl needs only the exact bytes.
    fn known_files(
        &self,
        config: StorageConfigId,
        folder: &[u8],
        after: Option<&KnownFile>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<KnownFile>, CatalogueError>> + Send;

    /// The extra paths (copies) of these assets of the config, wherever they are beneath the root, in the byte
    /// order of their paths, as [`CatalogueStore::known_files`] hands them out: a crawl of some folders looks
    /// at them before an asset whose files there vanished is soft-deleted. The caller bounds `assets`.
    fn extra_paths_of(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> impl Future<Output = Result<Vec<KnownFile>, CatalogueError>> + Send;

    /// How many active assets the config has: what a crawl of some folders weighs what vanished in them
    /// against.
    fn active_assets(&self, config: StorageConfigId) -> impl Future<Output = Result<u64, CatalogueError>> + Send;

    /// Assets of the config with this content, active first.
    fn find_by_hash(
        &self,
        config: StorageConfigId,
        hash: &ContentHash,
    ) -> impl Future<Output = Result<Vec<HashMatch>, CatalogueError>> + Send;

    /// Points an asset at a file (a move, a touched file, or a revival) and makes it active.
    ///
    /// One rule for every write that gives an asset a path (this one, [`CatalogueStore::record_extra_path`]
    /// and an ingest's [`NewAsset::replaces`]): another active asset whose own path it was loses it in the same
    /// transaction, moving to its first extra path in byte order (one that is not this path), or soft-deleted
    /// when it has none. These writes of one config run one after the other (a lock of the config's paths), so
    /// files written side by side, each placed on what the catalogue held before, end as one after the other
    /// would (a swap of two files leaves each asset at the path holding its content).
    fn relocate(
        &self,
        fence: Fence,
        asset: AssetId,
        facts: &FileFacts,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Sets an asset's capture time (and its "on this day" index) read again because its sidecar appeared,
    /// changed or vanished, or it moved, and remembers the sidecar it was read with. `None` keeps the date it has
    /// (a moved asset whose only date would be the file time its copy was given) and remembers the sidecar.
    fn redate(
        &self,
        fence: Fence,
        asset: AssetId,
        capture: Option<&CaptureTime>,
        sidecar: Option<&Sidecar>,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Records (or refreshes) an extra path of an active asset. An active asset whose own path this was (its
    /// content was overwritten with this asset's) loses it in the same transaction, by the rule of
    /// [`CatalogueStore::relocate`]. An asset that is no longer active when this is written (it lost its own
    /// path to a write of a file beside this one since this file was placed) is revived here instead: its
    /// content is here.
    fn record_extra_path(
        &self,
        fence: Fence,
        config: StorageConfigId,
        asset: AssetId,
        facts: &FileFacts,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Stores (or replaces) proxy rows of an existing asset, e.g. proxies made again after a deletion, with the
    /// `metadata` read again from its file as they were made (the rules that read it may have been corrected since:
    /// a HEIF's orientation, migration 000039).
    fn put_proxies(
        &self,
        fence: Fence,
        asset: AssetId,
        proxies: &[NewProxy],
        metadata: &AssetMetadata,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Stores a new asset with its metadata and proxies in one transaction.
    fn ingest(
        &self,
        fence: Fence,
        asset: &NewAsset,
    ) -> impl Future<Output = Result<IngestOutcome, CatalogueError>> + Send;

    /// Soft-deletes these active assets of the config and drops these extra paths (what a complete walk did
    /// not find). Returns how many assets were soft-deleted.
    fn soft_delete(
        &self,
        fence: Fence,
        config: StorageConfigId,
        assets: &[AssetId],
        extra_paths: &[Vec<u8>],
    ) -> impl Future<Output = Result<u64, CatalogueError>> + Send;

    /// Active assets of the config that are not paired with an active asset paired with them (never paired, or
    /// whose other half was soft-deleted: a Live Photo's still written over in place), in the folders `under`
    /// (each with everything below it; paths relative to the root, without a trailing `/`), or in the whole
    /// config when `None`.
    fn pairing_candidates(
        &self,
        config: StorageConfigId,
        under: Option<&[Vec<u8>]>,
    ) -> impl Future<Output = Result<Vec<PairingCandidate>, CatalogueError>> + Send;

    /// The files of the config remembered as failed for their content, in the folders `under` (as for
    /// [`CatalogueStore::pairing_candidates`]), or in the whole config when `None`.
    fn failed_files(
        &self,
        config: StorageConfigId,
        under: Option<&[Vec<u8>]>,
    ) -> impl Future<Output = Result<Vec<FailedFile>, CatalogueError>> + Send;

    /// Remembers a file of the config as failed for its content (replacing what was remembered at its path).
    /// `failed_at` is the database's time of the write, whatever `file` says.
    fn remember_failed_file(
        &self,
        fence: Fence,
        config: StorageConfigId,
        file: &FailedFile,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Forgets the failures remembered at `paths` of the config (files read well since, or gone).
    fn forget_failed_files(
        &self,
        fence: Fence,
        config: StorageConfigId,
        paths: &[Vec<u8>],
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Pairs a Live Photo's still and motion halves.
    fn pair(
        &self,
        fence: Fence,
        still: AssetId,
        motion: AssetId,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;

    /// Enqueues follow-up work (burst detection after a crawl), fenced like every other write: an item whose
    /// key is already queued is left as it is.
    fn enqueue_follow_up(
        &self,
        fence: Fence,
        item: &NewWorkItem,
    ) -> impl Future<Output = Result<(), CatalogueError>> + Send;
}

#[cfg(test)]
mod tests {
    /// docs/media.md gives the longest path as it is, in the arithmetic that makes it.
    #[test]
    fn the_docs_give_the_longest_path_as_it_is() {
        let n = super::LONGEST_PATH;
        let written = format!("{},{:03}", n / 1000, n % 1000);
        let docs = include_str!("../../../docs/media.md").split_whitespace().collect::<Vec<_>>().join(" ");
        let said = format!("which leaves {written} bytes for the path (`LONGEST_PATH`)");
        assert!(docs.contains(&said), "docs/media.md should say: {said}");
        assert_eq!(2704 - 8 - 16 - 4, n, "an entry of 2,704 bytes less its header, the config's id and the length");
    }
}
