//! Proxy sweep: walks the proxy root one `<config id>/<2 hex>` folder at a time. Orphan proxy files, ours by
//! their layout and referenced by no row, go once they are old; proxy files of active assets that are missing,
//! not a regular file or not of their recorded size are found, and their assets' proxies queued to be made
//! again (`proxy_repair`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{
    ContentHash, ProxySweepArgs, ProxySweepReport, StorageConfigId, SweptProxyRoot, list_one,
    ports::{MaintenanceStore, ServedConfigs},
};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, WorkHandler};
use almanac_media::{Entry, EntryKind, Removal, RootFolder, join_beneath};
use serde::Serialize;
use tracing::{info, warn};

use super::proxy_check::{Found, confirm, judge};
use super::proxy_files::{AgeFloor, NOT_OURS_LISTED, list_folder, open_proxy_root, remove_old_file, walk};
use super::proxy_repair::ConfigCheck;
use super::root_watch::{RootAtStart, folder_gone};
use crate::{MassDeletionGuard, report_progress, store_error};

/// A sweep's progress: folders walked, orphans deleted, broken assets found so far.
#[derive(Serialize)]
struct SweepProgress {
    folders: u64,
    deleted: u64,
    broken_assets: u64,
}

/// The proxy sweep handler (kind `proxy_sweep`). It walks the proxy root one `<config id>/<2 hex>` folder at a
/// time, reading that folder's rows first and listing it after (a row is committed only after its file is
/// written), so it holds one folder's rows and files at a time, never the whole root's.
///
/// It deletes only what is ours and orphaned: a file whose path has the exact proxy layout (`<config
/// id>/<2 hex>/<64 hex>/<proxy or temporary name>`, [`ProxyPath`]) of a config that exists, that no proxy row
/// references, and that, checked again right before the unlink, is still a regular file older than `min_age`
/// (default over an hour, so a crawl's freshly written proxies survive until their rows commit) at the database's
/// time read at the sweep's start (an NFS volume's mtimes come from its server's clock, not this host's). Anything else
/// under the proxy root is left alone and reported once per sweep. No link is followed; nothing above the proxy
/// root is touched.
///
/// It finds proxies that are not whole (docs/safety.md, invariant 10): for the active configs this Worker serves, a row
/// of an active asset whose file is missing, a link or anything but a regular file, or of another size than
/// recorded (a file younger than `min_age` is not judged on its size: its row may be on its way) makes the asset
/// a suspect, confirmed by reading its rows and looking at its files again; its proxies are then queued to be
/// made again through its config's queue ([`super::proxy_repair`]), unless so many of the config's files are
/// missing that the proxy root looks unmounted or emptied (the operator's mass-deletion guard), or the root
/// changed, lost folders or lost files found whole during the sweep ([`super::root_watch`]).
///
/// [`ProxyPath`]: almanac_domain::ports::ProxyPath
pub struct ProxySweepHandler<M> {
    store: Arc<M>,
    proxy_root: PathBuf,
    min_age: Duration,
    served: ServedConfigs,
    guard: MassDeletionGuard,
}

impl<M> ProxySweepHandler<M> {
    /// A proxy sweep handler that checks the proxies of every active config.
    pub fn new(store: Arc<M>, proxy_root: PathBuf, min_age: Duration) -> Self {
        Self { store, proxy_root, min_age, served: ServedConfigs::All, guard: MassDeletionGuard::default() }
    }

    /// Judges "the proxy root looks unmounted or emptied" by the operator's guard (`storage.mass_deletion_*`,
    /// the crawl's), instead of the default.
    pub fn guarded_by(mut self, guard: MassDeletionGuard) -> Self {
        self.guard = guard;
        self
    }

    /// Checks only the proxies of the configs a Worker serving `served` crawls (with a proxy root per host, the
    /// other hosts' proxies are not here). Orphans of every existing config are still swept.
    pub fn serving(mut self, served: ServedConfigs) -> Self {
        self.served = served;
        self
    }

    /// The files it leaves, for a Worker whose tools run within `limits`: younger than an hour, or than a file's
    /// proxies can wait for their rows (a long video's poster is written before its transcode), with ten minutes
    /// to spare.
    pub fn min_age_for(limits: almanac_media::ToolLimits) -> Duration {
        (limits.longest_proxy_write() + Duration::from_secs(600)).max(Duration::from_secs(3600))
    }
}

/// What one sweep found so far, and what it judges by.
struct Sweep {
    deleted: u64,
    folders: u64,
    report: SweptProxyRoot,
    /// The age files must have to be deleted or judged by their size.
    floor: AgeFloor,
    /// The proxy root as the sweep opened it.
    at_start: RootAtStart,
    /// Why the sweep stopped early: the proxy root changed under it.
    lost: Option<String>,
}

impl Sweep {
    fn new(floor: AgeFloor, at_start: RootAtStart) -> Self {
        Self { deleted: 0, folders: 0, report: SweptProxyRoot::default(), floor, at_start, lost: None }
    }

    fn not_ours(&mut self, not_ours: NotOurs) {
        self.report.left_alone += not_ours.total;
        for rel in not_ours.examples {
            keep_example(&mut self.report.left_alone_examples, rel);
        }
    }

    /// Folders that could not be read: the first few named, all counted.
    fn folders_not_read(&mut self, folders: Vec<String>) {
        for folder in folders {
            list_one(&mut self.report.unreadable_folders, &mut self.report.unreadable_folders_total, folder);
        }
    }
}

/// Files found that are not ours: how many, and the first few.
#[derive(Default)]
struct NotOurs {
    total: u64,
    examples: Vec<String>,
}

impl NotOurs {
    fn push(&mut self, rel: String) {
        self.total += 1;
        keep_example(&mut self.examples, rel);
    }
}

/// Keeps `rel` among `examples` while they are fewer than [`NOT_OURS_LISTED`]: the one cap on the files not ours
/// that are named, per folder read and in the sweep's answer.
fn keep_example(examples: &mut Vec<String>, rel: String) {
    if examples.len() < NOT_OURS_LISTED {
        examples.push(rel);
    }
}

impl<M: MaintenanceStore + 'static> WorkHandler for ProxySweepHandler<M> {
    type Args = ProxySweepArgs;

    fn work(&self, _: ProxySweepArgs, ctx: HandlerContext) -> BoxFuture<'_, Result<ProxySweepReport, HandlerError>> {
        Box::pin(async move {
            let Some(root) = open_proxy_root(&self.proxy_root)? else {
                return Ok(ProxySweepReport::no_proxy_root());
            };
            let root = Arc::new(root);
            let now = self.store.db_now().await.map_err(store_error)?;
            let mut sweep = Sweep::new(AgeFloor { now, min_age: self.min_age }, RootAtStart::new(&root));
            let configs: HashSet<StorageConfigId> =
                self.store.storage_config_ids().await.map_err(store_error)?.into_iter().collect();
            let checked: BTreeSet<StorageConfigId> =
                self.store.configs_to_check(self.served).await.map_err(store_error)?.into_iter().collect();
            let on_disk = self.top_level(&root, &configs, &ctx, &mut sweep).await?;
            for config in on_disk.union(&checked) {
                self.config(&ctx, &root, *config, checked.contains(config), &mut sweep).await?;
                if let Some(why) = &sweep.lost {
                    return Err(HandlerError::retryable(format!(
                        "the proxy sweep stopped: {why}. Nothing more was deleted or queued; the next sweep looks again"
                    )));
                }
            }
            if sweep.report.left_alone > 0 {
                warn!(
                    event = "proxy_root_not_ours",
                    count = sweep.report.left_alone,
                    examples = ?sweep.report.left_alone_examples,
                    "files under the proxy root that are not in the proxy layout (or of a config that does not \
                     exist) were left alone; nothing but Almanac's proxies belongs there"
                );
            }
            let r = &sweep.report;
            info!(
                event = "proxies_swept",
                deleted = sweep.deleted,
                not_deleted = r.not_deleted_total,
                broken_assets = r.broken_assets,
                repairs_queued = r.repairs_queued,
                refused_configs = r.refused_configs.len(),
                "proxy sweep finished"
            );
            Ok(ProxySweepReport::swept(sweep.deleted, sweep.report))
        })
    }
}

impl<M: MaintenanceStore + 'static> ProxySweepHandler<M> {
    /// Lists the top of the proxy root: the folders of existing configs are answered (walked folder by folder
    /// next); anything else is walked only to be counted as not ours.
    async fn top_level(
        &self,
        root: &Arc<RootFolder>,
        configs: &HashSet<StorageConfigId>,
        ctx: &HandlerContext,
        sweep: &mut Sweep,
    ) -> Result<BTreeSet<StorageConfigId>, HandlerError> {
        let (root, configs, stop) = (root.clone(), configs.clone(), ctx.cancel.clone());
        let (found, not_ours, unreadable) = blocking(move || {
            let (mut found, mut not_ours, mut unreadable) = (BTreeSet::new(), NotOurs::default(), Vec::new());
            let entries = match list_folder(&root, b"") {
                Ok(entries) => entries.unwrap_or_default(),
                Err(e) => return (found, not_ours, vec![e]),
            };
            for entry in entries {
                let name = entry.name.as_bytes();
                let config = std::str::from_utf8(name).ok().and_then(|n| n.parse::<StorageConfigId>().ok());
                match config.filter(|c| configs.contains(c) && c.to_string().as_bytes() == name) {
                    Some(config) if entry.kind == EntryKind::Folder => {
                        found.insert(config);
                    }
                    _ => not_ours_beneath(&root, name, &entry, &stop, &mut not_ours, &mut unreadable),
                }
            }
            (found, not_ours, unreadable)
        })
        .await?;
        sweep.not_ours(not_ours);
        sweep.folders_not_read(unreadable);
        Ok(found)
    }

    /// One config's folder, one `<2 hex>` folder at a time (those on disk and those rows have files in), each
    /// only while the proxy root is still the one the sweep opened; then, when its proxies are checked, the
    /// repair of what was found broken, or the refusal.
    async fn config(
        &self,
        ctx: &HandlerContext,
        root: &Arc<RootFolder>,
        config: StorageConfigId,
        checked: bool,
        sweep: &mut Sweep,
    ) -> Result<(), HandlerError> {
        let on_disk = self.prefixes_on_disk(root, config, ctx, sweep).await?;
        let mut prefixes = on_disk.clone();
        if checked {
            prefixes.extend(self.store.proxy_folders(config).await.map_err(store_error)?);
        }
        let mut check = ConfigCheck::new(config);
        for prefix in prefixes.iter().filter(|p| ContentHash::is_prefix_folder(p.as_bytes())) {
            if ctx.cancel.is_cancelled() {
                return Err(HandlerError::cancelled());
            }
            if let Some(why) = sweep.at_start.changed() {
                check.lost(why.clone());
                sweep.lost = Some(why);
                break;
            }
            let was_there = on_disk.contains(prefix);
            self.folder(ctx, root, (config, prefix, was_there), checked.then_some(&mut check), sweep).await?;
            sweep.folders += 1;
            let progress = SweepProgress {
                folders: sweep.folders,
                deleted: sweep.deleted,
                broken_assets: sweep.report.broken_assets + check.broken_assets(),
            };
            report_progress(&ctx.progress, &progress);
        }
        if checked {
            check.settle(&*self.store, ctx, &self.guard, (root, &sweep.at_start), &mut sweep.report).await?;
        }
        Ok(())
    }

    /// The `<2 hex>` folders in the config's folder; anything else there is not ours.
    async fn prefixes_on_disk(
        &self,
        root: &Arc<RootFolder>,
        config: StorageConfigId,
        ctx: &HandlerContext,
        sweep: &mut Sweep,
    ) -> Result<BTreeSet<String>, HandlerError> {
        let (root, stop) = (root.clone(), ctx.cancel.clone());
        let (prefixes, not_ours, unreadable) = blocking(move || {
            let (mut prefixes, mut not_ours, mut unreadable) = (BTreeSet::new(), NotOurs::default(), Vec::new());
            let dir = config.to_string().into_bytes();
            let entries = match list_folder(&root, &dir) {
                Ok(entries) => entries.unwrap_or_default(),
                Err(e) => return (prefixes, not_ours, vec![e]),
            };
            for entry in entries {
                let name = entry.name.as_bytes();
                if entry.kind == EntryKind::Folder && ContentHash::is_prefix_folder(name) {
                    prefixes.insert(String::from_utf8_lossy(name).into_owned());
                } else {
                    not_ours_beneath(&root, &join_beneath(&dir, name), &entry, &stop, &mut not_ours, &mut unreadable);
                }
            }
            (prefixes, not_ours, unreadable)
        })
        .await?;
        sweep.not_ours(not_ours);
        sweep.folders_not_read(unreadable);
        Ok(prefixes)
    }

    /// One `<config id>/<2 hex>` folder (`was_there`: listed at its config's start): its rows read, then its
    /// files listed and compared with them; orphans deleted (each re-checked right before its unlink), suspects
    /// confirmed and handed to `check` with a file found whole and whether the folder vanished since the start.
    async fn folder(
        &self,
        ctx: &HandlerContext,
        root: &Arc<RootFolder>,
        (config, prefix, was_there): (StorageConfigId, &str, bool),
        check: Option<&mut ConfigCheck>,
        sweep: &mut Sweep,
    ) -> Result<(), HandlerError> {
        // Rows first, the listing after: a row is committed only after its file is written.
        let referenced: HashSet<String> =
            self.store.referenced_proxy_paths_in(config, prefix).await.map_err(store_error)?.into_iter().collect();
        let to_check = match &check {
            Some(_) => self.store.proxies_to_check_in(config, prefix).await.map_err(store_error)?,
            None => Vec::new(),
        };
        let (files, listed_whole, unreadable) = self.list(root, format!("{config}/{prefix}"), ctx).await?;
        sweep.folders_not_read(unreadable);
        let verdict = judge(&referenced, &to_check, &files, sweep.floor);
        let witness = to_check.iter().filter(|r| !verdict.suspects.contains(&r.asset_id)).find_map(|r| {
            let path = r.relative_path.as_ref()?;
            files.get(path).is_some_and(|f| f.kind == EntryKind::File).then(|| path.clone())
        });
        let vanished = was_there && files.is_empty() && {
            let (root, rel) = (root.clone(), format!("{config}/{prefix}"));
            blocking(move || folder_gone(&root, rel.as_bytes())).await?
        };
        drop(files);
        let mut not_ours = NotOurs::default();
        verdict.not_ours.into_iter().for_each(|rel| not_ours.push(rel));
        sweep.not_ours(not_ours);
        for orphan in &verdict.orphans {
            self.delete_orphan(root, orphan, sweep).await?;
        }
        // A folder not read whole is not judged: files it could not list are not missing.
        let Some(check) = check.filter(|_| listed_whole) else { return Ok(()) };
        check.checked += verdict.checked;
        if let Some(witness) = witness {
            check.witness(witness);
        }
        if verdict.suspects.is_empty() {
            return Ok(());
        }
        let suspects: Vec<_> = verdict.suspects.into_iter().collect();
        let rows = self.store.proxies_to_check_of(config, &suspects).await.map_err(store_error)?;
        let (root, floor) = (root.clone(), sweep.floor);
        let confirmed = blocking(move || confirm(&root, &rows, floor)).await?;
        sweep.folders_not_read(confirmed.unreadable);
        if vanished && !confirmed.broken.is_empty() {
            check.vanished(prefix);
        }
        check.add(confirmed.broken);
        Ok(())
    }

    /// Every file beneath one `<config id>/<2 hex>` folder, by path; whether every folder of it was read; what
    /// could not be read.
    async fn list(
        &self,
        root: &Arc<RootFolder>,
        folder: String,
        ctx: &HandlerContext,
    ) -> Result<(HashMap<String, Found>, bool, Vec<String>), HandlerError> {
        let (root, stop) = (root.clone(), ctx.cancel.clone());
        blocking(move || {
            let (mut files, mut unreadable) = (HashMap::new(), Vec::new());
            let complete = walk(
                &root,
                folder.into_bytes(),
                &stop,
                &mut |rel, entry| {
                    files.insert(String::from_utf8_lossy(&rel).into_owned(), Found::from(entry));
                },
                &mut |e| unreadable.push(e),
            );
            (files, complete, unreadable)
        })
        .await
    }

    /// Deletes an orphan: unless a row references it now (one may have been committed since the folder's rows
    /// were read), and only if, right before the unlink, it is still a regular file older than the floor (a
    /// retry of a crawl may have just rewritten it).
    async fn delete_orphan(&self, root: &Arc<RootFolder>, orphan: &str, sweep: &mut Sweep) -> Result<(), HandlerError> {
        let again =
            self.store.referenced_proxy_paths(std::slice::from_ref(&orphan.to_owned())).await.map_err(store_error)?;
        if !again.is_empty() {
            return Ok(());
        }
        let (root, rel, floor) = (root.clone(), orphan.to_owned(), sweep.floor);
        let removed = blocking(move || remove_old_file(&root, &rel, floor)).await?;
        match removed {
            Ok(Removal::Removed) => sweep.deleted += 1,
            Ok(Removal::Gone | Removal::Kept) => {}
            Err(e) => list_one(&mut sweep.report.not_deleted, &mut sweep.report.not_deleted_total, e),
        }
        Ok(())
    }
}

/// Counts what lies at `rel` (the entry `entry`) as not ours: a file, or every file beneath a folder.
fn not_ours_beneath(
    root: &RootFolder,
    rel: &[u8],
    entry: &Entry,
    stop: &tokio_util::sync::CancellationToken,
    not_ours: &mut NotOurs,
    unreadable: &mut Vec<String>,
) {
    if entry.kind != EntryKind::Folder {
        return not_ours.push(String::from_utf8_lossy(rel).into_owned());
    }
    walk(root, rel.to_vec(), stop, &mut |rel, _| not_ours.push(String::from_utf8_lossy(&rel).into_owned()), &mut |e| {
        unreadable.push(e)
    });
}

/// Runs blocking file-system work on its own thread.
pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, HandlerError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| HandlerError::retryable(format!("looking at the proxy root ended abnormally: {e}")))
}

#[cfg(test)]
mod tests {
    use almanac_media::ToolLimits;

    use super::*;

    #[test]
    fn the_sweep_leaves_files_younger_than_an_hour_or_the_longest_proxy_write_and_ten_minutes() {
        type Sweep = ProxySweepHandler<()>;
        let quick = ToolLimits { quick: Duration::from_secs(10), transcode: Duration::from_secs(60) };
        assert_eq!(Sweep::min_age_for(quick), Duration::from_secs(3600));
        // Default limits: three quick tools (6 min) and an hour's transcode, plus ten minutes.
        assert_eq!(Sweep::min_age_for(ToolLimits::default()), Duration::from_secs(360 + 3600 + 600));
    }
}
