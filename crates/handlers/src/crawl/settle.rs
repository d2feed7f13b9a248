//! After the files: what the walk did not find (promoted to a surviving copy, or soft-deleted, but never
//! past the mass-deletion guard), the root's identity for the next crawl, and Live Photo pairs.

use std::collections::{HashMap, HashSet};

use almanac_domain::{
    AssetId, CrawlArgs, StorageConfig,
    ports::{CatalogueStore, Fence, FileFacts, KnownFile},
};
use almanac_executor::HandlerError;
use tokio_util::sync::CancellationToken;

use super::merge::Leftover;
use super::report::{Counters, bump};
use super::rules::{LIVE_PHOTO_MAX_GAP, MassDeletionGuard, pair_live_photos};
use super::walk::{FolderNotWalked, Seen};
use super::{catalogue_error, display};

/// What a complete walk did not find.
#[derive(Debug, Default)]
pub(super) struct Unseen {
    /// Active assets whose files are gone.
    pub assets: Vec<AssetId>,
    /// Extra paths that are gone.
    pub extra_paths: Vec<Vec<u8>>,
    /// Assets whose own path is gone but a copy remains: they move to the copy.
    pub promotions: Vec<(AssetId, FileFacts)>,
    /// Active assets whose own path lies under a folder the walk did not walk: kept, and not weighed by the
    /// mass-deletion guard.
    pub kept: usize,
    /// Assets whose own path vanished with no copy found where the walk looked, but with copies under folders it
    /// did not walk: each is looked at (`copies::look_at_held`), and the asset moves to the first still there as
    /// recorded, is kept while one cannot be looked at, or vanishes when all are gone.
    pub held: Vec<(AssetId, Vec<KnownFile>)>,
}

impl Unseen {
    /// Forgets the assets marked `seen` since this was made: the held-back replacements, written after it, may
    /// have placed an asset it counted as vanished (a file moved onto another asset's path, its old path gone
    /// meanwhile). The guard weighed the larger count.
    pub(super) fn forget_seen(&mut self, seen: &HashSet<Seen>) {
        let seen_asset = |a: &AssetId| seen.contains(&Seen::Asset(*a));
        self.assets.retain(|a| !seen_asset(a));
        self.promotions.retain(|(a, _)| !seen_asset(a));
        self.held.retain(|(a, _)| !seen_asset(a));
    }
}

/// What the catalogue knew that the crawl did not find: of the known files the walk did not find unchanged
/// (`leftover`), those processing did not find either (`seen`). An asset whose own path vanished while one of
/// its copies is still there is not vanished: it moves to the copy (a promotion; the first copy in path order).
/// Only a copy processing found to be the same asset's counts: one whose content now belongs to another asset
/// is that asset's path, never a survivor of the first. No extra path processing found, for any asset, is
/// dropped. What lies under a folder the walk did not walk (`not_walked`: one it could not read, or one it passed
/// over as a folder above it again) was not looked for: it is kept as it is. An asset that vanished with no copy
/// surviving where the walk looked, but with copies there, is `held` until they are looked at one by one.
pub(super) fn unseen(leftover: Leftover, seen: &HashSet<Seen>, not_walked: &[&FolderNotWalked]) -> Unseen {
    let mut out = Unseen::default();
    let Leftover { not_unchanged, unchanged_extras, .. } = leftover;
    let not_looked_for = |k: &KnownFile| not_walked.iter().any(|u| u.holds(&k.facts.file_path));
    let (unsure, not_unchanged): (Vec<KnownFile>, Vec<KnownFile>) = not_unchanged.into_iter().partition(not_looked_for);
    out.kept = unsure.iter().filter(|k| !k.extra).count();
    let mut copies_not_looked_at: HashMap<AssetId, Vec<KnownFile>> = HashMap::new();
    for copy in unsure.into_iter().filter(|k| k.extra) {
        copies_not_looked_at.entry(copy.asset_id).or_default().push(copy);
    }
    let (extras, own): (Vec<KnownFile>, Vec<KnownFile>) = not_unchanged.into_iter().partition(|k| k.extra);
    let seen_extras: HashSet<&[u8]> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Extra(path, _) => Some(path.as_slice()),
            Seen::Asset(_) => None,
        })
        .collect();
    let mut surviving_copies: HashMap<AssetId, KnownFile> = HashMap::new();
    let found_again = extras.iter().filter(|k| seen.contains(&Seen::Extra(k.facts.file_path.clone(), k.asset_id)));
    for copy in unchanged_extras.iter().chain(found_again) {
        let earlier = surviving_copies.get(&copy.asset_id).is_some_and(|c| c.facts.file_path <= copy.facts.file_path);
        if !earlier {
            surviving_copies.insert(copy.asset_id, copy.clone());
        }
    }
    for k in extras {
        if !seen_extras.contains(k.facts.file_path.as_slice()) {
            out.extra_paths.push(k.facts.file_path);
        }
    }
    for k in own.into_iter().filter(|k| !seen.contains(&Seen::Asset(k.asset_id))) {
        match (surviving_copies.get(&k.asset_id), copies_not_looked_at.remove(&k.asset_id)) {
            (Some(copy), _) => {
                let facts = FileFacts { display_path: display(&copy.facts.file_path), ..copy.facts.clone() };
                out.promotions.push((k.asset_id, facts));
            }
            (None, Some(mut copies)) => {
                copies.sort_by(|a, b| a.facts.file_path.cmp(&b.facts.file_path));
                out.held.push((k.asset_id, copies));
            }
            (None, None) => out.assets.push(k.asset_id),
        }
    }
    out
}

/// What the mass-deletion guard weighs what vanished against: the library's active assets (its minimum), and of
/// them those the walk looked for (the share that may vanish).
#[derive(Debug, Clone, Copy)]
pub(super) struct Weighed {
    pub library: usize,
    pub looked_for: usize,
}

/// Where the settling writes, and what it answers to.
pub(super) struct Settle<'a, C> {
    pub catalogue: &'a C,
    pub fence: Fence,
    pub storage: &'a StorageConfig,
    pub cancel: &'a CancellationToken,
}

impl<C: CatalogueStore> Settle<'_, C> {
    /// Records whether the root is a mount point and which folders beneath it are (`root_identity`; `None`: not
    /// walked whole, so not known), then moves assets to their surviving copies and soft-deletes what vanished.
    /// Refused as a whole, before any asset is written, when more vanished than `guard` allows of `active` assets
    /// and `args` does not confirm it: a refused crawl changes no asset (the record is written all the same).
    /// Answers how many assets were soft-deleted.
    pub async fn vanished(
        &self,
        unseen: Unseen,
        active: Weighed,
        guard: &MassDeletionGuard,
        args: &CrawlArgs,
        root_identity: Option<(bool, Vec<Vec<u8>>)>,
        counters: &Counters,
    ) -> Result<u64, HandlerError> {
        // What the walk of the whole root found the root and the folders mounted beneath it to be, recorded even if
        // the guard refuses below: a recorded folder leaves the record only once a walk saw it as an ordinary folder
        // with the crawl confirmed, or its parent gone (`Mounts::to_record`).
        let recorded = (self.storage.root_is_mount_point, &self.storage.mounts_below);
        if let Some((is_mount_point, mounts)) = root_identity.filter(|(m, b)| recorded != (Some(*m), b)) {
            let record = self.catalogue.record_root_identity(self.fence, self.storage.id, is_mount_point, &mounts);
            record.await.map_err(catalogue_error)?;
        }
        // An asset kept only because a copy could not be looked at counts as vanished for the guard.
        let (library, active) = (active.library as u64, active.looked_for as u64);
        let gone = (unseen.assets.len() + unseen.held.len()) as u64;
        // Replacements were weighed with what vanished before any was written (`replace_held_back`).
        if !args.allow_mass_deletion && guard.refuses_of(library, active, gone) {
            return Err(HandlerError::retryable(format!(
                "refusing to soft-delete {gone} of {active} assets under {}: {} vanished at once, which usually \
                 means a share is only partly mounted. Nothing was deleted. If the files really are gone, {}",
                self.storage.root_path.display(),
                guard.describe(),
                super::rules::how_to_confirm(self.storage.id),
            )));
        }
        if self.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        for (asset, copy) in &unseen.promotions {
            self.catalogue.relocate(self.fence, *asset, copy).await.map_err(catalogue_error)?;
            bump(&counters.moved);
        }
        let config = self.storage.id;
        let soft_deleted = self
            .catalogue
            .soft_delete(self.fence, config, &unseen.assets, &unseen.extra_paths)
            .await
            .map_err(catalogue_error)?;
        Ok(soft_deleted)
    }

    /// Pairs Live Photos among the config's candidates in the folders `under` (each with everything below it;
    /// `None`: the whole config); answers how many pairs were made.
    pub async fn pair_live_photos(&self, under: Option<&[Vec<u8>]>) -> Result<usize, HandlerError> {
        if self.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        let candidates = self.catalogue.pairing_candidates(self.storage.id, under).await.map_err(catalogue_error)?;
        let pairs = pair_live_photos(&candidates, LIVE_PHOTO_MAX_GAP);
        for (still, motion) in &pairs {
            self.catalogue.pair(self.fence, *still, *motion).await.map_err(catalogue_error)?;
        }
        Ok(pairs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(path: &str, asset: AssetId, extra: bool) -> KnownFile {
        let facts = FileFacts {
            file_path: path.as_bytes().to_vec(),
            display_path: String::new(),
            size: 3,
            mtime: chrono::DateTime::UNIX_EPOCH,
        };
        KnownFile { asset_id: asset, facts, extra, proxies_complete: true, date_current: true, sidecar: None }
    }

    #[test]
    fn a_vanished_asset_moves_to_a_surviving_copy_and_only_the_rest_is_unseen() {
        let (moved, gone, touched, copied) = (AssetId::new(), AssetId::new(), AssetId::new(), AssetId::new());
        // What the walk did not find unchanged; `copy/moved.jpg` and `b/moved.jpg` it found unchanged.
        let leftover = Leftover {
            not_unchanged: vec![
                known("copy/gone.jpg", gone, true),
                known("copy2/copied.jpg", copied, true),
                known("copied.jpg", copied, false),
                known("gone.jpg", gone, false),
                known("moved.jpg", moved, false),
                known("touched.jpg", touched, false),
            ],
            unchanged_extras: vec![known("copy/moved.jpg", moved, true), known("b/moved.jpg", moved, true)],
            active: 5,
        };
        // Processing found the touched asset at its path, and the changed copy of `copied` again.
        let seen: HashSet<_> = [Seen::Asset(touched), Seen::Extra(b"copy2/copied.jpg".to_vec(), copied)].into();
        let unseen = unseen(leftover, &seen, &[]);
        assert_eq!(unseen.assets, vec![gone]);
        assert_eq!(unseen.extra_paths, vec![b"copy/gone.jpg".to_vec()]);
        let promoted: Vec<_> = unseen.promotions.iter().map(|(a, f)| (*a, f.display_path.as_str())).collect();
        assert_eq!(promoted, [(copied, "copy2/copied.jpg"), (moved, "b/moved.jpg")], "the first copy in path order");
        let (_, facts) = &unseen.promotions[1];
        assert_eq!(facts.file_path, b"b/moved.jpg");
        assert_eq!((facts.size, facts.mtime), (3, chrono::DateTime::UNIX_EPOCH), "the copy's own facts");
    }

    #[test]
    fn a_copy_found_to_be_another_asset_s_keeps_neither_the_vanished_asset_alive_nor_is_dropped() {
        let (gone, other) = (AssetId::new(), AssetId::new());
        // `gone`'s own path vanished; its copy now holds `other`'s content, and processing recorded it so.
        let leftover = Leftover {
            not_unchanged: vec![known("backup/IMG.jpg", gone, true), known("IMG.jpg", gone, false)],
            unchanged_extras: vec![],
            active: 2,
        };
        let seen: HashSet<_> = [Seen::Extra(b"backup/IMG.jpg".to_vec(), other)].into();
        let unseen = unseen(leftover, &seen, &[]);
        assert_eq!(unseen.assets, vec![gone], "no copy of its own survives");
        assert!(unseen.promotions.is_empty(), "never moved onto the other asset's content");
        assert!(unseen.extra_paths.is_empty(), "the path is the other asset's now, and kept");
    }

    fn unreadable(rel: &str) -> FolderNotWalked {
        FolderNotWalked { rel: rel.as_bytes().to_vec(), path: format!("/lib/{rel}"), reason: "EIO".into() }
    }

    /// What lies under a folder the walk could not read is kept: the folder's own files and copies, and those of
    /// folders below it; what vanished elsewhere is unseen as before (a name that only begins like the folder's
    /// is elsewhere). A root that could not be read keeps everything.
    #[test]
    fn what_lies_under_a_folder_the_walk_could_not_read_is_kept() {
        let (a, b, c, d) = (AssetId::new(), AssetId::new(), AssetId::new(), AssetId::new());
        let leftover = || Leftover {
            not_unchanged: vec![
                known("nas/x.jpg", a, false),
                known("nas/deep/y.jpg", b, false),
                known("nas/copy/x.jpg", a, true),
                known("nasty.jpg", c, false),
                known("other/z.jpg", d, false),
            ],
            unchanged_extras: vec![],
            active: 4,
        };
        let seen = HashSet::new();
        let nas = unreadable("nas");
        let kept = unseen(leftover(), &seen, &[&nas]);
        assert_eq!(kept.assets, vec![c, d], "under `nas` kept; `nasty.jpg` and `other/` unseen");
        assert!(kept.extra_paths.is_empty(), "the copy under `nas` kept");
        assert_eq!(kept.kept, 2, "two own paths not looked for");
        let (deep, other) = (unreadable("nas/deep"), unreadable("other"));
        assert_eq!(unseen(leftover(), &seen, &[&deep, &other]).assets, vec![a, c]);
        let everything = unreadable("");
        let root = unseen(leftover(), &seen, &[&everything]);
        assert!(root.assets.is_empty() && root.extra_paths.is_empty(), "nothing when the root could not be read");
        assert_eq!(root.kept, 4);
        // `a`'s own path vanished where the walk looked, its only copy lies where it could not: held, to be looked at.
        let copy = unreadable("nas/copy");
        let held = unseen(leftover(), &seen, &[&copy]);
        assert_eq!(held.assets, vec![b, c, d], "`a` held for its copy");
        let paths: Vec<_> = held.held.iter().map(|(a, copies)| (*a, copies[0].facts.file_path.clone())).collect();
        assert_eq!(paths, [(a, b"nas/copy/x.jpg".to_vec())]);
        assert!(held.promotions.is_empty() && held.extra_paths.is_empty());
    }
}
