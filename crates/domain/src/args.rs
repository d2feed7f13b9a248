//! Typed arguments and results of work items, as they travel in `work_items.payload` and `.result` (JSON).
//!
//! Whoever enqueues work (the scheduler, the CLI, the operator's page, the web backend) builds these types
//! instead of JSON by hand, and the handlers read them back with [`WorkArgs::from_payload`], so both sides
//! agree on every name. An unknown field is refused: a misspelt confirmation must not be quietly ignored.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{AssetId, DomainError, NewWorkItem, ProxyType, Scope, WorkKind};

/// The arguments of one kind of work.
pub trait WorkArgs: Serialize + DeserializeOwned {
    /// The kind whose payload this is.
    const KIND: WorkKind;

    /// Reads a payload. An empty object (or `null`) is the kind's defaults when it has any.
    fn from_payload(payload: &serde_json::Value) -> Result<Self, DomainError> {
        let reason = |reason: String| DomainError::Payload { kind: Self::KIND, reason };
        let payload = match payload {
            serde_json::Value::Null => &serde_json::Value::Object(Default::default()),
            // Not a list either, which serde would take field by field in order.
            object @ serde_json::Value::Object(_) => object,
            other => return Err(reason(format!("it must be a JSON object, not {other}"))),
        };
        // With the path to the value at fault (`asset_ids[2]: …`): serde's own message does not name it.
        serde_path_to_error::deserialize(payload).map_err(|e| match e.path().to_string().as_str() {
            "." => reason(e.inner().to_string()),
            path => reason(format!("{path}: {}", e.inner())),
        })
    }

    /// The payload these arguments are stored as.
    fn to_payload(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("work arguments serialize to JSON")
    }

    /// Work of this kind on `scope` with these arguments. Fails when the kind does not take that scope.
    fn work(&self, scope: Scope) -> Result<NewWorkItem, DomainError> {
        Ok(NewWorkItem::new(Self::KIND, scope)?.with_payload(self.to_payload()))
    }
}

/// Checks `payload` against the arguments of `kind`, for those kinds that take any (crawl, proxy deletion):
/// what enqueues a payload written by a person (the CLI's `--payload`) refuses a wrong one at once, instead of
/// the handler failing it later. Kinds without arguments ignore their payload.
pub fn check_payload(kind: WorkKind, payload: &serde_json::Value) -> Result<(), DomainError> {
    match kind {
        WorkKind::Crawl => CrawlArgs::from_payload(payload).map(drop),
        WorkKind::ProxyDeletion => ProxyDeletionArgs::from_payload(payload).map(drop),
        WorkKind::BurstDetection
        | WorkKind::Purge
        | WorkKind::ProxySweep
        | WorkKind::TokenCleanup
        | WorkKind::WorkItemRetention => Ok(()),
    }
}

/// A crawl's arguments: both confirmations are off unless an operator gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrawlArgs {
    /// Soft-delete what vanished although the mass-deletion guard would refuse, or although the root holds no
    /// media while the catalogue has assets for it (the library really was emptied).
    pub allow_mass_deletion: bool,
    /// The root was a mount point at the last crawl and is not one now, and that is expected (the library
    /// moved off its own mount).
    pub root_moved: bool,
}

impl WorkArgs for CrawlArgs {
    const KIND: WorkKind = WorkKind::Crawl;
}

/// A proxy deletion's arguments: the assets whose proxies go (so the next crawl makes them again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyDeletionArgs {
    /// The assets.
    pub asset_ids: Vec<AssetId>,
    /// Only these types of proxy; every type when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_types: Option<Vec<ProxyType>>,
}

impl WorkArgs for ProxyDeletionArgs {
    const KIND: WorkKind = WorkKind::ProxyDeletion;
}

/// A file the crawl passed over or a folder it could not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathProblem {
    /// The path beneath the root (lossy UTF-8).
    pub path: String,
    /// What went wrong.
    pub reason: String,
}

/// A crawl's counts so far: its progress while it runs (read by `ProgressEstimate`), and the start of its report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CrawlCounts {
    /// Media files the walk found.
    pub found: u64,
    /// Of those, unchanged since the last crawl (not opened).
    pub unchanged: u64,
    /// New assets.
    pub ingested: u64,
    /// Assets found at another path (or moved to a surviving copy).
    pub moved: u64,
    /// Files recorded as copies of an asset.
    pub copies: u64,
    /// Soft-deleted assets that came back.
    pub revived: u64,
    /// Same content at the same path with another size or time.
    pub touched: u64,
    /// Assets whose missing proxies were made again.
    pub proxies_regenerated: u64,
    /// Assets whose capture time was read again (a sidecar appeared, changed or vanished).
    pub redated: u64,
    /// Files passed over (empty, vanished, not media by their content).
    pub skipped: u64,
    /// Files that could not be ingested.
    pub failed: u64,
    /// Bytes read to hash content.
    pub bytes_hashed: u64,
    /// Files processed so far, of `total`, in `seconds`.
    pub done: u64,
    /// Files the listing found.
    pub total: u64,
    /// Seconds since processing began, to a tenth.
    pub seconds: f64,
}

/// What a crawl found and did: `work_items.result` of a crawl.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CrawlReport {
    /// The counts at the end.
    #[serde(flatten)]
    pub counts: CrawlCounts,
    /// Assets soft-deleted because their files vanished.
    pub soft_deleted: u64,
    /// Live Photos paired.
    pub live_photos_paired: u64,
    /// Links passed over (never followed).
    pub links_skipped: u64,
    /// Files whose names are not of a supported type.
    pub unsupported: u64,
    /// Folders of the proxy root found mounted inside the library (passed over).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxy_root_inside: Vec<String>,
    /// Folders that could not be read (nothing is soft-deleted while there are any).
    pub unreadable_folders: Vec<PathProblem>,
    /// Files that failed, and why (at most a few hundred; `counts.failed` counts them all).
    pub failures: Vec<PathProblem>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StorageConfigId;

    #[test]
    fn crawl_args_default_to_no_confirmation_and_round_trip() {
        assert_eq!(CrawlArgs::from_payload(&serde_json::json!({})).unwrap(), CrawlArgs::default());
        assert_eq!(CrawlArgs::from_payload(&serde_json::Value::Null).unwrap(), CrawlArgs::default());
        let args = CrawlArgs { allow_mass_deletion: true, root_moved: false };
        assert_eq!(args.to_payload(), serde_json::json!({"allow_mass_deletion": true, "root_moved": false}));
        assert_eq!(CrawlArgs::from_payload(&args.to_payload()).unwrap(), args);
    }

    #[test]
    fn a_misspelt_or_mistyped_confirmation_is_refused_with_the_kind_named() {
        for payload in [
            serde_json::json!({"allow_mass_delete": true}),
            serde_json::json!({"allow_mass_deletion": "yes"}),
            serde_json::json!([true]),
        ] {
            let e = CrawlArgs::from_payload(&payload).unwrap_err().to_string();
            assert!(e.contains("crawl"), "{e}");
        }
        let e = CrawlArgs::from_payload(&serde_json::json!({"root_move": true})).unwrap_err().to_string();
        assert!(e.contains("root_move") && e.contains("root_moved"), "names the field and what is accepted: {e}");
    }

    #[test]
    fn proxy_deletion_args_need_their_assets_and_take_types_optionally() {
        let id = AssetId::new();
        let args = ProxyDeletionArgs::from_payload(&serde_json::json!({"asset_ids": [id]})).unwrap();
        assert_eq!((args.asset_ids, args.proxy_types), (vec![id], None));
        let typed = ProxyDeletionArgs { asset_ids: vec![id], proxy_types: Some(vec![ProxyType::Thumbnail]) };
        assert_eq!(ProxyDeletionArgs::from_payload(&typed.to_payload()).unwrap(), typed);
        assert!(ProxyDeletionArgs::from_payload(&serde_json::json!({})).is_err(), "asset_ids are required");
        let e = ProxyDeletionArgs::from_payload(&serde_json::json!({"asset_ids": [id, "nope"]})).unwrap_err();
        assert!(e.to_string().contains("asset_ids[1]: "), "names the value at fault: {e}");
    }

    #[test]
    fn payloads_are_checked_for_the_kinds_that_take_arguments() {
        assert!(check_payload(WorkKind::Crawl, &serde_json::json!({"root_moved": true})).is_ok());
        assert!(check_payload(WorkKind::Crawl, &serde_json::json!({"allow_mass_deletion": 1})).is_err());
        assert!(check_payload(WorkKind::ProxyDeletion, &serde_json::json!({"proxy_types": ["poster"]})).is_err());
        assert!(check_payload(WorkKind::Purge, &serde_json::json!({"anything": 1})).is_ok());
    }

    #[test]
    fn work_checks_the_scope_of_the_kind() {
        let config = StorageConfigId::new();
        let item = CrawlArgs { allow_mass_deletion: false, root_moved: true }.work(Scope::Config(config)).unwrap();
        assert_eq!((item.kind(), item.payload["root_moved"].as_bool()), (WorkKind::Crawl, Some(true)));
        assert!(CrawlArgs::default().work(Scope::Unscoped).is_err());
    }

    #[test]
    fn a_crawl_report_is_its_counts_and_what_is_known_at_the_end_in_one_object() {
        let counts = CrawlCounts { found: 3, done: 3, total: 4, ..Default::default() };
        let report = CrawlReport { counts, soft_deleted: 1, ..Default::default() };
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!((json["found"].as_u64(), json["soft_deleted"].as_u64()), (Some(3), Some(1)), "{json}");
        assert!(json.get("proxy_root_inside").is_none(), "left out when empty: {json}");
        assert_eq!(serde_json::from_value::<CrawlReport>(json).unwrap(), report);
    }
}
