//! Typed results of work items, as a successful run stores them in `work_items.result` (JSON), one type per
//! kind ([`crate::WorkArgs::Output`]). The operator's page, the CLI and the web backend read them back with
//! [`crate::WorkArgs::output_of`]. Reading is lenient (a field an older Worker did not write is its default);
//! the JSON shape is what `docs/operations.md` and the page show.

use serde::{Deserialize, Serialize};

/// The most entries a list of a work item's result names (files that failed, folders not read, files not
/// deleted): the first so many, and a count beside the list says how many there were in all. A library or a proxy
/// root failing everywhere (a share mounted without rights, a proxy volume gone read-only) so makes a result of
/// kilobytes, not megabytes, in the queue, on the page and in the log. docs/operations.md gives it (checked by a
/// test).
pub const MOST_LISTED: usize = 200;

/// Adds `entry` to `list`, a list of a work item's result, while it holds fewer than [`MOST_LISTED`]; `total`
/// counts every entry either way.
pub fn list_one<T>(list: &mut Vec<T>, total: &mut u64, entry: T) {
    *total += 1;
    if list.len() < MOST_LISTED {
        list.push(entry);
    }
}

/// A file the crawl passed over or a folder it could not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathProblem {
    /// The path beneath the root (lossy UTF-8).
    pub path: String,
    /// What went wrong.
    pub reason: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl PathProblem {
    /// `path` and what went wrong with it.
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { path: path.into(), reason: reason.into() }
    }
}

/// A crawl's counts so far: its progress while it runs (read by `ProgressEstimate`), and the start of its report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
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
    /// Assets whose own path a file of other content took (written over them): each is soft-deleted, or moved to
    /// a copy of it elsewhere. Weighed by the mass-deletion guard with what vanished.
    pub replaced: u64,
    /// Files passed over (empty, vanished, not media by their content).
    pub skipped: u64,
    /// Files that could not be ingested.
    pub failed: u64,
    /// Files still being written (modified within the settle time, or changed while they were read): left
    /// alone, nothing written for them, and a crawl asked for again once they may have settled.
    pub settling: u64,
    /// Bytes read to hash content.
    pub bytes_hashed: u64,
    /// Files processed so far, of `total`, in `seconds`.
    pub done: u64,
    /// Files the listing found, once it is done (the walk runs beside the processing: until it ends, the total
    /// is not known and left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Seconds since processing began, to a tenth.
    pub seconds: f64,
}

/// What a crawl found and did: `work_items.result` of a crawl.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
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
    /// Folders passed over because each is one of the folders above it again (a bind mount of a parent, a loop of
    /// the file system): the first [`MOST_LISTED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folder_loops: Vec<String>,
    /// How many folders were passed over as loops.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub folder_loops_total: u64,
    /// Folders that could not be read (nothing the catalogue knows under them is soft-deleted): the first
    /// [`MOST_LISTED`].
    pub unreadable_folders: Vec<PathProblem>,
    /// How many folders could not be read.
    pub unreadable_folders_total: u64,
    /// Files that failed, and why: the first [`MOST_LISTED`] (`counts.failed` counts them all).
    pub failures: Vec<PathProblem>,
}

/// What burst detection found: `work_items.result` of a `burst_detection`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct BurstReport {
    /// Active stills of the config looked at.
    pub stills: u64,
    /// Bursts found (they replace the config's earlier bursts).
    pub bursts: u64,
    /// Stills that belong to a burst.
    pub frames_in_bursts: u64,
}

impl BurstReport {
    /// `bursts` holding `frames_in_bursts` of `stills`.
    pub fn new(stills: u64, bursts: u64, frames_in_bursts: u64) -> Self {
        Self { stills, bursts, frames_in_bursts }
    }
}

/// What a purge did: `work_items.result` of a `purge`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Soft-deleted assets purged (files, then rows).
    pub purged: u64,
    /// Proxy files that could not be deleted, with why (the first [`MOST_LISTED`]); their assets stay soft-deleted
    /// until the next purge.
    pub not_deleted: Vec<String>,
    /// How many proxy files could not be deleted.
    pub not_deleted_total: u64,
    /// The config's crawl whose failure held the purge back, when one did: nothing was purged
    /// ([`crate::ports::MaintenanceStore::failing_crawl`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by_crawl: Option<crate::WorkItemId>,
}

impl PurgeReport {
    /// `purged` assets gone; the files in `not_deleted` (the first [`MOST_LISTED`] of `not_deleted_total`) kept
    /// theirs.
    pub fn new(purged: u64, not_deleted: Vec<String>, not_deleted_total: u64) -> Self {
        Self { purged, not_deleted, not_deleted_total, held_by_crawl: None }
    }

    /// Nothing purged: the crawl `crawl` of the config failed since the config's last crawl of the whole root that
    /// succeeded.
    pub fn held_by(crawl: crate::WorkItemId) -> Self {
        Self { held_by_crawl: Some(crawl), ..Self::default() }
    }
}

/// How many things a deletion removed: `work_items.result` of a `proxy_deletion` (proxy rows), a
/// `token_cleanup` (refresh tokens) and a `work_item_retention` (work items).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct DeletionReport {
    /// Deleted.
    pub deleted: u64,
}

impl DeletionReport {
    /// `deleted` things removed.
    pub fn new(deleted: u64) -> Self {
        Self { deleted }
    }
}

/// What a proxy sweep did: `work_items.result` of a `proxy_sweep`. When there was no proxy root yet, only
/// `deleted` (0) and `note` are written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProxySweepReport {
    /// Orphan proxy files deleted.
    pub deleted: u64,
    /// What the sweep found under the proxy root; `None` when there was none.
    #[serde(flatten)]
    pub swept: Option<SweptProxyRoot>,
    /// Why nothing was swept, when so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ProxySweepReport {
    /// A sweep that found no proxy root (nothing was ever written).
    pub fn no_proxy_root() -> Self {
        Self { deleted: 0, swept: None, note: Some("no proxy root yet".to_owned()) }
    }

    /// A sweep of the proxy root that deleted `deleted` orphans and found the rest as `swept` says.
    pub fn swept(deleted: u64, swept: SweptProxyRoot) -> Self {
        Self { deleted, swept: Some(swept), note: None }
    }
}

/// What a proxy sweep found under the proxy root besides the orphans it deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SweptProxyRoot {
    /// Orphans that could not be deleted, with why: the first [`MOST_LISTED`].
    pub not_deleted: Vec<String>,
    /// How many orphans could not be deleted.
    #[serde(default)]
    pub not_deleted_total: u64,
    /// Files that are not in the proxy layout, or of a config that does not exist: never deleted.
    pub left_alone: u64,
    /// The first few of those.
    pub left_alone_examples: Vec<String>,
    /// Folders that could not be read: the first [`MOST_LISTED`].
    pub unreadable_folders: Vec<String>,
    /// How many folders could not be read.
    #[serde(default)]
    pub unreadable_folders_total: u64,
    /// Active assets found with a proxy file missing, not a regular file, or not of its recorded size (confirmed
    /// right before acting), in configs the guard did not refuse.
    #[serde(default)]
    pub broken_assets: u64,
    /// Of those, the assets whose proxies were queued to be made again (a `proxy_deletion` of their config, and a
    /// crawl after it); the rest are queued by a later sweep.
    #[serde(default)]
    pub repairs_queued: u64,
    /// Configs for which nothing was repaired because more than half of their proxy files were missing: the
    /// proxy root looks unmounted or emptied (log event `proxy_root_looks_emptied`).
    #[serde(default)]
    pub refused_configs: Vec<crate::StorageConfigId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crawl_report_is_its_counts_and_what_is_known_at_the_end_in_one_object() {
        let counts = CrawlCounts { found: 3, done: 3, total: Some(4), ..Default::default() };
        let report = CrawlReport { counts, soft_deleted: 1, ..Default::default() };
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!((json["found"].as_u64(), json["soft_deleted"].as_u64()), (Some(3), Some(1)), "{json}");
        assert!(json.get("proxy_root_inside").is_none(), "left out when empty: {json}");
        assert_eq!(serde_json::from_value::<CrawlReport>(json).unwrap(), report);
    }

    fn json(value: &impl Serialize) -> serde_json::Value {
        serde_json::to_value(value).unwrap()
    }

    #[test]
    fn results_keep_the_shapes_the_page_and_the_cli_read() {
        assert_eq!(
            json(&BurstReport::new(5, 1, 3)),
            serde_json::json!({"stills": 5, "bursts": 1, "frames_in_bursts": 3})
        );
        assert_eq!(
            json(&PurgeReport::new(2, vec!["a: gone".into()], 1)),
            serde_json::json!({"purged": 2, "not_deleted": ["a: gone"], "not_deleted_total": 1})
        );
        assert_eq!(json(&DeletionReport::new(7)), serde_json::json!({"deleted": 7}));
        assert_eq!(
            json(&ProxySweepReport::no_proxy_root()),
            serde_json::json!({"deleted": 0, "note": "no proxy root yet"})
        );
        let swept = SweptProxyRoot { left_alone: 1, left_alone_examples: vec!["x".into()], ..Default::default() };
        let report = ProxySweepReport::swept(3, swept);
        assert_eq!(
            json(&report),
            serde_json::json!({
                "deleted": 3, "not_deleted": [], "not_deleted_total": 0, "left_alone": 1, "left_alone_examples": ["x"],
                "unreadable_folders": [], "unreadable_folders_total": 0, "broken_assets": 0, "repairs_queued": 0,
                "refused_configs": []
            })
        );
        assert_eq!(serde_json::from_value::<ProxySweepReport>(json(&report)).unwrap(), report);
        let none = serde_json::from_value::<ProxySweepReport>(json(&ProxySweepReport::no_proxy_root())).unwrap();
        assert_eq!(none, ProxySweepReport::no_proxy_root());
    }

    #[test]
    fn a_list_names_the_first_entries_and_counts_them_all() {
        let (mut list, mut total) = (Vec::new(), 0);
        for i in 0..MOST_LISTED + 7 {
            list_one(&mut list, &mut total, i);
        }
        assert_eq!(list, (0..MOST_LISTED).collect::<Vec<_>>());
        assert_eq!(total, MOST_LISTED as u64 + 7);
    }

    /// A result an older Worker wrote, without the counts beside its lists, still reads (each count then 0).
    #[test]
    fn a_result_written_before_the_counts_reads() {
        let crawl: CrawlReport =
            serde_json::from_value(serde_json::json!({"found": 1, "unreadable_folders": [], "failures": []})).unwrap();
        assert_eq!((crawl.counts.found, crawl.unreadable_folders_total), (1, 0));
        let purge: PurgeReport = serde_json::from_value(serde_json::json!({"purged": 1, "not_deleted": []})).unwrap();
        assert_eq!(purge.not_deleted_total, 0);
        let sweep: ProxySweepReport =
            serde_json::from_value(serde_json::json!({"deleted": 1, "not_deleted": [], "left_alone": 0,
                "left_alone_examples": [], "unreadable_folders": []}))
            .unwrap();
        assert_eq!(sweep.swept.map(|s| (s.not_deleted_total, s.unreadable_folders_total)), Some((0, 0)));
    }

    /// docs/operations.md gives the number of entries a list names as it is.
    #[test]
    fn the_docs_give_the_most_listed_as_it_is() {
        let docs = include_str!("../../../docs/operations.md").split_whitespace().collect::<Vec<_>>().join(" ");
        let said = format!("name the first {MOST_LISTED} only");
        assert!(docs.contains(&said), "docs/operations.md should say a result's lists {said}");
    }
}
