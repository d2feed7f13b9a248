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
use almanac_media::{OpenError, RootFolder, split_parent};

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::mounts::Mounts;
use super::root::looked_at_while_it_answers;
use super::scope::{CrawlScope, not_mounted_on_the_way};
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
    stop: (&CancellationToken, Duration),
) -> Result<(), HandlerError> {
    let vanishing = std::mem::take(&mut unseen.assets);
    for chunk in vanishing.chunks(ASSETS_AT_ONCE) {
        let copies = catalogue.extra_paths_of(config, chunk).await.map_err(catalogue_error)?;
        let (watched, root, scope) = (root, root.clone(), scope.clone());
        let look = move || almanac_media::gently(|| first_still_there(&root, &scope, copies));
        let found = looked_at_while_it_answers(stop, watched, "looking at the copies", look).await?;
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

/// What looking at a recorded copy found.
enum Look {
    /// Still there as recorded (a regular file of the size and mtime recorded), opened beneath the root.
    Same(FileFacts),
    /// Gone, or another file now: no longer this copy.
    Gone,
    /// Could not be looked at (the operating system refused, or failed): not known to be gone.
    Unsure,
}

/// Looks at `copy` beneath the root, no link followed (blocking). A copy recorded under a folder the walk passes
/// over (recorded before its name joined the list, as QNAP's `@Recently-Snapshot` did) is no place for an asset:
/// gone, whatever is there.
fn look(root: &RootFolder, mounts: &Mounts, copy: &KnownFile) -> Look {
    if super::rules::passes_over(&copy.facts.file_path) {
        return Look::Gone;
    }
    // On a disk that is not mounted now: not known to be gone.
    if not_mounted_on_the_way(root, split_parent(&copy.facts.file_path).0, mounts).is_some() {
        return Look::Unsure;
    }
    let now = match root.open_file(&copy.facts.file_path) {
        Ok(open) => open.size_and_mtime().ok(),
        Err(OpenError::Io { .. }) => return Look::Unsure,
        // Gone, a link or a folder now, or something not a file: not this copy any more.
        Err(_) => None,
    };
    if now == Some((copy.facts.size, copy.facts.mtime)) {
        Look::Same(FileFacts { display_path: display(&copy.facts.file_path), ..copy.facts.clone() })
    } else {
        Look::Gone
    }
}

/// Of `copies` (in path order), each asset's first copy outside `scope` that is still there as recorded, and the
/// assets with a copy that could not be looked at (blocking).
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
        match look(root, scope.mounts(), &copy) {
            Look::Same(facts) => {
                found.insert(copy.asset_id, facts);
            }
            Look::Unsure => {
                unsure.insert(copy.asset_id);
            }
            Look::Gone => {}
        }
    }
    (found, unsure)
}

/// Looks at the copies of the assets `unseen` holds (copies under folders the walk did not walk), in path order:
/// an asset moves to the first still there as recorded; one with a copy that could not be looked at stays held
/// (kept as it is, and weighed as vanished by the guard); one whose copies are all gone vanishes. A copy found
/// gone is dropped (a loop's stale copy of a file deleted since).
pub(super) async fn look_at_held(
    root: &std::sync::Arc<RootFolder>,
    scope: &std::sync::Arc<CrawlScope>,
    unseen: &mut Unseen,
    stop: (&CancellationToken, Duration),
) -> Result<(), HandlerError> {
    if unseen.held.is_empty() {
        return Ok(());
    }
    let (watched, root, scope, held) = (root, root.clone(), scope.clone(), std::mem::take(&mut unseen.held));
    let looked = looked_at_while_it_answers(stop, watched, "looking at the copies", move || {
        almanac_media::gently(|| {
            held.into_iter()
                .map(|(asset, copies)| {
                    let mut gone = Vec::new();
                    let mut unsure = false;
                    for copy in copies {
                        match look(&root, scope.mounts(), &copy) {
                            Look::Same(facts) => return (asset, Some(facts), gone, false),
                            Look::Gone => gone.push(copy.facts.file_path.clone()),
                            Look::Unsure => unsure = true,
                        }
                    }
                    (asset, None, gone, unsure)
                })
                .collect::<Vec<_>>()
        })
    })
    .await?;
    for (asset, found, gone, unsure) in looked {
        unseen.extra_paths.extend(gone);
        match found {
            Some(facts) => unseen.promotions.push((asset, facts)),
            None if unsure => unseen.held.push((asset, Vec::new())),
            None => unseen.assets.push(asset),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy still there as recorded is the same; one under a folder the walk passes over is gone, though it is
    /// there too.
    #[test]
    fn a_copy_under_a_folder_the_walk_passes_over_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut copies = Vec::new();
        for rel in ["2019/a.jpg", "@Recently-Snapshot/GMT+01_2024-01-01/2019/a.jpg"] {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"photo").unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            // As the catalogue keeps it: to the microsecond.
            let mtime = chrono::DateTime::<chrono::Utc>::from(meta.modified().unwrap());
            let mtime = chrono::DateTime::from_timestamp_micros(mtime.timestamp_micros()).unwrap();
            let facts =
                FileFacts { file_path: rel.as_bytes().to_vec(), display_path: rel.into(), size: meta.len(), mtime };
            copies.push(KnownFile {
                asset_id: AssetId::new(),
                facts,
                extra: true,
                proxies_complete: true,
                date_current: true,
                sidecar: None,
            });
        }
        let root = RootFolder::open(dir.path()).unwrap();
        let mounts = Mounts::default();
        assert!(matches!(look(&root, &mounts, &copies[0]), Look::Same(_)), "the copy in the library is there");
        assert!(matches!(look(&root, &mounts, &copies[1]), Look::Gone));
    }
}
