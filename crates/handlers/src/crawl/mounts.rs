//! Disks and shares mounted beneath a library's root (ADR 0009, amendment "a disk not mounted beneath the root"):
//! a NAS's USB disk of old photos mounted at `library/old`, a second share at `library/phone`. A folder that was a
//! mount point at the last crawl of the whole root and is on its parent's device now is that disk not mounted
//! (an empty folder left behind), never a folder whose photos were deleted: it is not walked, and what the
//! catalogue has under it is kept. The root's own mount is the root's check (`root::open_root`).

use almanac_domain::StorageConfigId;

use super::walk::FolderNotWalked;

/// The folders beneath the root recorded as mount points, and whether the crawl is confirmed (`root_moved`) to
/// walk those that are no longer mount points as they are.
#[derive(Debug, Clone, Default)]
pub(super) struct Mounts {
    config: Option<StorageConfigId>,
    recorded: Vec<Vec<u8>>,
    confirmed: bool,
}

impl Mounts {
    /// The mount points recorded for `config`; `confirmed`: the operator said they moved off their mounts.
    pub fn new(config: StorageConfigId, recorded: Vec<Vec<u8>>, confirmed: bool) -> Self {
        Self { config: Some(config), recorded, confirmed }
    }

    /// Whether the folder at `rel` (beneath the root) was a mount point at the last crawl of the whole root.
    pub fn was_mounted(&self, rel: &[u8]) -> bool {
        self.recorded.iter().any(|r| r == rel)
    }

    /// Why the folder at `rel`, found on the same device as the folder above it, is not walked: it was a mount
    /// point (`None`: it was not, or the crawl is confirmed).
    pub fn not_mounted(&self, rel: &[u8]) -> Option<String> {
        self.refusal(rel, "is not one now (a disk or share that is not mounted leaves an empty folder behind)")
    }

    /// Why the folder at `rel` is not walked although it is not there as a folder: it was a mount point (`None`: it was
    /// not, or the crawl is confirmed).
    pub fn gone(&self, rel: &[u8]) -> Option<String> {
        self.refusal(
            rel,
            "is not there now as a folder (a disk unmounted whose mount point was removed, as udisks does)",
        )
    }

    fn refusal(&self, rel: &[u8], now: &str) -> Option<String> {
        (!self.confirmed && self.was_mounted(rel)).then(|| {
            let config = self.config.map_or_else(|| "<config>".to_owned(), |c| c.to_string());
            format!(
                "it was a mount point at the last crawl and {now}; what the catalogue has under it is kept. Mount it \
                 again; if it really is an ordinary folder now, or gone, confirm with: almanac-worker enqueue crawl \
                 --config {config} --payload '{{\"root_moved\": true}}'"
            )
        })
    }

    /// The recorded mount points whose folder is right beneath `folder` (`""`: the root), with their names there.
    pub fn right_beneath<'a>(&'a self, folder: &'a [u8]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.recorded.iter().filter_map(move |r| {
            let name = if folder.is_empty() { r.as_slice() } else { r.strip_prefix(folder)?.strip_prefix(b"/")? };
            (!name.is_empty() && !name.contains(&b'/')).then_some((r.as_slice(), name))
        })
    }

    /// What a walk of the whole root records: the mount points it found (`found`), and those recorded before that
    /// it did not walk (not mounted, or beneath a folder it could not read), kept until a walk sees them again.
    /// Sorted, each once.
    pub fn to_record(&self, found: &[Vec<u8>], not_walked: &[&FolderNotWalked]) -> Vec<Vec<u8>> {
        let kept = self.recorded.iter().filter(|r| not_walked.iter().any(|n| n.holds(r)));
        let mut record: Vec<Vec<u8>> = found.iter().chain(kept).cloned().collect();
        record.sort_unstable();
        record.dedup();
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_walked(rel: &str) -> FolderNotWalked {
        FolderNotWalked { rel: rel.as_bytes().to_vec(), path: format!("/lib/{rel}"), reason: "why".into() }
    }

    #[test]
    fn a_recorded_mount_point_not_mounted_is_not_walked_unless_confirmed_and_stays_recorded_until_seen() {
        let config = StorageConfigId::new();
        let mounts = Mounts::new(config, vec![b"old".to_vec(), b"phone/sd".to_vec()], false);
        let why = mounts.not_mounted(b"old").unwrap();
        assert!(why.contains("was a mount point") && why.contains(&config.to_string()), "{why}");
        assert!(mounts.not_mounted(b"olde").is_none() && mounts.not_mounted(b"phone").is_none());
        assert!(Mounts::new(config, vec![b"old".to_vec()], true).not_mounted(b"old").is_none(), "confirmed");

        let found = [b"new".to_vec(), b"old".to_vec()];
        assert_eq!(mounts.to_record(&found, &[]), [b"new".to_vec(), b"old".to_vec()], "phone/sd seen unmounted: gone");
        let (old, phone) = (not_walked("old"), not_walked("phone"));
        assert_eq!(mounts.to_record(&[], &[&old, &phone]), [b"old".to_vec(), b"phone/sd".to_vec()], "not walked: kept");
        assert_eq!(Mounts::default().to_record(&[], &[&old]), Vec::<Vec<u8>>::new());
        assert!(mounts.gone(b"old").unwrap().contains("is not there now"));
        let beneath = |folder: &[u8]| mounts.right_beneath(folder).map(|(_, n)| n.to_vec()).collect::<Vec<_>>();
        assert_eq!(
            (beneath(b""), beneath(b"phone"), beneath(b"ph")),
            (vec![b"old".to_vec()], vec![b"sd".to_vec()], vec![])
        );
    }
}
