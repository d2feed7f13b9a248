//! Work items as the operator sees and handles them: progress in words, a crawl's failed files, retry, cancel,
//! pause and resume.

use almanac_domain::{
    CancelOutcome, CrawlArgs, ProgressEstimate, Status, WorkArgs, WorkItem, WorkItemId, WorkKind, WorkQueue,
};
use almanac_store_pg::{ItemFilter, PgStore};

use super::{OpError, configs, parse};

/// A running item's progress as people read it (`N of M files (P%), R/s, about T left`), or its raw JSON when
/// it does not say how far it is, or `-`.
pub fn progress_text(item: &WorkItem) -> String {
    let unit = if item.kind == WorkKind::Crawl { "files" } else { "units" };
    match &item.progress {
        None => "-".to_owned(),
        Some(p) => ProgressEstimate::from_progress(p).map_or_else(|| p.to_string(), |e| e.describe(unit)),
    }
}

/// The files a crawl could not read, as its result lists them.
pub struct FailedFiles {
    /// How many failed (the result's `failed`; more than are listed when the list was capped).
    pub total: u64,
    /// The first of them: (path, reason).
    pub listed: Vec<(String, String)>,
}

/// A finished item's failed files (`result.failures`, `result.failed`); none when it lists none.
pub fn failed_files(item: &WorkItem) -> FailedFiles {
    let report = CrawlArgs::output_of(item).unwrap_or_default();
    let listed: Vec<(String, String)> = report.failures.into_iter().map(|f| (f.path, f.reason)).collect();
    FailedFiles { total: report.counts.failed.max(listed.len() as u64), listed }
}

/// One item, by id.
pub async fn find_item(store: &PgStore, id: WorkItemId) -> Result<WorkItem, OpError> {
    store.get(id).await?.ok_or_else(|| OpError::NotFound(format!("no work item {id}")))
}

/// The items that `list` and `retry --failed` name: a status, a kind and a config (id or root), each optional.
pub async fn item_filter(
    store: &PgStore,
    status: Option<&str>,
    kind: Option<&str>,
    config: Option<&str>,
) -> Result<ItemFilter, OpError> {
    Ok(ItemFilter {
        status: status.map(parse::parse_status).transpose()?,
        kind: kind.map(parse::parse_kind).transpose()?,
        config: match config {
            Some(c) => Some(configs::find_config(store, c).await?.id),
            None => None,
        },
    })
}

/// Puts one failed or cancelled item back in the queue.
pub async fn retry_item(store: &PgStore, id: WorkItemId) -> Result<String, OpError> {
    let item = find_item(store, id).await?;
    if !matches!(item.status, Status::Failed | Status::Cancelled) {
        return Err(OpError::Refused(format!("{id} is {}: only failed or cancelled items are retried", item.status)));
    }
    let retried = store.retry_items(&ItemFilter::default(), Some(&[id])).await?;
    if retried.is_empty() {
        return Err(OpError::Refused(format!(
            "{id} was not queued again: an item with its dedup key is queued already (it does the same work)"
        )));
    }
    Ok(format!("{id} queued again"))
}

/// Puts every failed item of `filter` (its status set to failed) back in the queue: the ids queued again.
pub async fn retry_failed(store: &PgStore, filter: ItemFilter) -> Result<Vec<WorkItemId>, OpError> {
    let filter = ItemFilter { status: Some(Status::Failed), ..filter };
    Ok(store.retry_items(&filter, None).await?)
}

/// Cancels a queued item, or asks a running one to stop.
pub async fn cancel_item(store: &PgStore, id: WorkItemId) -> Result<String, OpError> {
    Ok(match store.request_cancel(id).await? {
        CancelOutcome::Cancelled => format!("cancelled {id}"),
        CancelOutcome::Requested => format!("cancel requested for running item {id}"),
        CancelOutcome::AlreadyFinished(s) => format!("{id} already finished ({s})"),
        CancelOutcome::NotFound => return Err(OpError::NotFound(format!("no work item {id}"))),
    })
}

/// What `pause` and `resume` act on.
pub enum PauseTarget {
    /// A storage config, by id or root.
    Config(String),
    /// Every item of a kind.
    Kind(WorkKind),
}

impl PauseTarget {
    /// What `--config` or `--kind` names (a config when both are given).
    pub fn from_options(config: Option<String>, kind: Option<&str>) -> Result<Self, OpError> {
        match (config, kind) {
            (Some(c), _) => Ok(PauseTarget::Config(c)),
            (None, Some(k)) => Ok(PauseTarget::Kind(parse::parse_kind(k)?)),
            (None, None) => Err(OpError::BadInput("say what: --config ID|ROOT or --kind KIND".into())),
        }
    }
}

/// Pauses or resumes a config or a kind, and says what became of it.
pub async fn set_paused(store: &PgStore, target: PauseTarget, pause: bool) -> Result<String, OpError> {
    let (what, was) = match target {
        PauseTarget::Config(c) => {
            let config = configs::find_config(store, &c).await?;
            let was = store.set_config_paused(config.id, pause).await?;
            (format!("storage config {} ({})", config.id, config.root_path.display()), was)
        }
        PauseTarget::Kind(kind) => (format!("kind {kind}"), store.set_kind_paused(kind, pause).await?),
    };
    let how = match (pause, was) {
        (true, false) => "paused: its queued work is not claimed until resumed (what runs finishes)",
        (true, true) => "was paused already",
        (false, true) => "resumed",
        (false, false) => "was not paused",
    };
    Ok(format!("{what} {how}"))
}
