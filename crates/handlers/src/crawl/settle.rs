//! After the files: what the walk did not find (promoted to a surviving copy, or soft-deleted, but never
//! past the mass-deletion guard), the root's identity for the next crawl, and Live Photo pairs.

use std::collections::{HashMap, HashSet};

use almanac_domain::{
    AssetId, CrawlArgs, StorageConfig,
    ports::{CatalogueStore, Fence, FileFacts, KnownFile},
};
use almanac_executor::HandlerError;
use tokio_util::sync::CancellationToken;

use super::report::{Counters, bump};
use super::rules::{LIVE_PHOTO_MAX_GAP, MassDeletionGuard, pair_live_photos};
use super::walk::Seen;
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
}

/// What the catalogue knew (`known`, by path) that the walk did not find (`seen`): active assets and extra
/// paths. An asset whose own path vanished while one of its copies is still there is not vanished: it moves
/// to the copy (a promotion) instead.
pub(super) fn unseen(known: &HashMap<Vec<u8>, KnownFile>, seen: &HashSet<Seen>) -> Unseen {
    let mut out = Unseen::default();
    let mut surviving_copies: HashMap<AssetId, &Vec<u8>> = HashMap::new();
    for (path, k) in known.iter().filter(|(_, k)| k.extra) {
        if seen.contains(&Seen::Extra(path.clone())) {
            surviving_copies.entry(k.asset_id).or_insert(path);
        } else {
            out.extra_paths.push(path.clone());
        }
    }
    for k in known.values().filter(|k| !k.extra && !seen.contains(&Seen::Asset(k.asset_id))) {
        match surviving_copies.get(&k.asset_id) {
            Some(path) => {
                let copy = &known[*path].facts;
                let facts = FileFacts { file_path: path.to_vec(), display_path: display(path), ..copy.clone() };
                out.promotions.push((k.asset_id, facts));
            }
            None => out.assets.push(k.asset_id),
        }
    }
    out
}

/// Where the settling writes, and what it answers to.
pub(super) struct Settle<'a, C> {
    pub catalogue: &'a C,
    pub fence: Fence,
    pub storage: &'a StorageConfig,
    pub cancel: &'a CancellationToken,
}

impl<C: CatalogueStore> Settle<'_, C> {
    /// Moves assets to their surviving copies and soft-deletes what vanished, then records whether the root is
    /// a mount point. Refused as a whole, before anything is written, when more vanished than `guard` allows
    /// of `active` assets and `args` does not confirm it: a refused crawl changes nothing at all. Answers how
    /// many assets were soft-deleted.
    pub async fn vanished(
        &self,
        unseen: Unseen,
        active: usize,
        guard: &MassDeletionGuard,
        args: CrawlArgs,
        is_mount_point: bool,
        counters: &Counters,
    ) -> Result<u64, HandlerError> {
        let (active, gone) = (active as u64, unseen.assets.len() as u64);
        if !args.allow_mass_deletion && guard.refuses(active, gone) {
            return Err(HandlerError::retryable(format!(
                "refusing to soft-delete {gone} of {active} assets under {}: {} vanished at once, which usually \
                 means a share is only partly mounted. Nothing was deleted. If the files really are gone, confirm \
                 with: almanac-worker enqueue crawl --config {} --payload '{{\"allow_mass_deletion\": true}}'",
                self.storage.root_path.display(),
                guard.describe(),
                self.storage.id,
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
        if self.storage.root_is_mount_point != Some(is_mount_point) {
            self.catalogue.record_root_identity(self.fence, config, is_mount_point).await.map_err(catalogue_error)?;
        }
        Ok(soft_deleted)
    }

    /// Pairs Live Photos among the config's candidates; answers how many pairs were made.
    pub async fn pair_live_photos(&self) -> Result<usize, HandlerError> {
        if self.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        let candidates = self.catalogue.pairing_candidates(self.storage.id).await.map_err(catalogue_error)?;
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

    fn known(path: &str, asset: AssetId, extra: bool) -> (Vec<u8>, KnownFile) {
        let facts = FileFacts {
            file_path: Vec::new(),
            display_path: String::new(),
            size: 3,
            mtime: chrono::DateTime::UNIX_EPOCH,
        };
        (
            path.as_bytes().to_vec(),
            KnownFile { asset_id: asset, facts, extra, proxies_complete: true, sidecar: None, proxy_files: Vec::new() },
        )
    }

    #[test]
    fn a_vanished_asset_moves_to_a_surviving_copy_and_only_the_rest_is_unseen() {
        let (kept, moved, gone) = (AssetId::new(), AssetId::new(), AssetId::new());
        let known: HashMap<_, _> = [
            known("kept.jpg", kept, false),
            known("moved.jpg", moved, false),
            known("copy/moved.jpg", moved, true),
            known("gone.jpg", gone, false),
            known("copy/gone.jpg", gone, true),
        ]
        .into();
        let seen: HashSet<_> = [Seen::Asset(kept), Seen::Extra(b"copy/moved.jpg".to_vec())].into();
        let unseen = unseen(&known, &seen);
        assert_eq!(unseen.assets, vec![gone]);
        assert_eq!(unseen.extra_paths, vec![b"copy/gone.jpg".to_vec()]);
        assert_eq!(unseen.promotions.len(), 1);
        let (asset, facts) = &unseen.promotions[0];
        assert_eq!(
            (*asset, facts.file_path.as_slice(), facts.display_path.as_str()),
            (moved, &b"copy/moved.jpg"[..], "copy/moved.jpg")
        );
        assert_eq!((facts.size, facts.mtime), (3, chrono::DateTime::UNIX_EPOCH), "the copy's own facts");
    }
}
