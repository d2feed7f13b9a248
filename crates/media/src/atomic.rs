use std::io::{Read, Seek, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::MediaError;

/// Makes the folders of one file's proxies, `relative` beneath `proxy_root` (`<config>/<prefix>/<hash>`), one at a
/// time and never through a link: a link (or a file) where one of them should be is refused, and nothing is made
/// beneath it. `create_dir_all` followed a link planted there (by anyone else who may write the proxy volume) and the
/// proxies were written wherever it pointed. The proxy root itself may be a link (the operator's choice). Answers the
/// folder. Blocking.
pub fn make_proxy_folder(proxy_root: &Path, relative: &Path) -> Result<std::path::PathBuf, MediaError> {
    use rustix::fs::{CWD, Mode, OFlags, mkdirat, openat};
    use rustix::io::Errno;
    // Handles for finding only (`O_PATH`): a folder the Worker may write and search but not list is no refusal.
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = openat(CWD, proxy_root, flags, Mode::empty()).map_err(|e| MediaError::write(proxy_root, e.into()))?;
    let mut path = proxy_root.to_path_buf();
    for part in relative.components() {
        let std::path::Component::Normal(name) = part else {
            let e = std::io::Error::other(format!("{} is not a path beneath the proxy root", relative.display()));
            return Err(MediaError::write(proxy_root.join(relative), e));
        };
        path.push(name);
        match mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(MediaError::write(&path, e.into())),
        }
        dir = match openat(&dir, name, flags | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(next) => next,
            // A link: ENOTDIR (O_DIRECTORY is checked first) or ELOOP; a file: ENOTDIR.
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(not_a_folder(path)),
            Err(e) => return Err(MediaError::write(&path, e.into())),
        };
    }
    Ok(path)
}

/// The refusal of what stands at `path`, where a proxy folder should be: a link, or a file.
fn not_a_folder(path: std::path::PathBuf) -> MediaError {
    let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
    MediaError::ProxyFolderNotAFolder { path, what: if link { "a link" } else { "a file" } }
}

/// Writes `bytes` to `dest` so that `dest` only ever holds a complete file: write a temporary file beside it,
/// flush, then rename over `dest`. A retry overwrites its own debris.
pub fn write_atomically(dest: &Path, bytes: &[u8]) -> Result<(), MediaError> {
    let dir = dest.parent().ok_or_else(|| MediaError::io(dest, std::io::Error::other("no parent folder")))?;
    write_all_atomically(dir, &[(dest.file_name().map(Path::new).unwrap_or(dest), bytes)])
}

/// [`write_atomically`] for several files of one folder: each is written and flushed under its temporary name
/// and read back (it must hold exactly the bytes given: a write cut short is never renamed), then all are
/// renamed into place and the folder is made durable once (one folder flush instead of one per file). On any
/// error nothing takes its final name and the temporary files are removed. Every error is a
/// [`MediaError::ProxyWrite`]: the files are proxies.
pub fn write_all_atomically(dir: &Path, files: &[(&Path, &[u8])]) -> Result<(), MediaError> {
    std::fs::create_dir_all(dir).map_err(|e| MediaError::write(dir, e))?;
    let temporaries: Vec<_> = files.iter().map(|(name, _)| temporary_name(&dir.join(name))).collect();
    let written = files.iter().zip(&temporaries).try_for_each(|((_, bytes), tmp)| write_whole(tmp, bytes));
    if let Err(e) = written {
        for tmp in &temporaries {
            let _ = std::fs::remove_file(tmp);
        }
        return Err(e);
    }
    for ((name, _), tmp) in files.iter().zip(&temporaries) {
        let dest = dir.join(name);
        std::fs::rename(tmp, &dest).map_err(|e| MediaError::write(&dest, e))?;
    }
    sync_folder(dir)
}

/// Writes `bytes` to `tmp`, flushes them to disk and reads them back: a short write, an error of the disk or a
/// file system that drops data is an error here, not a proxy cut short later. The file is made anew, never
/// opened through what was at `tmp` ([`clear_temporary`], then `O_EXCL`, which refuses a link at the name rather
/// than follow it), and read back through the same handle.
fn write_whole(tmp: &Path, bytes: &[u8]) -> Result<(), MediaError> {
    clear_temporary(tmp)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| MediaError::write(tmp, e))?;
    file.write_all(bytes).map_err(|e| MediaError::write(tmp, e))?;
    file.sync_data().map_err(|e| MediaError::write(tmp, e))?;
    let mut back = Vec::with_capacity(bytes.len() + 1);
    file.rewind()
        .and_then(|()| (&file).take(bytes.len() as u64 + 1).read_to_end(&mut back))
        .map_err(|e| MediaError::write(tmp, e))?;
    if back != bytes {
        let e = std::io::Error::other(format!(
            "{} bytes were written but {} other bytes were read back (the file system lost data)",
            bytes.len(),
            back.len()
        ));
        return Err(MediaError::write(tmp, e));
    }
    Ok(())
}

/// Removes whatever is at the temporary name `tmp` before a proxy is written there: debris of an earlier attempt,
/// or a link someone placed in the proxy tree, which a writer opening the name would follow and write through to
/// its target, outside the proxy folder. The link itself goes, never its target; nothing there is no error.
pub(crate) fn clear_temporary(tmp: &Path) -> Result<(), MediaError> {
    match std::fs::remove_file(tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(MediaError::write(tmp, e)),
        _ => Ok(()),
    }
}

/// Makes a folder's entries durable (after a rename into it), so a power cut cannot leave a proxy row
/// pointing at a name that never reached the disk.
pub fn sync_folder(dir: &Path) -> Result<(), MediaError> {
    std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(|e| MediaError::write(dir, e))
}

/// Flushes a finished file to disk before it is renamed into place.
pub(crate) fn sync_file(path: &Path) -> Result<(), MediaError> {
    std::fs::File::open(path).and_then(|f| f.sync_all()).map_err(|e| MediaError::write(path, e))
}

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

/// The temporary name used for `dest` while it is being written: hidden, in the same folder.
pub(crate) fn temporary_name(dest: &Path) -> std::path::PathBuf {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dest.with_file_name(format!(".{name}.tmp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proxy's folders are made one at a time; a link or a file where one should be is refused, and nothing is
    /// made through the link; the proxy root itself may be a link.
    #[test]
    fn a_proxys_folders_are_made_without_following_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, outside) = (dir.path().join("disk"), dir.path().join("outside"));
        std::fs::create_dir_all(&disk).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let root = dir.path().join("proxies");
        std::os::unix::fs::symlink(&disk, &root).unwrap();
        let made = make_proxy_folder(&root, Path::new("c1/ab/abcd")).unwrap();
        assert_eq!(made, root.join("c1/ab/abcd"));
        assert!(disk.join("c1/ab/abcd").is_dir(), "made through the proxy root's own link");
        std::os::unix::fs::symlink(&outside, disk.join("c1/cd")).unwrap();
        std::fs::write(disk.join("c1/ef"), b"x").unwrap();
        for (at, what) in [("c1/cd", "a link"), ("c1/ef", "a file")] {
            let refused = make_proxy_folder(&root, &Path::new(at).join("cdef")).unwrap_err();
            let MediaError::ProxyFolderNotAFolder { path, what: found } = &refused else { panic!("{refused}") };
            assert_eq!((path, *found), (&root.join(at), what), "{refused}");
            assert!(refused.to_string().contains("storage.proxy_root"), "{refused}");
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing made through the link");
    }

    #[test]
    fn writes_through_a_temporary_name_and_replaces_debris() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("a/b/preview.jpg");
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(temporary_name(&dest), b"debris of an earlier attempt").unwrap();
        std::fs::write(&dest, b"old").unwrap();
        write_atomically(&dest, b"new").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
        assert!(!temporary_name(&dest).exists());
        let expected = almanac_domain::ProxyType::Preview.temporary_file_name().unwrap();
        assert_eq!(temporary_name(&dest).file_name().unwrap(), expected, "the name the proxy sweep knows as ours");
    }

    /// A link placed at a proxy's temporary name (by anyone who can write the proxy tree) is removed, never
    /// written through: the file it points to, outside, is left as it was, and the proxy is a file of its own.
    #[test]
    fn a_link_at_the_temporary_name_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, b"someone else's file").unwrap();
        let folder = dir.path().join("proxies/ab/abcdef");
        std::fs::create_dir_all(&folder).unwrap();
        let (preview, thumbnail) = (folder.join("preview.jpg"), folder.join("thumbnail.jpg"));
        std::os::unix::fs::symlink(&outside, temporary_name(&preview)).unwrap();
        std::os::unix::fs::symlink("../../../outside.txt", temporary_name(&thumbnail)).unwrap();
        let (preview_bytes, thumbnail_bytes) = (&b"preview"[..], &b"thumb"[..]);
        let files = [(Path::new("preview.jpg"), preview_bytes), (Path::new("thumbnail.jpg"), thumbnail_bytes)];
        write_all_atomically(&folder, &files).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"someone else's file");
        for (dest, bytes) in [(&preview, preview_bytes), (&thumbnail, thumbnail_bytes)] {
            assert!(std::fs::symlink_metadata(dest).unwrap().is_file(), "{} is a file, not the link", dest.display());
            assert_eq!(std::fs::read(dest).unwrap(), bytes);
            assert!(std::fs::symlink_metadata(temporary_name(dest)).is_err(), "nothing left at the temporary name");
        }
    }

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
