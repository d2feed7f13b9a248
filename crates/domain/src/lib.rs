//! Almanac Worker's domain: the work queue's types and rules, the catalogue's types, and the ports the
//! adapters implement.
//!
//! **Architecture invariant:** this crate does no I/O. It depends on neither tokio nor diesel, opens no file,
//! and no decision in it reads a clock (a new id is a UUID v7, whose time part only orders ids: `ids.rs`). The
//! executor and the handlers depend on these ports; only the binary and the tests wire the PostgreSQL adapter
//! (`almanac-store-pg`) in.

mod args;
mod catalogue;
mod catalogue_port;
mod ids;
mod maintenance_port;
mod progress;
mod queue;
mod results;
mod retry;
mod roots;
mod work;

pub use args::{
    BurstDetectionArgs, CrawlArgs, ProxyDeletionArgs, ProxySweepArgs, PurgeArgs, TokenCleanupArgs, WorkArgs,
    WorkItemRetentionArgs,
};
pub use catalogue::{
    AssetMetadata, CaptureSource, CaptureTime, ContentHash, MediaType, ProxyType, StorageConfig, User,
};
pub use catalogue_port::{
    CatalogueError, CatalogueStore, FileFacts, HashMatch, IngestOutcome, KnownFile, KnownProxyFile, NewAsset, NewProxy,
    PairingCandidate, Sidecar,
};
pub use ids::{AssetId, BurstId, StorageConfigId, UserId, WorkItemId};
pub use maintenance_port::{
    BurstFrame, BurstGroup, DatabaseClock, MaintenanceStore, PurgeCandidate, QueueMaintenance, StoredProxy,
};
pub use progress::ProgressEstimate;
pub use queue::{
    CancelOutcome, ClaimRequest, ClaimedItem, Completed, CompletedMany, Completion, Enqueued, FailOutcome, Failure,
    Fence, Heartbeat, QueueError, Recovered, ServedConfigs, WorkQueue, WriteOutcome,
};
pub use results::{
    BurstReport, CrawlCounts, CrawlReport, DeletionReport, PathProblem, ProxySweepReport, PurgeReport, SweptProxyRoot,
};
pub use retry::RetryPolicy;
pub use roots::{
    HEIC_SCRATCH_PREFIX, ProxyPath, check_canonical_root, is_proxy_file_name, is_temporary_file_name, roots_overlap,
};
pub use work::{
    Attempt, DedupKey, DomainError, LeaseDuration, NewWorkItem, Scope, ScopeRule, Status, WorkItem, WorkKind, WorkerId,
};
