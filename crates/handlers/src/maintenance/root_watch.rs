//! The proxy root as a sweep began with it. A proxy volume unmounted, replaced or emptied part-way through a
//! sweep makes every folder checked after that look like proxies gone missing, while the folders checked before
//! it looked fine, so a guard judged over what was checked can pass. The sweep therefore looks at the root again
//! before each folder it acts on, counts a folder that was there at its config's start and is gone at its turn,
//! and, right before it queues a config's repairs, looks again at one whole file of each folder it found whole.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use almanac_media::{EntryKind, OpenError, RootFolder};

use super::proxy_files::list_folder;

/// The identity (device, inode) of the folder at the proxy root's path when the sweep opened it.
#[derive(Debug)]
pub(super) struct RootAtStart {
    path: PathBuf,
    identity: Option<(u64, u64)>,
}

impl RootAtStart {
    /// The root the sweep just opened.
    pub(super) fn new(root: &RootFolder) -> Self {
        Self { path: root.path().to_path_buf(), identity: almanac_media::identity(root.path()) }
    }

    /// The proxy root's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Why the proxy root's path no longer leads to the folder the sweep opened (it is gone, or another folder or
    /// volume is there: unmounted, or replaced), if it does not.
    pub(super) fn changed(&self) -> Option<String> {
        match almanac_media::identity(&self.path) {
            None => Some(format!("the proxy root {} is gone", self.path.display())),
            now if now != self.identity => Some(format!(
                "another folder or volume is at the proxy root {} than when the sweep began (unmounted or replaced)",
                self.path.display()
            )),
            _ => None,
        }
    }
}

/// Whether the folder `rel` beneath the root is gone (a folder that cannot be read is not). Blocking.
pub(super) fn folder_gone(root: &RootFolder, rel: &[u8]) -> bool {
    matches!(root.open_folder(rel), Err(OpenError::Vanished(_)))
}

/// Of `witnesses` (files the sweep found whole, one per folder), those that are no longer a regular file: looked
/// at in their own folder, no link followed. Blocking.
pub(super) fn gone_witnesses(root: &RootFolder, witnesses: &[String]) -> Vec<String> {
    witnesses
        .iter()
        .filter(|rel| {
            let path = Path::new(rel.as_str());
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return true };
            match list_folder(root, parent.as_os_str().as_bytes()) {
                Ok(Some(entries)) => {
                    !entries.iter().any(|e| e.name.as_bytes() == name.as_bytes() && e.kind == EntryKind::File)
                }
                Ok(None) => true,
                // Unreadable now is not gone; the sweep's listing reports such folders.
                Err(_) => false,
            }
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_replaced_or_gone_is_told_and_a_gone_folder_or_witness_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxies");
        std::fs::create_dir_all(path.join("c/ab/h")).unwrap();
        std::fs::write(path.join("c/ab/h/preview.jpg"), b"p").unwrap();
        let root = RootFolder::open(&path).unwrap();
        let at_start = RootAtStart::new(&root);
        assert_eq!(at_start.changed(), None);
        let witnesses = vec!["c/ab/h/preview.jpg".to_owned(), "c/cd/h/preview.jpg".to_owned()];
        assert_eq!(gone_witnesses(&root, &witnesses), ["c/cd/h/preview.jpg"]);
        assert!(!folder_gone(&root, b"c/ab") && folder_gone(&root, b"c/cd"));
        std::fs::rename(&path, dir.path().join("away")).unwrap();
        std::fs::create_dir_all(&path).unwrap();
        assert!(at_start.changed().unwrap().contains("unmounted or replaced"));
        std::fs::remove_dir(&path).unwrap();
        assert!(at_start.changed().unwrap().contains("is gone"));
        // Through the handle, the folder it opened is still whole.
        assert!(gone_witnesses(&root, &witnesses[..1]).is_empty());
    }

    /// A witness is present only as a regular file of its own name: not as a folder of that name, nor because
    /// other files of its folder are still there.
    #[test]
    fn a_witness_is_gone_unless_a_file_of_its_name_is_there() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("c/ab/h")).unwrap();
        std::fs::write(dir.path().join("c/ab/h/thumbnail.webp"), b"t").unwrap();
        std::fs::create_dir(dir.path().join("c/ab/h/preview.jpg")).unwrap();
        let root = RootFolder::open(dir.path()).unwrap();
        let witnesses =
            vec!["c/ab/h/preview.jpg".to_owned(), "c/ab/h/web.mp4".to_owned(), "c/ab/h/thumbnail.webp".to_owned()];
        assert_eq!(gone_witnesses(&root, &witnesses), ["c/ab/h/preview.jpg", "c/ab/h/web.mp4"]);
    }
}
