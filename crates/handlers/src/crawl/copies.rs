//! A crawl of some folders sees only the copies inside them: before an asset whose files there vanished is
//! soft-deleted, its copies elsewhere in the config are looked at, and it moves to the first that is still
//! there as it was recorded, as a crawl of the whole root would move it (a file manager moving a file across
//! file systems copies it and then deletes it, and a watcher may see the two in different windows).

use std::collections::{HashMap, HashSet};

use almanac_domain::{
    AssetId, StorageConfigId,
    ports::{CatalogueStore, FileFacts, KnownFile},
};
use almanac_executor::HandlerError;
use almanac_media::{OpenError, RootFolder};

use super::scope::CrawlScope;
use super::settle::Unseen;
use super::{catalogue_error, display};

/// How many vanished assets' copies are loaded and looked at at once.
const ASSETS_AT_ONCE: usize = 1_000;

/// Moves the assets of `unseen` that have a copy outside `scope`'s folders still there (opened beneath the
/// root, no link followed, a regular file of the size and mtime recorded) to their first such copy in path
/// order; only the others vanish. Copies inside the folders were judged by the walk already.
pub(super) async fn outside_the_folders<C: CatalogueStore>(
    catalogue: &C,
    config: StorageConfigId,
    root: &std::sync::Arc<RootFolder>,
    scope: &std::sync::Arc<CrawlScope>,
    unseen: &mut Unseen,
) -> Result<(), HandlerError> {
    let vanishing = std::mem::take(&mut unseen.assets);
    for chunk in vanishing.chunks(ASSETS_AT_ONCE) {
        let copies = catalogue.extra_paths_of(config, chunk).await.map_err(catalogue_error)?;
        let (root, scope) = (root.clone(), scope.clone());
        let found =
            tokio::task::spawn_blocking(move || almanac_media::gently(|| first_still_there(&root, &scope, copies)))
                .await
                .map_err(|e| HandlerError::retryable(format!("looking at the copies ended abnormally: {e}")))?;
        let (found, unsure) = found;
        for asset in chunk {
            match found.get(asset) {
                Some(copy) => unseen.promotions.push((*asset, copy.clone())),
                // A copy that could not be looked at (no rights, an I/O error) may be all that is left: kept.
                None if unsure.contains(asset) => {}
                None => unseen.assets.push(*asset),
            }
        }
    }
    Ok(())
}

/// Of `copies` (in path order), each asset's first copy outside `scope` that is still there as recorded, and the
/// assets with a copy that could not be looked at (the operating system refused, or failed: not known to be gone)
/// (blocking).
fn first_still_there(
    root: &RootFolder,
    scope: &CrawlScope,
    copies: Vec<KnownFile>,
) -> (HashMap<AssetId, FileFacts>, HashSet<AssetId>) {
    let (mut found, mut unsure) = (HashMap::new(), HashSet::new());
    for copy in copies {
        if found.contains_key(&copy.asset_id) || scope.contains(&copy.facts.file_path) {
            continue;
        }
        let now = match root.open_file(&copy.facts.file_path) {
            Ok(open) => open.size_and_mtime().ok(),
            Err(OpenError::Io { .. }) => {
                unsure.insert(copy.asset_id);
                None
            }
            // Gone, a link or a folder now, or something not a file: not this copy any more.
            Err(_) => None,
        };
        if now == Some((copy.facts.size, copy.facts.mtime)) {
            let facts = FileFacts { display_path: display(&copy.facts.file_path), ..copy.facts };
            found.insert(copy.asset_id, facts);
        }
    }
    (found, unsure)
}
