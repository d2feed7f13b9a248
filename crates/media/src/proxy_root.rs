use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::MediaError;
use crate::proxy_folder::not_a_folder;

/// Checks that the proxy root can take a file now: a file of one block is created beside the proxy folders
/// (`.almanac-write-check-…`, a name outside the proxy layout, which the sweep never touches), flushed to disk
/// and removed. A folder the Worker's user may not write, a read-only or full volume, or a missing folder is a
/// [`MediaError::ProxyRootUnwritable`] naming `storage.proxy_root` and the cause. The one check of the proxy
/// root: `run`, `config check` and every crawl call it. Blocking.
pub fn check_proxy_root(root: &Path) -> Result<(), MediaError> {
    use std::hash::{BuildHasher, Hasher};
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let n = PROBES.fetch_add(1, Ordering::Relaxed);
    // Random as well as this process's: Workers in containers sharing the proxy root are each process 1.
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let probe = root.join(format!(".almanac-write-check-{}-{n}-{random:016x}", std::process::id()));
    let unwritable = |source| MediaError::ProxyRootUnwritable { root: root.to_owned(), source };
    // Only a file this call made is removed: never another's of the same name.
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&probe).map_err(unwritable)?;
    let written = file.write_all(&[0; 4096]).and_then(|()| file.sync_all());
    drop(file);
    written.and(std::fs::remove_file(&probe)).map_err(unwritable)
}

/// Checks that this process may write the folders of one config's proxies: `config_dir` (`<proxy root>/<config>`)
/// and each folder in it, the two levels of the proxy layout where every new photo's folder is made. A Worker run
/// once as another user (root, from a shell on the NAS) leaves folders its service user may not write, and every
/// new photo's proxies then failed one by one while every check of the proxy root passed. Nothing to check before
/// the folder is made. Reads one folder, whatever the library's size. Blocking.
pub fn check_proxy_folders(config_dir: &Path) -> Result<(), MediaError> {
    // A link or a file in the config's folder's place would fail every file: one refusal instead.
    if std::fs::symlink_metadata(config_dir).is_ok_and(|m| !m.is_dir()) {
        return Err(not_a_folder(config_dir.to_path_buf()));
    }
    let folders = match std::fs::read_dir(config_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(folder_unwritable(config_dir, config_dir, e)),
    };
    writable(config_dir, config_dir)?;
    for entry in folders {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(folder_unwritable(config_dir, config_dir, e)),
        };
        // Only the layout's own folders (`<2 lower-case hex>`): another folder someone keeps there (a NAS's
        // `#recycle`, a backup) holds no proxy.
        let ours = almanac_domain::ContentHash::is_prefix_folder(entry.file_name().as_encoded_bytes());
        if ours && entry.file_type().is_ok_and(|t| t.is_dir()) {
            writable(config_dir, &entry.path())?;
        }
    }
    Ok(())
}

/// Checks the folders from `config_dir` (one config's proxies) down to `path` (a proxy that could not be written,
/// its temporary file or its folder), those that exist, as [`check_proxy_folders`] checks the top two levels: the
/// first one the Worker's user may not write is refused, naming it and its owner. Asked after a proxy could not be
/// made: a folder deeper than that check reads (`<hh>/<hash>`), left by a Worker run once as root, refuses every
/// proxy of its file again at each crawl, and the crawl would otherwise end `succeeded` with the file failed.
pub fn check_proxy_path(config_dir: &Path, path: &Path) -> Result<(), MediaError> {
    let Ok(beneath) = path.strip_prefix(config_dir) else { return Ok(()) };
    let mut folder = config_dir.to_path_buf();
    writable(config_dir, &folder)?;
    for part in beneath.components() {
        folder.push(part);
        if !std::fs::symlink_metadata(&folder).is_ok_and(|m| m.is_dir()) {
            break;
        }
        writable(config_dir, &folder)?;
    }
    Ok(())
}

/// This process's effective user id (0: root).
pub fn effective_user() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether this process may make and remove entries in `folder`; one gone meanwhile (the proxy sweep removes a
/// folder it emptied) is no refusal. `access` asks for the real user, which is the effective one: the Worker is
/// never set-id, and the variant that asks for the effective user (`faccessat2`) is refused by sandboxes older
/// than Linux 5.8.
fn writable(config_dir: &Path, folder: &Path) -> Result<(), MediaError> {
    use rustix::fs::{Access, AtFlags, CWD, accessat};
    match accessat(CWD, folder, Access::WRITE_OK | Access::EXEC_OK, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(folder_unwritable(config_dir, folder, e.into())),
    }
}

fn folder_unwritable(config_dir: &Path, folder: &Path, source: std::io::Error) -> MediaError {
    use std::os::unix::fs::MetadataExt;
    let user = effective_user();
    let owner = std::fs::symlink_metadata(folder).map_or(user, |m| m.uid());
    MediaError::ProxyFolderUnwritable {
        folder: folder.to_owned(),
        config_dir: config_dir.to_owned(),
        owner,
        user,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_root_check_leaves_nothing_and_names_the_setting_and_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        check_proxy_root(dir.path()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the check's file is removed");
        let missing = dir.path().join("not-mounted");
        let err = check_proxy_root(&missing).unwrap_err().to_string();
        assert!(err.contains("storage.proxy_root") && err.contains("not-mounted"), "{err}");
        assert!(err.contains("does not exist; is its volume mounted?"), "{err}");
        std::fs::write(&missing, b"a file").unwrap();
        let err = check_proxy_root(&missing).unwrap_err().to_string();
        assert!(err.contains("it is not a folder"), "{err}");
    }
}
