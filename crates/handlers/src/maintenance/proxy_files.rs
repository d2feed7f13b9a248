//! Files under the proxy root, as the maintenance handlers delete and list them: only paths in the exact proxy
//! layout, no link followed, nothing above the root touched.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use almanac_domain::{
    AssetId, StorageConfigId,
    ports::{ProxyPath, StoredProxy},
};
use almanac_executor::HandlerError;
use almanac_media::{EntryKind, Removal, RootFolder};
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

/// Removes the now empty folders above a deleted proxy file, up to (not including) the proxy root.
pub(super) fn remove_parents(proxy_root: &RootFolder, relative: &str) {
    if let Some(parent) = Path::new(relative).parent() {
        proxy_root.remove_empty_folders(parent.as_os_str().as_bytes());
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

/// Files found under the proxy root, sorted into ours (old enough to be considered) and the rest.
#[derive(Debug, Default)]
pub(super) struct SweepListing {
    /// In the exact proxy layout, of an existing config, and older than the age floor.
    pub(super) candidates: Vec<String>,
    /// Not in the layout, or of a config that does not exist: never deleted, reported.
    pub(super) not_ours: Vec<String>,
    /// How many entries were not ours in all (`not_ours` keeps the first few).
    pub(super) not_ours_total: u64,
    /// Folders that could not be read.
    pub(super) unreadable: Vec<String>,
}

/// How many paths that are not ours a sweep names in its report (the count is always complete).
const NOT_OURS_LISTED: usize = 20;

/// Whether a file's mtime makes it at least `min_age` old.
pub(super) fn old_enough(mtime: chrono::DateTime<chrono::Utc>, min_age: Duration) -> bool {
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_micros(u64::try_from(mtime.timestamp_micros()).unwrap_or(0));
    SystemTime::now().duration_since(mtime).is_ok_and(|age| age >= min_age)
}

/// Lists the proxy root, no link followed, and sorts what it finds; stops early (what was found so far) at
/// `stop`. Blocking.
pub(super) fn list_proxy_root(
    root: &RootFolder,
    configs: &HashSet<StorageConfigId>,
    min_age: Duration,
    stop: &CancellationToken,
) -> SweepListing {
    let mut out = SweepListing::default();
    let not_ours = |out: &mut SweepListing, rel: String| {
        out.not_ours_total += 1;
        if out.not_ours.len() < NOT_OURS_LISTED {
            out.not_ours.push(rel);
        }
    };
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(dir) = stack.pop() {
        if stop.is_cancelled() {
            break;
        }
        let listed = root.open_folder(&dir).and_then(|folder| root.list(&folder, &dir));
        let entries = match listed {
            Ok(entries) => entries,
            Err(e) => {
                out.unreadable.push(e.to_string());
                continue;
            }
        };
        for entry in entries {
            let mut rel = dir.clone();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(entry.name.as_bytes());
            if entry.kind == EntryKind::Folder {
                stack.push(rel);
                continue;
            }
            let text = String::from_utf8_lossy(&rel).into_owned();
            let ours = (entry.kind == EntryKind::File)
                .then(|| std::str::from_utf8(&rel).ok().and_then(ProxyPath::parse))
                .flatten()
                .filter(|p| configs.contains(&p.config));
            match ours {
                Some(_) if old_enough(entry.mtime, min_age) => out.candidates.push(text),
                Some(_) => {}
                None => not_ours(&mut out, text),
            }
        }
    }
    out.candidates.sort();
    out
}

#[cfg(test)]
mod tests {
    use almanac_domain::ContentHash;

    use super::*;

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

    #[test]
    fn empty_folders_are_removed_up_to_the_root_only() {
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
        assert!(root_path.exists() && !root_path.join(config.to_string()).exists(), "the root itself stays");
    }
}
