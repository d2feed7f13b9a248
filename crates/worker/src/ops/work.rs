//! Work the operator asks for: an item of any kind, a crawl now, a config's proxies rebuilt. The items (and
//! their payloads) are made in [`work_item`], [`crawl_item`] and [`regeneration_items`] alone.

use almanac_domain::{
    DedupKey, Enqueued, NewWorkItem, ProxyDeletionArgs, Scope, StorageConfig, WorkArgs, WorkItemId, WorkKind, WorkQueue,
};
use almanac_store_pg::PgStore;

use super::{OpError, configs};

/// Deletions per proxy deletion item when a config's proxies are rebuilt.
pub(super) const ASSETS_PER_DELETION: usize = 5_000;

/// An item of `kind` as the CLI asks for it: its payload given as JSON text (checked against the kind's
/// arguments), and a dedup key.
pub fn work_item(
    kind: WorkKind,
    scope: Scope,
    payload: Option<&str>,
    dedup_key: Option<String>,
) -> Result<NewWorkItem, OpError> {
    let mut item = NewWorkItem::new(kind, scope)?;
    if let Some(p) = payload {
        let payload = serde_json::from_str(p).map_err(|e| OpError::BadInput(format!("--payload must be JSON: {e}")))?;
        item =
            NewWorkItem::from_json(kind, scope, &payload).map_err(|e| OpError::BadInput(format!("--payload: {e}")))?;
    }
    if let Some(k) = dedup_key {
        item = item.with_dedup_key(DedupKey::new(k)?);
    }
    Ok(item)
}

/// A crawl of `config` with the scheduler's dedup key: a crawl asked for while one is queued joins it.
pub fn crawl_item(config: &StorageConfig) -> Result<NewWorkItem, OpError> {
    let scope = Scope::Config(config.id);
    Ok(NewWorkItem::new(WorkKind::Crawl, scope)?.with_dedup_key(DedupKey::for_work(WorkKind::Crawl, scope)))
}

/// `enqueue`: an item of `kind`, for the config named `config` (which must be active) or unscoped.
pub async fn enqueue(
    store: &PgStore,
    kind: WorkKind,
    config: Option<&str>,
    payload: Option<&str>,
    dedup_key: Option<String>,
) -> Result<Enqueued, OpError> {
    let scope = match config {
        Some(c) => Scope::Config(configs::active_config(store, c).await?.id),
        None => Scope::Unscoped,
    };
    Ok(store.enqueue(&work_item(kind, scope, payload, dedup_key)?).await?)
}

/// Enqueues a crawl of a config (or finds the one already queued: then it is made due now, even if the quiet
/// hours hold it, or a retry's backoff) and says which.
pub async fn enqueue_crawl(store: &PgStore, config: &str) -> Result<(WorkItemId, String), OpError> {
    let c = configs::active_config(store, config).await?;
    let enqueued = store.enqueue(&crawl_item(&c)?).await?;
    let how = if enqueued.created {
        "queued"
    } else if store.run_now(enqueued.item.id).await? {
        "already queued, waiting: made due now"
    } else {
        "already queued"
    };
    Ok((enqueued.item.id, format!("crawl {} of {} {how}", enqueued.item.id, c.root_path.display())))
}

/// A rebuild of a config's proxies, queued.
pub struct Regeneration {
    /// The config.
    pub config: StorageConfig,
    /// Its active assets, whose proxies are deleted.
    pub assets: usize,
    /// The proxy deletion items, then the crawl (the last), in the order they run.
    pub items: Vec<WorkItemId>,
}

impl Regeneration {
    /// The crawl that makes the proxies again.
    pub fn crawl(&self) -> WorkItemId {
        *self.items.last().expect("the crawl")
    }
}

/// The items that rebuild a config's proxies: deletions first, the crawl behind them (one config's items run
/// one at a time, oldest first).
pub fn regeneration_items(
    config: &StorageConfig,
    assets: &[almanac_domain::AssetId],
) -> Result<Vec<NewWorkItem>, OpError> {
    let scope = Scope::Config(config.id);
    let mut items: Vec<NewWorkItem> = assets
        .chunks(ASSETS_PER_DELETION)
        .map(|chunk| ProxyDeletionArgs { asset_ids: chunk.to_vec(), proxy_types: None }.into_item(scope))
        .collect::<Result<_, _>>()?;
    items.push(NewWorkItem::new(WorkKind::Crawl, scope)?);
    Ok(items)
}

/// `regenerate`: a config's proxies are deleted and a crawl makes them again from the originals.
pub async fn regenerate(store: &PgStore, given: &str) -> Result<Regeneration, OpError> {
    let config = configs::find_config(store, given).await?;
    if !config.is_active {
        return Err(OpError::Refused(format!(
            "storage config {} ({}) is deactivated: activate it first (almanac-worker config activate {})",
            config.id,
            config.root_path.display(),
            config.id
        )));
    }
    let assets = store.active_asset_ids(config.id).await?;
    let enqueued = store.enqueue_many(&regeneration_items(&config, &assets)?).await?;
    let items = enqueued.iter().map(|e| e.item.id).collect();
    Ok(Regeneration { config, assets: assets.len(), items })
}
