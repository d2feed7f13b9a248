//! Files under the proxy root, as the maintenance handlers delete and list them: only paths in the exact proxy
//! layout, no link followed, nothing above the root touched.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use almanac_domain::{
    AssetId, StorageConfigId,
    ports::{ProxyPath, StoredProxy},
};
use almanac_executor::HandlerError;
use almanac_media::{Entry, EntryKind, OpenError, Removal, RootFolder, join_beneath};
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

/// Deletes a proxy file beneath the proxy root (no link followed on the way; a link in its place goes, never
/// its target); a file that is already gone counts as deleted. Empty folders it leaves are removed. Only a
/// path in the exact proxy layout is deleted, and, when `config` is given, only one in that config's folder:
/// a bad row (hand-written SQL, an old catalogue) cannot make us delete anything else.
pub(super) fn delete_proxy_file(
    proxy_root: &RootFolder,
    relative: &str,
    config: Option<StorageConfigId>,
) -> Result<(), String> {
    match ProxyPath::parse(relative) {
        None => return Err(format!("{relative}: not a path in the proxy layout; it is left alone")),
        Some(p) if config.is_some_and(|c| c != p.config) => {
            return Err(format!("{relative}: in another storage config's proxy folder; it is left alone"));
        }
        Some(_) => {}
    }
    match proxy_root.remove_file(relative.as_bytes(), |_| true) {
        Ok(Removal::Removed | Removal::Gone) => {
            remove_parents(proxy_root, relative);
            Ok(())
        }
        Ok(Removal::Kept) => Err(format!("{relative}: a folder, not a proxy file")),
        Err(e) => Err(format!("{relative}: {e}")),
    }
}

/// Unlinks the file at `relative` beneath the proxy root only if, right then, it is still a regular file old
/// enough for `floor` (a retry of a crawl may have just rewritten it), then the folders it leaves empty. Blocking.
pub(super) fn remove_old_file(proxy_root: &RootFolder, relative: &str, floor: AgeFloor) -> Result<Removal, String> {
    let removed = proxy_root.remove_file(relative.as_bytes(), |e| floor.old_file(e));
    if matches!(removed, Ok(Removal::Removed)) {
        remove_parents(proxy_root, relative);
    }
    removed.map_err(|e| e.to_string())
}

/// Removes the now empty folders above a deleted proxy file, up to (not including) its config's folder
/// (`<config>`), which stays: its presence is how a crawl and a deletion tell that the proxy volume is mounted
/// ([`check_folders_in_place`]).
pub(super) fn remove_parents(proxy_root: &RootFolder, relative: &str) {
    let mut folder = Path::new(relative).parent();
    while let Some(f) = folder.filter(|f| f.components().count() > 1) {
        if !proxy_root.remove_empty_folder(f.as_os_str().as_bytes()) {
            return;
        }
        folder = f.parent();
    }
}

/// Opens the proxy root; `None` when it does not exist yet (nothing was ever written).
pub(super) fn open_proxy_root(path: &Path) -> Result<Option<RootFolder>, HandlerError> {
    match RootFolder::open(path) {
        Ok(root) => Ok(Some(root)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(HandlerError::retryable(format!(
            "the proxy root {} cannot be opened ({e}); check storage.proxy_root and its permissions",
            path.display()
        ))),
    }
}

/// Deletes the files of these proxies and reports which assets had a file that could not be deleted.
pub(super) fn delete_files(
    proxy_root: &Path,
    proxies: &[StoredProxy],
    config: Option<StorageConfigId>,
) -> Result<(HashSet<AssetId>, Vec<String>), HandlerError> {
    let mut blocked = HashSet::new();
    let mut problems = Vec::new();
    let Some(root) = open_proxy_root(proxy_root)? else { return Ok((blocked, problems)) };
    for p in proxies {
        if let Some(rel) = &p.relative_path
            && let Err(e) = delete_proxy_file(&root, rel, config)
        {
            blocked.insert(p.asset_id);
            problems.push(e);
        }
    }
    Ok((blocked, problems))
}

/// Refuses to delete these proxies when the proxy root, or the folder of a config they belong to, is not there
/// ([`crate::proxy_folder_missing`]): every file would count as already deleted and its row would go, and without
/// rows a crawl writes the config's proxies onto the disk beneath an unmounted proxy volume. Asked before each
/// batch of files (a deletion keeps the config's folder, [`remove_parents`]). Blocking.
pub(super) fn check_folders_in_place(
    proxy_root: &Path,
    proxies: &[StoredProxy],
    then: &str,
) -> Result<(), HandlerError> {
    let configs: std::collections::BTreeSet<StorageConfigId> =
        proxies.iter().filter_map(|p| ProxyPath::parse(p.relative_path.as_deref()?).map(|p| p.config)).collect();
    for config in configs {
        let folder = proxy_root.join(config.to_string());
        let found = match std::fs::symlink_metadata(&folder) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => "something other than a folder is there".to_owned(),
            Err(e) => e.to_string(),
        };
        return Err(crate::proxy_folder_missing(&folder, &found, then, config));
    }
    Ok(())
}

/// How many paths that are not ours a sweep names in its report (the count is always complete).
pub(super) const NOT_OURS_LISTED: usize = 20;

/// The age a file under the proxy root must have before it is deleted or judged by its size: `min_age` before
/// `now`, the database's time read once when the work began, as the crawl's settling judges mtimes. A file's mtime
/// comes from the clock of the machine that holds the proxy volume (an NFS server's, not this host's), which,
/// like the database's, is expected on NTP; this host's clock may be anyone's. `now` is not advanced: a file
/// that turns old during the work is left for the next time, never judged older than it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AgeFloor {
    /// The database's time when the work began.
    pub(super) now: DateTime<Utc>,
    /// The age a file must have.
    pub(super) min_age: Duration,
}

impl AgeFloor {
    /// Whether a file's mtime makes it at least `min_age` old at `now` (a file dated ahead of `now` is young).
    pub(super) fn old_enough(&self, mtime: DateTime<Utc>) -> bool {
        chrono::Duration::from_std(self.min_age).is_ok_and(|min_age| self.now - mtime >= min_age)
    }

    /// Whether `entry` is a regular file old enough (no link, no folder): what a clean-up may unlink, checked when
    /// it is listed and again right before the unlink (a retry may have just rewritten it).
    pub(super) fn old_file(&self, entry: &Entry) -> bool {
        entry.kind == EntryKind::File && self.old_enough(entry.mtime)
    }
}

/// Lists one folder beneath the proxy root, no link followed: `Ok(None)` when it does not exist.
pub(super) fn list_folder(root: &RootFolder, rel: &[u8]) -> Result<Option<Vec<Entry>>, String> {
    match root.open_folder(rel).and_then(|folder| root.list(&folder, rel)) {
        Ok(entries) => Ok(Some(entries)),
        Err(OpenError::Vanished(_)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Calls `visit` with the path and `lstat` of every entry beneath the folder `start` that is not a folder,
/// depth first and no link followed, holding only the folders still to visit (never a list of the files). A
/// folder that vanished is empty; one that cannot be read is told to `unreadable`. Answers whether every folder
/// was read (false too when stopped at `stop`). Blocking.
pub(super) fn walk(
    root: &RootFolder,
    start: Vec<u8>,
    stop: &CancellationToken,
    visit: &mut dyn FnMut(Vec<u8>, &Entry),
    unreadable: &mut dyn FnMut(String),
) -> bool {
    let mut complete = true;
    let mut stack = vec![start];
    while let Some(dir) = stack.pop() {
        if stop.is_cancelled() {
            return false;
        }
        let entries = match list_folder(root, &dir) {
            Ok(entries) => entries.unwrap_or_default(),
            Err(e) => {
                unreadable(e);
                complete = false;
                continue;
            }
        };
        for entry in entries {
            let rel = join_beneath(&dir, entry.name.as_bytes());
            if entry.kind == EntryKind::Folder {
                stack.push(rel);
            } else {
                visit(rel, &entry);
            }
        }
    }
    complete
}

#[cfg(test)]
mod tests {
    use almanac_domain::ContentHash;

    use super::*;

    #[test]
    fn the_walk_visits_every_file_beneath_its_folder_once() {
        let dir = tempfile::tempdir().unwrap();
        for rel in ["a/1", "a/b/2", "c/3"] {
            std::fs::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
            std::fs::write(dir.path().join(rel), b"x").unwrap();
        }
        let root = RootFolder::open(dir.path()).unwrap();
        let mut seen = Vec::new();
        let complete =
            walk(&root, Vec::new(), &CancellationToken::new(), &mut |rel, _| seen.push(rel), &mut |e| panic!("{e}"));
        assert!(complete);
        seen.sort();
        assert_eq!(seen, [b"a/1".to_vec(), b"a/b/2".to_vec(), b"c/3".to_vec()]);
    }

    #[test]
    fn proxy_paths_must_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = RootFolder::open(dir.path()).unwrap();
        let config = StorageConfigId::new();
        let ours = ContentHash::from_bytes([0xab; 32]).proxy_dir(config).join("preview.jpg");
        let ours = ours.to_str().unwrap();
        for bad in ["/etc/passwd", "../x.jpg", "a/../../x.jpg", "./a.jpg", "photos/IMG_0001.jpg", "a/b/missing.jpg"] {
            std::fs::create_dir_all(dir.path().join("photos")).unwrap();
            std::fs::write(dir.path().join("photos/IMG_0001.jpg"), b"an original").unwrap();
            assert!(delete_proxy_file(&root, bad, None).is_err(), "{bad}");
        }
        assert!(dir.path().join("photos/IMG_0001.jpg").exists());
        let other = StorageConfigId::new();
        std::fs::create_dir_all(dir.path().join(ours).parent().unwrap()).unwrap();
        std::fs::write(dir.path().join(ours), b"p").unwrap();
        assert!(delete_proxy_file(&root, ours, Some(other)).unwrap_err().contains("another storage config"));
        assert_eq!(delete_proxy_file(&root, ours, Some(config)), Ok(()));
        assert!(!dir.path().join(ours).exists());
        assert_eq!(delete_proxy_file(&root, ours, None), Ok(()), "already gone counts as deleted");
    }

    /// What the sweep holds at a time is one `<config>/<2 hex>` folder: walking it lists that folder's files and
    /// no other's, however many there are beside it.
    #[test]
    fn a_walk_of_one_prefix_folder_sees_only_its_files_and_holds_no_list() {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfigId::new();
        for n in 0u8..=255 {
            let file = ContentHash::from_bytes([n; 32]).proxy_dir(config).join("thumbnail.jpg");
            std::fs::create_dir_all(dir.path().join(&file).parent().unwrap()).unwrap();
            std::fs::write(dir.path().join(&file), b"t").unwrap();
        }
        let deep = dir.path().join(format!("{config}/ab/x/y"));
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("z"), b"z").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join(format!("{config}/ab/link"))).unwrap();
        let root = RootFolder::open(dir.path()).unwrap();
        let mut seen = Vec::new();
        let complete = walk(
            &root,
            format!("{config}/ab").into_bytes(),
            &CancellationToken::new(),
            &mut |rel, entry| seen.push((String::from_utf8(rel).unwrap(), entry.kind)),
            &mut |e| panic!("{e}"),
        );
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        let ours = ContentHash::from_bytes([0xab; 32]).proxy_dir(config).join("thumbnail.jpg");
        assert!(complete);
        assert_eq!(
            seen,
            [
                (ours.display().to_string(), EntryKind::File),
                (format!("{config}/ab/link"), EntryKind::Link),
                (format!("{config}/ab/x/y/z"), EntryKind::File),
            ],
            "one folder's files, the link not followed"
        );
        let mut nothing = 0;
        assert!(walk(
            &root,
            format!("{config}/cd0").into_bytes(),
            &CancellationToken::new(),
            &mut |_, _| nothing += 1,
            &mut |e| panic!("{e}")
        ));
        assert_eq!(nothing, 0, "a folder that is not there is empty");
    }

    #[test]
    fn empty_folders_are_removed_up_to_the_configs_folder_only() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = dir.path().join("proxies");
        let config = StorageConfigId::new();
        let file = ContentHash::from_bytes([0xab; 32]).proxy_dir(config).join("thumbnail.jpg");
        let sibling = root_path.join(config.to_string()).join("cd");
        std::fs::create_dir_all(root_path.join(&file).parent().unwrap()).unwrap();
        std::fs::create_dir_all(&sibling).unwrap();
        std::fs::write(root_path.join(&file), b"x").unwrap();
        let root = RootFolder::open(&root_path).unwrap();
        delete_proxy_file(&root, file.to_str().unwrap(), Some(config)).unwrap();
        assert!(!root_path.join(config.to_string()).join("ab").exists());
        assert!(sibling.exists(), "a non-empty parent stops the walk up");
        remove_parents(&root, &format!("{config}/cd/x.jpg"));
        assert!(!sibling.exists(), "an emptied prefix folder goes");
        assert!(root_path.join(config.to_string()).is_dir(), "the config's folder stays, and the root");
    }
}
