//! The start-up removal of the temporary files a killed Worker left under the proxy root.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use almanac_domain::{
    StorageConfigId,
    ports::{MaintenanceStore, ProxyPath, is_temporary_file_name},
};
use almanac_media::{Entry, Removal};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::ProxySweepHandler;
use super::proxy_files::{AgeFloor, open_proxy_root, remove_old_file, walk};

/// What the start-up clean-up of temporary files did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DebrisReport {
    /// Temporary files removed.
    pub removed: u64,
    /// Files that could not be removed, or folders that could not be read, with why: the first
    /// [`almanac_domain::MOST_LISTED`].
    pub problems: Vec<String>,
    /// How many problems there were.
    pub problems_total: u64,
}

impl DebrisReport {
    /// Counts a problem, and names it while fewer than [`almanac_domain::MOST_LISTED`] are (a proxy volume gone
    /// read-only fails every removal, and the log line names them).
    fn problem(&mut self, problem: String) {
        almanac_domain::list_one(&mut self.problems, &mut self.problems_total, problem);
    }
}

/// At a Worker's start: removes the temporary files that a Worker killed while writing (`kill -9`, a power cut)
/// left under the proxy root, those it can prove are debris. A file goes only when all of these hold:
///
/// - it is in the exact proxy layout ([`ProxyPath`]) of a storage config that exists;
/// - its name is one of the temporary names we write ([`almanac_domain::ports::is_temporary_file_name`]): a finished
///   proxy is never touched here (the sweep, which checks the rows, deletes those);
/// - it is older than the proxy sweep's age floor ([`ProxySweepHandler::min_age_for`]) at the database's time,
///   checked again right before the unlink: no write of ours lasts that long, while a younger file may be one another Worker (on
///   this host, or another sharing the proxy root) is writing right now. Younger debris is overwritten when its
///   original is crawled again, or left to the sweep.
///
/// Nothing is followed out of the root. Stops at `stop`; problems are logged and reported, never fatal.
pub async fn remove_temporary_debris<M: MaintenanceStore + 'static>(
    store: Arc<M>,
    proxy_root: PathBuf,
    limits: almanac_media::ToolLimits,
    stop: CancellationToken,
) -> DebrisReport {
    let min_age = ProxySweepHandler::<M>::min_age_for(limits);
    let mut report = DebrisReport::default();
    let listed = async {
        let Some(root) = open_proxy_root(&proxy_root).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let root = Arc::new(root);
        let floor = AgeFloor { now: store.db_now().await.map_err(|e| e.to_string())?, min_age };
        let configs: HashSet<StorageConfigId> =
            store.storage_config_ids().await.map_err(|e| e.to_string())?.into_iter().collect();
        let (listing_root, listing_stop) = (root.clone(), stop.clone());
        let listing = tokio::task::spawn_blocking(move || debris_of(&listing_root, &configs, floor, &listing_stop))
            .await
            .map_err(|e| format!("walking the proxy root ended abnormally: {e}"))?;
        Ok::<_, String>(Some((root, floor, listing)))
    };
    match listed.await {
        Ok(Some((root, floor, (candidates, unreadable)))) => {
            for problem in unreadable {
                report.problem(problem);
            }
            for rel in &candidates {
                if stop.is_cancelled() {
                    break;
                }
                let (root, rel) = (root.clone(), rel.clone());
                let removed = tokio::task::spawn_blocking(move || remove_old_file(&root, &rel, floor))
                    .await
                    .unwrap_or_else(|e| Err(format!("removing a temporary file ended abnormally: {e}")));
                match removed {
                    Ok(Removal::Removed) => report.removed += 1,
                    Ok(Removal::Gone | Removal::Kept) => {}
                    Err(e) => report.problem(e),
                }
            }
        }
        Ok(None) => {}
        Err(e) => report.problem(e),
    }
    if report.removed > 0 {
        info!(
            event = "temporary_debris_removed",
            removed = report.removed,
            "removed temporary files that a Worker killed while writing proxies left under the proxy root"
        );
    }
    if !report.problems.is_empty() {
        warn!(
            event = "temporary_debris_not_removed",
            count = report.problems_total,
            problems = ?report.problems,
            "temporary files a killed Worker left under the proxy root could not all be looked for or removed; \
             check the proxy root's permissions (the proxy sweep tries again)"
        );
    }
    report
}

/// The temporary files in the exact proxy layout of an existing config and older than `floor`, found in one
/// walk of the proxy root that keeps only them; and the folders that could not be read. Blocking.
fn debris_of(
    root: &almanac_media::RootFolder,
    configs: &HashSet<StorageConfigId>,
    floor: AgeFloor,
    stop: &CancellationToken,
) -> (Vec<String>, Vec<String>) {
    let (mut candidates, mut unreadable) = (Vec::new(), Vec::new());
    let mut visit = |rel: Vec<u8>, entry: &Entry| {
        let Ok(rel) = String::from_utf8(rel) else { return };
        let ours = floor.old_file(entry)
            && ProxyPath::parse(&rel).is_some_and(|p| configs.contains(&p.config))
            && rel.rsplit('/').next().is_some_and(is_temporary_file_name);
        if ours {
            candidates.push(rel);
        }
    };
    walk(root, Vec::new(), stop, &mut visit, &mut |e| unreadable.push(e));
    (candidates, unreadable)
}
