//! Operator actions and the reading of their arguments, shared by the CLI and the operator's page: each says
//! in its error what was wrong and changes nothing then.

use almanac_domain::{
    CancelOutcome, NewWorkItem, ProgressEstimate, Scope, Status, StorageConfig, StorageConfigId, WorkItemId, WorkKind,
    WorkQueue,
};
use almanac_store_pg::{ItemFilter, PgStore, StoreError};

/// Why an action was not done.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The request itself is wrong (a malformed id, an unknown kind).
    #[error("{0}")]
    BadInput(String),
    /// It names something that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What it names is not in a state for it (retrying a running item, enqueueing for a deactivated config).
    #[error("{0}")]
    Refused(String),
    /// The database failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => OpError::NotFound(m),
            other => OpError::Store(other),
        }
    }
}

impl From<almanac_domain::QueueError> for OpError {
    fn from(e: almanac_domain::QueueError) -> Self {
        use almanac_domain::QueueError;
        match e {
            // An outage stays an outage (exit 3, 503).
            QueueError::Unavailable(m) => OpError::Store(StoreError::Unavailable(m)),
            QueueError::Rejected(m) => OpError::Refused(m),
            QueueError::Unexpected(m) => OpError::Store(StoreError::Unexpected(m)),
        }
    }
}

/// A `--config` value: an id as given, or a root path resolved the way `config add` stored it.
fn config_key(given: &str) -> String {
    match std::fs::canonicalize(given) {
        Ok(path) if given.starts_with('/') => path.display().to_string(),
        _ => given.trim_end_matches('/').to_owned(),
    }
}

/// A running item's progress as people read it (`N of M files (P%), R/s, about T left`), or its raw JSON when
/// it does not say how far it is, or `-`.
pub fn progress_text(item: &almanac_domain::WorkItem) -> String {
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
pub fn failed_files(item: &almanac_domain::WorkItem) -> FailedFiles {
    let result = item.result.as_ref();
    let listed: Vec<(String, String)> = result
        .and_then(|r| r.get("failures"))
        .and_then(serde_json::Value::as_array)
        .map(|list| {
            list.iter()
                .map(|f| {
                    let text = |k: &str| f.get(k).and_then(serde_json::Value::as_str).unwrap_or("?").to_owned();
                    (text("path"), text("reason"))
                })
                .collect()
        })
        .unwrap_or_default();
    let total = result.and_then(|r| r.get("failed")).and_then(serde_json::Value::as_u64).unwrap_or(0);
    FailedFiles { total: total.max(listed.len() as u64), listed }
}

/// A config named by id or root.
pub async fn find_config(store: &PgStore, given: &str) -> Result<StorageConfig, OpError> {
    Ok(store.find_storage_config(&config_key(given)).await?)
}

/// A `--config` option (id or root path) resolved to the config's id.
pub async fn config_id(store: &PgStore, config: Option<String>) -> Result<Option<StorageConfigId>, OpError> {
    Ok(match config {
        Some(c) => Some(find_config(store, &c).await?.id),
        None => None,
    })
}

pub fn parse_status(s: &str) -> Result<Status, OpError> {
    s.parse().map_err(|_| {
        OpError::BadInput(format!("{s:?} is not a status: use queued, running, succeeded, failed or cancelled"))
    })
}

pub fn parse_kind(s: &str) -> Result<WorkKind, OpError> {
    s.replace('-', "_").parse().map_err(|_| {
        OpError::BadInput(format!(
            "{s:?} is not a kind: use crawl, burst-detection, purge, proxy-deletion, proxy-sweep, token-cleanup or \
             work-item-retention"
        ))
    })
}

pub fn parse_item_id(s: &str) -> Result<WorkItemId, OpError> {
    s.parse().map_err(|_| OpError::BadInput(format!("{s:?} is not a work item id (a UUID, as `list` shows them)")))
}

/// Puts one failed or cancelled item back in the queue.
pub async fn retry_item(store: &PgStore, id: WorkItemId) -> Result<String, OpError> {
    let item = store.get(id).await?.ok_or_else(|| OpError::NotFound(format!("no work item {id}")))?;
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

/// Pauses or resumes a config or a kind, and says what became of it.
pub async fn set_paused(store: &PgStore, target: PauseTarget, pause: bool) -> Result<String, OpError> {
    let (what, was) = match target {
        PauseTarget::Config(c) => {
            let config = find_config(store, &c).await?;
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

/// The config named `given`, refused when it is deactivated (its work would never be claimed).
pub async fn active_config(store: &PgStore, given: &str) -> Result<StorageConfig, OpError> {
    let c = find_config(store, given).await?;
    if !c.is_active {
        return Err(OpError::Refused(format!(
            "storage config {} ({}) is deactivated: its work is not claimed. Activate it first (almanac-worker \
             config activate {})",
            c.id,
            c.root_path.display(),
            c.id
        )));
    }
    Ok(c)
}

/// Enqueues a crawl of a config (or finds the one already queued) and says which.
pub async fn enqueue_crawl(store: &PgStore, config: &str) -> Result<(WorkItemId, String), OpError> {
    let c = active_config(store, config).await?;
    // The scheduler's key: a crawl asked for while one is queued joins it.
    let scope = Scope::Config(c.id);
    let item = NewWorkItem::new(WorkKind::Crawl, scope)
        .map_err(|e| OpError::BadInput(e.to_string()))?
        .with_dedup_key(almanac_domain::DedupKey::for_work(WorkKind::Crawl, scope));
    let enqueued = store.enqueue(&item).await?;
    let how = if enqueued.created { "queued" } else { "already queued" };
    Ok((enqueued.item.id, format!("crawl {} of {} {how}", enqueued.item.id, c.root_path.display())))
}
