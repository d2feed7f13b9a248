//! The crawl's pure decisions, kept apart from I/O so each can be tested (and mutation-tested) on its own.

use std::collections::HashMap;
use std::time::Duration;

use almanac_domain::{
    AssetId, CrawlArgs, MediaType,
    ports::{Attempt, PairingCandidate},
};

/// Folders NAS systems and desktops keep beside the originals, never media of the user's.
const SYSTEM_FOLDERS: [&[u8]; 8] = [
    b"@eaDir",
    b"#recycle",
    b"#snapshot",
    b".thumbnails",
    b"lost+found",
    b"@Recycle",
    b"$RECYCLE.BIN",
    // QNAP's snapshots of a share, when shown in it: every photo again, once for each snapshot.
    b"@Recently-Snapshot",
];

/// Whether a directory entry is skipped: hidden names (which covers `.Trash-1000`, `.DS_Store`, and our own
/// temporary files) and NAS system folders.
pub fn is_skipped_name(name: &[u8]) -> bool {
    name.first() == Some(&b'.') || SYSTEM_FOLDERS.contains(&name)
}

/// Whether the crawl reads a file of this name: a media file, or an XMP sidecar beside one. Whatever happens to
/// any other file (an app's database or its journal beside the photos, a text, a temporary file) changes nothing
/// the catalogue holds: the walk passes it over, and the watchers ask for no crawl for it.
pub fn reads_file_named(name: &[u8]) -> bool {
    almanac_media::is_sidecar_name(name) || almanac_media::is_media_name(std::os::unix::ffi::OsStrExt::from_bytes(name))
}

/// Whether a path beneath the root (its names joined by `/`) has a name the walk skips: it lies where the walk
/// never goes.
pub fn passes_over(path: &[u8]) -> bool {
    path.split(|b| *b == b'/').any(is_skipped_name)
}

/// The mass-deletion guard: in a library of `min_assets` or more active assets, a crawl refuses to soft-delete
/// more than `max_percent` of them at once, unless the operator confirmed it. (A smaller library may lose most
/// of its files; losing all of them is refused by the crawl's empty-walk check.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MassDeletionGuard {
    /// Libraries smaller than this are not guarded.
    pub min_assets: u64,
    /// The largest share of the active assets, in percent, that one crawl soft-deletes unconfirmed.
    pub max_percent: u8,
}

impl Default for MassDeletionGuard {
    fn default() -> Self {
        Self { min_assets: 10, max_percent: 50 }
    }
}

impl MassDeletionGuard {
    /// Whether soft-deleting `unseen` of `active` assets needs the operator's confirmation.
    pub fn refuses(&self, active: u64, unseen: u64) -> bool {
        self.refuses_of(active, active, unseen)
    }

    /// [`Self::refuses`] for a walk that looked for `looked_for` of a library of `library` active assets (the rest
    /// lie under folders it did not walk): the minimum is the library's, the share is of those looked for.
    pub fn refuses_of(&self, library: u64, looked_for: u64, unseen: u64) -> bool {
        library >= self.min_assets && unseen * 100 > looked_for * u64::from(self.max_percent)
    }

    /// The rule in words, for the refusal's message.
    pub fn describe(&self) -> String {
        format!("more than {}% of a library of {} or more assets", self.max_percent, self.min_assets)
    }
}

/// What a hashed file is, given what the catalogue knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The file at a known path with its known content (only size or mtime changed).
    Touched(AssetId),
    /// Known content whose old path is gone: the asset moves here.
    Moved(AssetId),
    /// Known content whose old path still exists: this path is recorded as an extra path of it.
    Copy(AssetId),
    /// Content of a soft-deleted asset: it is revived here.
    Revived(AssetId),
    /// New content.
    New,
}

/// Decides a hashed file's placement.
///
/// - `at_path`: the active asset whose own path this is and its content matches (`Some(id)` only when the
///   known content equals the new hash);
/// - `active`: the active asset of the config with this content, and whether its own path still exists;
/// - `soft_deleted`: a soft-deleted asset with this content.
pub fn place(
    at_path_same_content: Option<AssetId>,
    active: Option<(AssetId, bool)>,
    soft_deleted: Option<AssetId>,
) -> Placement {
    match (at_path_same_content, active, soft_deleted) {
        (Some(id), _, _) => Placement::Touched(id),
        (None, Some((id, true)), _) => Placement::Copy(id),
        (None, Some((id, false)), _) => Placement::Moved(id),
        (None, None, Some(id)) => Placement::Revived(id),
        (None, None, None) => Placement::New,
    }
}

/// The most capture times of a Live Photo's halves may differ when neither has a content identifier.
pub const LIVE_PHOTO_MAX_GAP: Duration = Duration::from_secs(3);

/// Pairs Live Photos: a still and a video with the same base name in one folder, whose content identifiers
/// match or, when either lacks one, whose capture times are within `max_gap`. Each asset pairs at most once.
pub fn pair_live_photos(candidates: &[PairingCandidate], max_gap: Duration) -> Vec<(AssetId, AssetId)> {
    /// Stills and videos of one (folder, lower-case base name).
    type Halves<'a> = (Vec<&'a PairingCandidate>, Vec<&'a PairingCandidate>);
    let mut groups: HashMap<(&[u8], Vec<u8>), Halves<'_>> = HashMap::new();
    for c in candidates {
        let (dir, stem) = split_stem(&c.file_path);
        let entry = groups.entry((dir, stem.to_ascii_lowercase())).or_default();
        match c.media_type {
            MediaType::Image => entry.0.push(c),
            MediaType::Video => entry.1.push(c),
        }
    }
    let gap = chrono::Duration::from_std(max_gap).unwrap_or(chrono::Duration::MAX);
    let mut pairs = Vec::new();
    for (stills, mut videos) in groups.into_values() {
        for still in stills {
            let matches = |v: &&PairingCandidate| match (&still.content_id, &v.content_id) {
                (Some(a), Some(b)) => a == b,
                _ => (still.captured_at - v.captured_at).abs() <= gap,
            };
            if let Some(pos) = videos.iter().position(matches) {
                pairs.push((still.asset_id, videos.remove(pos).asset_id));
            }
        }
    }
    pairs.sort();
    pairs
}

/// Splits a relative path into its folder and its file name without extension.
fn split_stem(path: &[u8]) -> (&[u8], &[u8]) {
    let (dir, name) = almanac_media::split_parent(path);
    let stem = match name.iter().rposition(|b| *b == b'.') {
        Some(0) | None => name,
        Some(i) => &name[..i],
    };
    (dir, stem)
}

/// How an operator confirms deletions a crawl of `config` refused, for its refusals: a new crawl, confirmed.
pub fn how_to_confirm(config: almanac_domain::StorageConfigId) -> String {
    format!(
        "confirm with: almanac-worker enqueue crawl --config {config} --payload '{{\"allow_mass_deletion\": true}}' \
         (a confirmation holds for the first attempt of its crawl)"
    )
}

/// Why a crawl stops holding back files that would replace assets ([`super::ingest::Run::hold_back`]): `n` of them
/// under `root`, more than `guard` lets go at once.
pub(super) fn too_many_replaced(
    n: u64,
    root: &std::path::Path,
    guard: &MassDeletionGuard,
    config: almanac_domain::StorageConfigId,
) -> String {
    format!(
        "refusing to go on: {n} files under {} hold other content than the assets whose paths they have, {} at \
         once: another disk or card mounted where the library was, its files under the same names? Nothing was \
         replaced or deleted. If the files really were replaced (edited in place), {}",
        root.display(),
        guard.describe(),
        how_to_confirm(config)
    )
}

/// An operator's confirmation of deletions (`allow_mass_deletion`) holds for the first attempt of its crawl only:
/// that one runs on the library the operator was told about. A later attempt of the same item (after a retry, an
/// outage, a lost lease or a shutdown) may meet another library, a share gone meanwhile, so it is guarded as if
/// unconfirmed, and a refusal says how to confirm again (a new crawl).
pub fn confirmation_for_this_attempt(mut args: CrawlArgs, attempt: Attempt) -> CrawlArgs {
    if attempt.get() > 1 {
        args.allow_mass_deletion = false;
    }
    args
}

/// Whether the file at a known path takes it from another asset: it was that asset's own path and now holds other
/// content (a new asset, or another asset's moved, copied or revived).
pub(super) fn takes_a_path(known: Option<&almanac_domain::ports::KnownFile>, placement: Placement) -> bool {
    let taker = match placement {
        Placement::Touched(id) | Placement::Moved(id) | Placement::Copy(id) | Placement::Revived(id) => Some(id),
        Placement::New => None,
    };
    known.is_some_and(|k| !k.extra && Some(k.asset_id) != taker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmation_holds_for_the_first_attempt_of_its_crawl_only() {
        let confirmed = CrawlArgs { allow_mass_deletion: true, root_moved: true, ..CrawlArgs::default() };
        let first = confirmation_for_this_attempt(confirmed.clone(), Attempt::new(1).unwrap());
        assert_eq!(first, confirmed);
        let later = confirmation_for_this_attempt(confirmed.clone(), Attempt::new(2).unwrap());
        assert!(!later.allow_mass_deletion && later.root_moved, "{later:?}");
    }

    /// The guard's minimum is the library's, its share of the assets the walk looked for.
    #[test]
    fn the_guard_weighs_the_share_of_what_was_looked_for_in_a_library_of_its_size() {
        let guard = MassDeletionGuard::default();
        assert!(guard.refuses_of(14, 9, 8), "8 of the 9 looked for, in a library of 14");
        assert!(!guard.refuses_of(14, 9, 4), "4 of 9 is under half");
        assert!(!guard.refuses_of(9, 9, 8), "a library under the minimum");
        assert_eq!(guard.refuses(20, 11), guard.refuses_of(20, 20, 11));
    }

    use chrono::{TimeZone, Utc};

    /// docs/media.md names every system folder the walk passes over, as the list has them.
    #[test]
    fn the_docs_name_every_system_folder_passed_over() {
        let docs = include_str!("../../../../docs/media.md");
        for name in SYSTEM_FOLDERS {
            let name = std::str::from_utf8(name).unwrap();
            assert!(docs.contains(&format!("`{name}`")), "docs/media.md should name `{name}`");
        }
    }

    #[test]
    fn hidden_names_and_nas_folders_are_skipped() {
        for name in [".Trash-1000", ".thumbnails", "@eaDir", "#recycle", ".DS_Store", ".preview.jpg.tmp", "#snapshot"] {
            assert!(is_skipped_name(name.as_bytes()), "{name}");
        }
        assert!(is_skipped_name(b"@Recently-Snapshot"), "QNAP's snapshots");
        assert!(passes_over(b"2019/@eaDir/a.jpg") && passes_over(b".hidden") && !passes_over(b"2019/a.jpg"));
        for name in ["IMG_0001.JPG", "eaDir", "recycle", "2019", "a.thumbnails"] {
            assert!(!is_skipped_name(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn mass_deletion_is_more_than_half_of_a_library_of_ten_or_more() {
        let guard = MassDeletionGuard::default();
        assert!(guard.refuses(25, 25), "a whole library of 25");
        assert!(guard.refuses(19, 10), "ten of nineteen");
        assert!(!guard.refuses(20, 10), "exactly half is allowed");
        assert!(guard.refuses(12, 9), "nine of twelve");
        assert!(guard.refuses(10, 6) && !guard.refuses(10, 5));
        assert!(!guard.refuses(9, 8), "a library of nine is below the floor");
        assert!(guard.refuses(1_000_000, 500_001));
        assert!(!guard.refuses(1_000_000, 500_000));
        assert!(!guard.refuses(100, 0));
        let strict = MassDeletionGuard { min_assets: 3, max_percent: 10 };
        assert!(strict.refuses(100, 11) && !strict.refuses(100, 10) && !strict.refuses(2, 2) && strict.refuses(3, 1));
        assert!(guard.describe().contains("50%") && guard.describe().contains("10 or more"));
    }

    #[test]
    fn placement_prefers_the_path_then_active_content_then_revival() {
        let (a, b, c) = (AssetId::new(), AssetId::new(), AssetId::new());
        assert_eq!(place(Some(a), Some((b, true)), Some(c)), Placement::Touched(a));
        assert_eq!(place(None, Some((b, true)), Some(c)), Placement::Copy(b));
        assert_eq!(place(None, Some((b, false)), Some(c)), Placement::Moved(b));
        assert_eq!(place(None, None, Some(c)), Placement::Revived(c));
        assert_eq!(place(None, None, None), Placement::New);
    }

    fn candidate(path: &str, media: MediaType, second: u32, content_id: Option<&str>) -> PairingCandidate {
        PairingCandidate {
            asset_id: AssetId::new(),
            file_path: path.as_bytes().to_vec(),
            media_type: media,
            captured_at: Utc.with_ymd_and_hms(2022, 3, 4, 5, 6, second).unwrap(),
            content_id: content_id.map(str::to_owned),
        }
    }

    #[test]
    fn live_photos_pair_by_name_and_folder_then_identifier_or_time() {
        let still = candidate("2022/IMG_1.HEIC", MediaType::Image, 10, None);
        let motion = candidate("2022/IMG_1.MOV", MediaType::Video, 12, None);
        let far = candidate("2022/IMG_2.JPG", MediaType::Image, 10, None);
        let far_motion = candidate("2022/IMG_2.MOV", MediaType::Video, 20, None);
        let other_dir = candidate("2023/IMG_1.MOV", MediaType::Video, 10, None);
        let id_still = candidate("IMG_3.jpg", MediaType::Image, 0, Some("X"));
        let id_motion = candidate("IMG_3.mov", MediaType::Video, 50, Some("X"));
        let wrong_id_still = candidate("IMG_4.jpg", MediaType::Image, 0, Some("Y"));
        let wrong_id_motion = candidate("IMG_4.mov", MediaType::Video, 0, Some("Z"));
        let all = [
            still.clone(),
            motion.clone(),
            far,
            far_motion,
            other_dir,
            id_still.clone(),
            id_motion.clone(),
            wrong_id_still,
            wrong_id_motion,
        ];
        let mut expected = vec![(still.asset_id, motion.asset_id), (id_still.asset_id, id_motion.asset_id)];
        expected.sort();
        assert_eq!(pair_live_photos(&all, LIVE_PHOTO_MAX_GAP), expected);
    }

    #[test]
    fn an_asset_pairs_at_most_once_and_exactly_at_the_gap_still_pairs() {
        let still = candidate("IMG_5.jpg", MediaType::Image, 10, None);
        let a = candidate("IMG_5.mov", MediaType::Video, 13, None);
        let b = candidate("img_5.MOV", MediaType::Video, 7, None);
        let pairs = pair_live_photos(&[still.clone(), a, b], LIVE_PHOTO_MAX_GAP);
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].0, still.asset_id);
        let late = candidate("IMG_5.mov", MediaType::Video, 14, None);
        assert!(pair_live_photos(&[still, late], LIVE_PHOTO_MAX_GAP).is_empty());
    }

    #[test]
    fn stems_split_on_the_last_slash_and_dot() {
        assert_eq!(split_stem(b"a/b/IMG.1.jpg"), (&b"a/b"[..], &b"IMG.1"[..]));
        assert_eq!(split_stem(b"IMG.jpg"), (&b""[..], &b"IMG"[..]));
        assert_eq!(split_stem(b"a/.hidden"), (&b"a"[..], &b".hidden"[..]));
        assert_eq!(split_stem(b"a/noext"), (&b"a"[..], &b"noext"[..]));
    }
}
