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
mod cause;
mod ids;
mod maintenance_port;
mod progress;
mod queue;
mod results;
mod retry;
mod roots;
mod watch_port;
mod work;

// The web backend's surface (ARCHITECTURE, "What the web backend may use"): enqueueing work with typed
// arguments, reading items, their progress and results, the catalogue's types and the rules for roots. Kept
// stable and documented; `crates/store-pg/examples/backend.rs` uses nothing else.
pub use args::{
    BurstDetectionArgs, ClosedFile, CrawlArgs, ProxyDeletionArgs, ProxySweepArgs, PurgeArgs, TokenCleanupArgs,
    WorkArgs, WorkItemRetentionArgs,
};
pub use catalogue::{
    AssetMetadata, CaptureSource, CaptureTime, ContentHash, MediaType, ProxyType, StorageConfig, User, Zone,
};
pub use cause::Cause;
pub use ids::{AssetId, BurstId, HolderId, StorageConfigId, UserId, WorkItemId};
pub use progress::ProgressEstimate;
pub use queue::{CancelOutcome, Enqueued, QueueError, WorkQueue};
pub use results::{
    BurstReport, CrawlCounts, CrawlReport, DeletionReport, MOST_LISTED, PathProblem, ProxySweepReport, PurgeReport,
    SweptProxyRoot, list_one,
};
pub use roots::{check_canonical_root, roots_overlap};
pub use work::{DedupKey, DomainError, NewWorkItem, Scope, ScopeRule, Status, WorkItem, WorkKind, WorkerId};

/// The Worker's own ports and the types they carry: what the executor, the handlers and the PostgreSQL adapter
/// agree on (claims and fences, heartbeats and outcomes, the crawl's and the maintenance handlers' catalogue
/// statements, the proxy layout). Not a surface for the web backend: these change with the Worker, in any
/// release. ([`WorkQueue`]'s claim and outcome methods take and answer these types; the web backend calls only
/// its enqueue, cancel and read methods.)
pub mod ports {
    pub use crate::catalogue_port::{
        CatalogueError, CatalogueStore, EARLIEST_TIME, FailedFile, FileFacts, HashMatch, IngestOutcome, KnownFile,
        LONGEST_PATH, NewAsset, NewProxy, PairingCandidate, Sidecar,
    };
    pub use crate::maintenance_port::{
        BurstFrame, BurstGroup, DatabaseClock, FailingCrawl, MaintenanceStore, PurgeCandidate, QueueMaintenance,
        StoredProxy,
    };
    pub use crate::queue::{
        ClaimRequest, ClaimedItem, Completed, CompletedMany, Completion, FailOutcome, Failure, Fence, Heartbeat,
        Recovered, ServedConfigs, WriteOutcome,
    };
    pub use crate::retry::RetryPolicy;
    pub use crate::roots::{
        HEIC_SCRATCH_PREFIX, PROXY_SCRATCH_FOLDER, ProxyPath, is_proxy_file_name, is_temporary_file_name,
    };
    pub use crate::watch_port::{
        HeldWatch, WatchChoice, WatchHolder, WatchMode, WatchReport, WatchState, WatchStore, WatchTarget,
    };
    pub use crate::work::{Attempt, ClaimToken, LeaseDuration};
}
