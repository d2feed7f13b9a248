//! The verbs on work items: `enqueue`, `cancel`, `list`, `show`, `retry`, `regenerate`, `pause` and `resume`.

use crate::observe::value_shown;
use almanac_domain::WorkItem;
use almanac_store_pg::PgStore;

use super::follow::follow;
use super::{Exit, Failure};
use crate::ops::{self, PauseTarget};

/// `enqueue`: prints the item's id and whether it was queued or joined one already queued; `--wait` follows it.
pub async fn enqueue(
    store: &PgStore,
    kind: &str,
    config: Option<&str>,
    payload: Option<&str>,
    dedup_key: Option<String>,
    wait: bool,
) -> Result<Exit, Failure> {
    let kind = ops::parse_kind(kind)?;
    let enqueued = ops::enqueue(store, kind, config, payload, dedup_key).await?;
    say!("{}\t{}", enqueued.item.id, if enqueued.created { "queued" } else { "already queued" });
    if wait {
        return follow(store, enqueued.item.id).await;
    }
    Ok(Exit::Success)
}

/// `cancel ID`.
pub async fn cancel(store: &PgStore, id: &str) -> Result<Exit, Failure> {
    say!("{}", ops::cancel_item(store, ops::parse_item_id(id)?).await?);
    Ok(Exit::Success)
}

/// `list`: a line per item, newest first.
pub async fn list(
    store: &PgStore,
    status: Option<&str>,
    kind: Option<&str>,
    config: Option<&str>,
    limit: i64,
) -> Result<Exit, Failure> {
    let filter = ops::item_filter(store, status, kind, config).await?;
    say!("ID\tKIND\tSTATUS\tCONFIG\tREQUESTED\tATTEMPT\tLAST ERROR");
    for i in store.find_items(&filter, limit.max(1)).await? {
        say!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            i.id,
            i.kind,
            i.status,
            i.scope.storage_config().map_or("-".into(), |c| c.to_string()),
            i.requested_at.format("%Y-%m-%d %H:%M:%S"),
            i.attempt,
            i.last_error.as_deref().map_or("-".into(), |e| value_shown(&e.chars().take(120).collect::<String>()))
        );
    }
    Ok(Exit::Success)
}

/// `show ID`: everything an operator asks about one item.
pub async fn show(store: &PgStore, id: &str) -> Result<Exit, Failure> {
    let i = ops::find_item(store, ops::parse_item_id(id)?).await?;
    let at = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
    };
    say!("id           {}", i.id);
    say!("kind         {}", i.kind);
    say!("config       {}", i.scope.storage_config().map_or("- (unscoped)".into(), |c| c.to_string()));
    say!("status       {}", i.status);
    say!("attempt      {} (failures {} of {}, stalls {})", i.attempt, i.failures, i.max_attempts, i.stalls);
    say!("requested    {}", at(Some(i.requested_at)));
    say!("run after    {}", at(Some(i.run_after)));
    say!("started      {}", at(i.started_at));
    say!("finished     {}", at(i.finished_at));
    say!("worker       {}", i.worker_id.as_deref().unwrap_or("-"));
    say!("dedup key    {}", i.dedup_key.as_deref().unwrap_or("-"));
    if i.cancel_requested_at.is_some() {
        say!("cancel asked {}", at(i.cancel_requested_at));
    }
    say!("last error   {}", i.last_error.as_deref().map_or("-".into(), value_shown));
    say!("payload      {}", i.payload);
    if i.progress.is_some() {
        say!("progress     {}", ops::progress_text(&i));
    }
    if let Some(result) = &i.result {
        say!("result       {result}");
        print_failed_files(&i);
    }
    Ok(Exit::Success)
}

/// A finished crawl's failed files, under `show`.
fn print_failed_files(item: &WorkItem) {
    let failed = ops::failed_files(item);
    if failed.listed.is_empty() {
        return;
    }
    say!(
        "failed files ({}{}):",
        failed.total,
        if failed.total > failed.listed.len() as u64 { ", the first listed" } else { "" }
    );
    for (path, reason) in &failed.listed {
        say!("  {}: {}", value_shown(path), value_shown(reason));
    }
}

/// `retry ID` or `retry --failed [--kind] [--config]`.
pub async fn retry(
    store: &PgStore,
    id: Option<&str>,
    failed: bool,
    kind: Option<&str>,
    config: Option<&str>,
) -> Result<Exit, Failure> {
    if let Some(id) = id {
        say!("{}\n1 item(s) queued again", ops::retry_item(store, ops::parse_item_id(id)?).await?);
        return Ok(Exit::Success);
    }
    if !failed {
        return Err(Failure::usage("retry needs an item id, or --failed"));
    }
    let filter = ops::item_filter(store, None, kind, config).await?;
    let retried = ops::retry_failed(store, filter).await?;
    for id in &retried {
        say!("{id}\tqueued again");
    }
    say!("{} item(s) queued again", retried.len());
    Ok(Exit::Success)
}

/// `regenerate --config`: the deletions and the crawl queued; `--wait` follows each in turn, and the first that
/// does not succeed is the outcome.
pub async fn regenerate(store: &PgStore, config: &str, wait: bool) -> Result<Exit, Failure> {
    let r = ops::regenerate(store, config).await?;
    say!(
        "{} proxy deletion item(s) for {} assets, then crawl {}, queued for {} ({})",
        r.items.len() - 1,
        r.assets,
        r.crawl(),
        r.config.id,
        r.config.root_path.display()
    );
    if wait {
        for id in r.items {
            let exit = follow(store, id).await?;
            if exit != Exit::Success {
                return Ok(exit);
            }
        }
    }
    Ok(Exit::Success)
}

/// `pause` and `resume` of a config or a kind.
pub async fn set_paused(
    store: &PgStore,
    config: Option<String>,
    kind: Option<&str>,
    pause: bool,
) -> Result<Exit, Failure> {
    say!("{}", ops::set_paused(store, PauseTarget::from_options(config, kind)?, pause).await?);
    Ok(Exit::Success)
}
