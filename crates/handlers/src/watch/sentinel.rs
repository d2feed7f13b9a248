//! The watches' sentinel (ADR 0014, amendment "a file system unmounted under its watches"): when a file system is
//! unmounted, the kernel removes every inotify watch on it and says so with `IN_UNMOUNT`, which notify passes over.
//! A disk unmounted and mounted again between two looks (a USB disk plugged in again, a NAS volume remounted after a
//! check) leaves the mount table as it was, and its watcher hearing nothing from then on, with no error. So the
//! supervisor keeps one inotify instance of its own, holding a watch on each watched root and on each mount point
//! beneath it, set before the watcher's own: it asks for no event that happens in a library (only the folder's
//! deletion), and reads at each look whether one of those file systems was unmounted since.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use almanac_domain::StorageConfigId;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use super::mode::{Mount, mounts};

/// One inotify instance watching the folders whose file system the supervisor's watchers depend on.
pub struct Sentinel {
    fd: OwnedFd,
    /// Each watch set: the config whose watcher set it, the folder, and how many guards hold it (a folder watched
    /// twice in one instance is one watch: a watcher started again before the last one ended).
    watches: Mutex<HashMap<i32, (StorageConfigId, PathBuf, usize)>>,
}

/// A watcher's watches in the sentinel, given back when it is dropped (its watcher ended, or fell back to polling).
pub struct Guard {
    sentinel: Arc<Sentinel>,
    watches: Vec<i32>,
}

impl Sentinel {
    /// A sentinel, or why the kernel refused one (the user's inotify instances used up, say).
    pub fn new() -> std::io::Result<Arc<Self>> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        Ok(Arc::new(Self { fd, watches: Mutex::new(HashMap::new()) }))
    }

    /// Watches `folders` (a root and the mount points beneath it) for `config`'s watcher; a folder that cannot be
    /// watched (gone, not readable, a link) is passed over. Blocking: resolves the paths.
    pub fn guard(self: &Arc<Self>, config: StorageConfigId, folders: &[PathBuf]) -> Guard {
        let flags = WatchFlags::DELETE_SELF | WatchFlags::ONLYDIR | WatchFlags::DONT_FOLLOW;
        let mut set = Vec::new();
        for folder in folders {
            let Ok(wd) = inotify::add_watch(&self.fd, folder.as_path(), flags) else { continue };
            let mut watches = self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            watches.entry(wd).or_insert_with(|| (config, folder.clone(), 0)).2 += 1;
            set.push(wd);
        }
        Guard { sentinel: self.clone(), watches: set }
    }

    /// [`Sentinel::guard`] of `root` and the mount points beneath it (among `mountinfo`'s), but the one whose
    /// identity is `avoid` (the proxy root). Blocking.
    pub fn guard_root(
        self: &Arc<Self>,
        config: StorageConfigId,
        root: &Path,
        mountinfo: Option<&str>,
        avoid: Option<(u64, u64)>,
    ) -> Guard {
        let resolved = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        self.guard(config, &guarded_folders(&resolved, &mounts(mountinfo.unwrap_or_default()), avoid))
    }

    /// The configs (with the folder) one of whose watched folders' file system was unmounted since the last call.
    /// Never waits.
    pub fn unmounted(&self) -> HashMap<StorageConfigId, PathBuf> {
        let mut unmounted = HashMap::new();
        let mut buffer = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(&self.fd, &mut buffer);
        loop {
            match reader.next() {
                Ok(event) if event.events().contains(ReadFlags::UNMOUNT) => {
                    let watches = self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some((config, folder, _)) = watches.get(&event.wd()) {
                        unmounted.entry(*config).or_insert_with(|| folder.clone());
                    }
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                // Nothing more to read (`EAGAIN`), or the instance is broken: nothing to learn from it.
                Err(_) => return unmounted,
            }
        }
    }

    /// The configs whose watches it holds.
    #[cfg(test)]
    fn configs(&self) -> std::collections::HashSet<StorageConfigId> {
        let watches = self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        watches.values().map(|(config, _, _)| *config).collect()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut watches = self.sentinel.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for wd in self.watches.drain(..) {
            let Some(held) = watches.get_mut(&wd) else { continue };
            held.2 -= 1;
            if held.2 == 0 {
                watches.remove(&wd);
                // A watch the kernel removed already (its file system unmounted) is refused: nothing to do.
                let _ = inotify::remove_watch(&self.sentinel.fd, wd);
            }
        }
    }
}

/// The folders a root's watcher depends on: the root, and every mount point strictly beneath it among `mounts`
/// (`root` as `mounts` spell paths: resolved), but `avoid`'s (the proxy root's identity, which the watcher passes
/// over) and those beneath it.
pub fn guarded_folders(root: &Path, mounts: &[Mount], avoid: Option<(u64, u64)>) -> Vec<PathBuf> {
    let mut folders = vec![root.to_path_buf()];
    let mut avoided: Vec<&Path> = Vec::new();
    let mut beneath: Vec<&Mount> = mounts.iter().filter(|m| m.point != root && m.point.starts_with(root)).collect();
    // Outer mount points first, so that one beneath an avoided one is seen to be.
    beneath.sort_by_key(|m| m.point.components().count());
    for mount in beneath {
        if avoided.iter().any(|a| mount.point.starts_with(a)) {
            continue;
        }
        if avoid.is_some() && almanac_media::identity(&mount.point) == avoid {
            avoided.push(&mount.point);
            continue;
        }
        if !folders.contains(&mount.point) {
            folders.push(mount.point.clone());
        }
    }
    folders
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_root_is_guarded_with_the_mount_points_beneath_it_but_not_the_proxy_roots() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("photos");
        let proxies = root.join("proxies");
        std::fs::create_dir_all(proxies.join("cache")).unwrap();
        let table = [
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw".to_owned(),
            format!("40 22 8:17 / {} rw - ext4 /dev/sdb1 rw", root.display()),
            format!("41 40 8:33 / {}/usb rw - vfat /dev/sdc1 rw", root.display()),
            format!("42 40 8:49 / {} rw - ext4 /dev/sdd1 rw", proxies.display()),
            format!("43 42 0:50 / {}/cache rw - tmpfs tmpfs rw", proxies.display()),
            format!("44 22 8:65 / {}2 rw - ext4 /dev/sde1 rw", root.display()),
            format!("45 41 8:81 / {}/usb/inner rw - ext4 /dev/sdf1 rw", root.display()),
        ]
        .join("\n");
        let avoid = almanac_media::identity(&proxies);
        let folders = guarded_folders(&root, &mounts(&table), avoid);
        assert_eq!(folders, [root.clone(), root.join("usb"), root.join("usb/inner")]);
        let folders = guarded_folders(&root, &mounts(&table), None);
        assert_eq!(folders.len(), 5, "{folders:?}");
    }

    #[test]
    fn a_guard_gives_its_watches_back_when_dropped_and_one_watch_held_twice_stays_until_both_are() {
        let dir = tempfile::tempdir().unwrap();
        let sentinel = Sentinel::new().unwrap();
        let (a, b) = (StorageConfigId::new(), StorageConfigId::new());
        let first = sentinel.guard(a, &[dir.path().to_path_buf(), dir.path().join("gone")]);
        assert_eq!(first.watches.len(), 1, "a folder that does not exist is passed over");
        let again = sentinel.guard(a, &[dir.path().to_path_buf()]);
        assert_eq!(again.watches, first.watches, "one folder is one watch");
        drop(first);
        assert_eq!(sentinel.configs(), HashSet::from([a]), "still held by the second guard");
        drop(again);
        assert!(sentinel.configs().is_empty());
        let other = sentinel.guard(b, &[dir.path().to_path_buf()]);
        assert_eq!(sentinel.configs(), HashSet::from([b]));
        assert!(sentinel.unmounted().is_empty(), "nothing was unmounted");
        drop(other);
    }
}
