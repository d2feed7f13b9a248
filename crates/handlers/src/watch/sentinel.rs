//! The watches' sentinel (ADR 0014, amendment "a file system unmounted under its watches"): when a file system is
//! unmounted, the kernel removes every inotify watch on it and says so with `IN_UNMOUNT` and `IN_IGNORED`, which
//! notify passes over. A disk unmounted and mounted again between two looks (a USB disk plugged in again, a NAS
//! volume remounted after a check) leaves the mount table as it was, and its watcher hearing nothing from then on,
//! with no error. So the supervisor keeps one inotify instance of its own, holding a watch on each watched root and
//! on each mount point beneath it that the watcher walks, set before the watcher's own: it asks for no event that
//! happens in a library (only the folder's deletion), and reads at each look whether one of those watches was lost.

use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use almanac_domain::StorageConfigId;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use super::mode::{Mount, MountKey, beneath_a_skipped_name, mount_keys, mounts, touches};

/// The watches of one folder, by the configs whose watchers set them: the folder, and how many guards of that
/// config hold it (a folder watched twice in one instance is one watch: a watcher started again before the last
/// one ended, or one folder bound beneath two roots).
type Holders = HashMap<StorageConfigId, (PathBuf, usize)>;

/// One inotify instance watching the folders whose file system the supervisor's watchers depend on.
pub struct Sentinel {
    fd: OwnedFd,
    watches: Mutex<HashMap<i32, Holders>>,
    /// Configs whose watcher found the mounts touching its root changed since its look read them (a file system
    /// unmounted before its guard was set went unheard), or whose guard took a watch already gone.
    suspected: Mutex<HashMap<StorageConfigId, PathBuf>>,
    /// The watches the kernel said are gone (`IN_IGNORED`): a guard whose `add_watch` answered one of them just
    /// before another guard gave it back holds nothing. The kernel hands watch numbers out in turn, so one is not
    /// answered again for a very long time.
    gone: Mutex<HashSet<i32>>,
}

/// What a watcher is given to guard its watches: the sentinel, and the mounts its look read.
#[derive(Clone)]
pub struct Guarding {
    sentinel: Arc<Sentinel>,
    seen: Option<Arc<HashSet<MountKey>>>,
}

/// A watcher's watches in the sentinel, given back when it is dropped (its watcher ended, or fell back to polling).
pub struct Guard {
    sentinel: Arc<Sentinel>,
    config: StorageConfigId,
    watches: Vec<i32>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sentinel {
    /// A sentinel, or why the kernel refused one (the user's inotify instances used up, say).
    pub fn new() -> std::io::Result<Arc<Self>> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        let (watches, suspected, gone) = Default::default();
        Ok(Arc::new(Self { fd, watches, suspected, gone }))
    }

    /// Watches `folders` (a root and the mount points beneath it) for `config`'s watcher; a folder that cannot be
    /// watched (gone, not readable, a link) is passed over. Blocking: resolves the paths. Not `IN_ONLYDIR`, which
    /// would mount an automounted folder.
    pub fn guard(self: &Arc<Self>, config: StorageConfigId, folders: &[PathBuf]) -> Guard {
        let flags = WatchFlags::DELETE_SELF | WatchFlags::DONT_FOLLOW;
        let mut set = Vec::new();
        for folder in folders {
            let Ok(wd) = inotify::add_watch(&self.fd, folder.as_path(), flags) else { continue };
            self.hold(wd, config, folder);
            set.push(wd);
        }
        Guard { sentinel: self.clone(), config, watches: set }
    }

    /// Records that `config`'s guard holds watch `wd`, of `folder`.
    fn hold(&self, wd: i32, config: StorageConfigId, folder: &Path) {
        let mut watches = locked(&self.watches);
        watches.entry(wd).or_default().entry(config).or_insert_with(|| (folder.to_path_buf(), 0)).1 += 1;
        if locked(&self.gone).contains(&wd) {
            locked(&self.suspected).entry(config).or_insert_with(|| folder.to_path_buf());
        }
    }

    /// The configs (with a folder) one of whose watches was lost since the last call, and those suspected. A watch
    /// is lost when its file system is unmounted (`IN_UNMOUNT`), or it is gone for any other reason (`IN_IGNORED`:
    /// the folder deleted; a guard given back while another took the same watch); every config when the instance's
    /// queue overflowed. Never waits.
    pub fn lost(&self) -> HashMap<StorageConfigId, PathBuf> {
        let mut lost = std::mem::take(&mut *locked(&self.suspected));
        let mut buffer = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(&self.fd, &mut buffer);
        loop {
            let flags = match reader.next() {
                Ok(event) => (event.events(), event.wd()),
                Err(rustix::io::Errno::INTR) => continue,
                // Nothing more to read (`EAGAIN`), or the instance is broken: nothing to learn from it.
                Err(_) => return lost,
            };
            let mut watches = locked(&self.watches);
            let holders: Vec<&Holders> = match flags {
                (f, _) if f.contains(ReadFlags::QUEUE_OVERFLOW) => watches.values().collect(),
                (f, wd) if f.intersects(ReadFlags::UNMOUNT | ReadFlags::IGNORED) => {
                    watches.get(&wd).into_iter().collect()
                }
                _ => Vec::new(),
            };
            for (config, (folder, _)) in holders.into_iter().flatten() {
                lost.entry(*config).or_insert_with(|| folder.clone());
            }
            if flags.0.contains(ReadFlags::IGNORED) {
                watches.remove(&flags.1);
                locked(&self.gone).insert(flags.1);
            }
        }
    }

    /// The configs whose watches it holds.
    #[cfg(test)]
    fn configs(&self) -> HashSet<StorageConfigId> {
        locked(&self.watches).values().flat_map(HashMap::keys).copied().collect()
    }
}

impl Guarding {
    /// `sentinel`, for a watcher started by a look that read the mounts `seen` (`None` when they could not be read).
    pub fn new(sentinel: Arc<Sentinel>, seen: Option<Arc<HashSet<MountKey>>>) -> Self {
        Self { sentinel, seen }
    }

    /// [`Sentinel::guard`] of `root` and the mount points beneath it that the watcher walks, as `mountinfo` lists
    /// them, but the proxy root's (its identity `avoid`) and those beneath it. When the mounts touching the root
    /// read before or after the guard is set are not those the look read, the config is suspected: something was
    /// unmounted or mounted before the guard could hear it. Blocking.
    pub fn guard_root(
        &self,
        config: StorageConfigId,
        root: &Path,
        mountinfo: &dyn Fn() -> Option<String>,
        avoid: Option<(u64, u64)>,
    ) -> Guard {
        let resolved = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let before = mountinfo();
        let table = mounts(before.as_deref().unwrap_or_default());
        let guard = self.sentinel.guard(config, &guarded_folders(&resolved, &table, avoid));
        let touching = |keys: &HashSet<MountKey>| -> HashSet<MountKey> {
            keys.iter().filter(|(point, _, _)| touches(point, &resolved)).cloned().collect()
        };
        // A table that could not be read says nothing.
        if let (Some(seen), Some(before), Some(after)) = (&self.seen, before, mountinfo()) {
            let seen = touching(seen);
            if [before, after].iter().any(|text| touching(&mount_keys(text)) != seen) {
                locked(&self.sentinel.suspected).entry(config).or_insert(resolved);
            }
        }
        guard
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut watches = locked(&self.sentinel.watches);
        for wd in self.watches.drain(..) {
            let Some(holders) = watches.get_mut(&wd) else { continue };
            if let Some(held) = holders.get_mut(&self.config) {
                held.1 -= 1;
                if held.1 == 0 {
                    holders.remove(&self.config);
                }
            }
            if holders.is_empty() {
                watches.remove(&wd);
                // A watch the kernel removed already (its file system unmounted) is refused: nothing to do.
                let _ = inotify::remove_watch(&self.sentinel.fd, wd);
            }
        }
    }
}

/// The folders a root's watcher depends on: the root, and every mount point strictly beneath it among `mounts`
/// (`root` as `mounts` spell paths: resolved) that the watcher walks: not an automount point (`autofs`, which looking
/// at would mount), not beneath a name the crawl skips, not the proxy root (its identity `avoid`) nor beneath it.
pub fn guarded_folders(root: &Path, mounts: &[Mount], avoid: Option<(u64, u64)>) -> Vec<PathBuf> {
    let walked = |point: &Path| {
        let rel = point.strip_prefix(root).unwrap_or(point);
        let skipped = beneath_a_skipped_name(point, root);
        let avoided =
            || rel.ancestors().any(|a| !a.as_os_str().is_empty() && almanac_media::identity(&root.join(a)) == avoid);
        !(skipped || avoid.is_some() && avoided())
    };
    let mut folders = vec![root.to_path_buf()];
    for mount in mounts {
        let beneath = mount.point != root && mount.point.starts_with(root);
        if beneath && mount.fs_type != "autofs" && walked(&mount.point) && !folders.contains(&mount.point) {
            folders.push(mount.point.clone());
        }
    }
    folders
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_is_guarded_with_the_mount_points_the_watcher_walks_beneath_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("photos");
        let (proxies, plain) = (root.join("proxies"), root.join("cache"));
        std::fs::create_dir_all(proxies.join("cache")).unwrap();
        std::fs::create_dir_all(plain.join("tmp")).unwrap();
        let r = root.display();
        let table = [
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw".to_owned(),
            format!("40 22 8:17 / {r} rw - ext4 /dev/sdb1 rw"),
            format!("41 40 8:33 / {r}/usb rw - vfat /dev/sdc1 rw"),
            format!("42 40 8:49 / {r}/proxies rw - ext4 /dev/sdd1 rw"),
            format!("43 42 0:50 / {r}/proxies/cache rw - tmpfs tmpfs rw"),
            format!("44 22 8:65 / {r}2 rw - ext4 /dev/sde1 rw"),
            format!("45 41 8:81 / {r}/usb/inner rw - ext4 /dev/sdf1 rw"),
            format!("46 40 0:51 / {r}/.snapshots rw - btrfs /dev/sdb1 rw"),
            format!("47 40 0:52 / {r}/@eaDir/x rw - tmpfs tmpfs rw"),
            format!("48 40 0:53 / {r}/nas rw - autofs systemd-1 rw"),
            format!("49 40 0:54 / {r}/cache/tmp rw - tmpfs tmpfs rw"),
        ]
        .join("\n");
        let guarded = |avoid: &Path| {
            let mut folders = guarded_folders(&root, &mounts(&table), almanac_media::identity(avoid));
            folders.sort();
            folders
        };
        let walked = [root.clone(), root.join("usb"), root.join("usb/inner")];
        // The proxy root a mount of its own, or a plain folder with a mount beneath it.
        let mut expected = [walked.as_slice(), &[plain.join("tmp")]].concat();
        expected.sort();
        assert_eq!(guarded(&proxies), expected);
        let mut expected = [walked.as_slice(), &[proxies.clone(), proxies.join("cache")]].concat();
        expected.sort();
        assert_eq!(guarded(&plain), expected);
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
        let other = sentinel.guard(b, &[dir.path().to_path_buf()]);
        assert_eq!(sentinel.configs(), HashSet::from([a, b]), "one folder beneath two roots");
        drop(first);
        assert_eq!(sentinel.configs(), HashSet::from([a, b]), "still held by the second guard");
        drop(again);
        assert_eq!(sentinel.configs(), HashSet::from([b]));
        drop(other);
        assert!(sentinel.configs().is_empty());
        assert!(sentinel.lost().is_empty(), "watches given back are not lost");
    }

    /// A watch the kernel takes away (here its folder deleted; an unmount does the same) is lost, for every config
    /// holding it.
    #[test]
    fn a_watch_the_kernel_removes_is_lost_for_every_config_that_held_it() {
        let dir = tempfile::tempdir().unwrap();
        let (folder, kept) = (dir.path().join("root"), dir.path().join("kept"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::create_dir_all(&kept).unwrap();
        let sentinel = Sentinel::new().unwrap();
        let (a, b, c) = (StorageConfigId::new(), StorageConfigId::new(), StorageConfigId::new());
        let guards =
            [sentinel.guard(a, std::slice::from_ref(&folder)), sentinel.guard(b, std::slice::from_ref(&folder))];
        let _kept = sentinel.guard(c, &[kept]);
        assert!(sentinel.lost().is_empty());
        std::fs::remove_dir(&folder).unwrap();
        assert_eq!(sentinel.lost(), HashMap::from([(a, folder.clone()), (b, folder)]));
        assert!(sentinel.lost().is_empty(), "said once");
        drop(guards);
    }

    /// A guard whose `add_watch` answered a watch just before another guard gave it back holds nothing: it is told
    /// it lost it, whether it records the watch before or after the kernel's word that the watch is gone is read.
    #[test]
    fn a_watch_taken_as_another_guard_gives_it_back_is_lost_for_the_taker() {
        let dir = tempfile::tempdir().unwrap();
        let sentinel = Sentinel::new().unwrap();
        let (a, b) = (StorageConfigId::new(), StorageConfigId::new());
        let flags = WatchFlags::DELETE_SELF | WatchFlags::DONT_FOLLOW;
        for read_first in [false, true] {
            let first = sentinel.guard(a, &[dir.path().to_path_buf()]);
            let wd = inotify::add_watch(&sentinel.fd, dir.path(), flags).unwrap();
            assert_eq!(first.watches, [wd], "the same watch");
            drop(first);
            if read_first {
                assert!(sentinel.lost().is_empty(), "a watch given back is not lost");
            }
            sentinel.hold(wd, b, dir.path());
            assert_eq!(sentinel.lost(), HashMap::from([(b, dir.path().to_path_buf())]), "read first: {read_first}");
            locked(&sentinel.watches).clear();
        }
    }

    /// A watcher whose mounts, read as its guard is set, are not those its look read is suspected: what changed in
    /// between was not heard.
    #[test]
    fn a_watcher_whose_mounts_changed_since_its_look_is_suspected() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("photos");
        std::fs::create_dir_all(&root).unwrap();
        let (sentinel, config) = (Sentinel::new().unwrap(), StorageConfigId::new());
        let line = format!("40 22 8:17 / {} rw - ext4 /dev/sdb1 rw\n", root.display());
        let elsewhere = "41 22 8:33 / /mnt/usb rw - vfat /dev/sdc1 rw\n";
        let looked = Some(Arc::new(mount_keys(&line)));
        let guarding = Guarding::new(sentinel.clone(), looked);
        let same = || Some(format!("{line}{elsewhere}"));
        let _guard = guarding.guard_root(config, &root, &same, None);
        assert!(sentinel.lost().is_empty(), "a mount elsewhere changes nothing");
        let gone = || Some(elsewhere.to_owned());
        let _guard = guarding.guard_root(config, &root, &gone, None);
        assert_eq!(sentinel.lost(), HashMap::from([(config, root.clone())]));
        let replugged = line.replace("8:17", "8:65");
        let _guard = guarding.guard_root(config, &root, &|| Some(replugged.clone()), None);
        assert_eq!(sentinel.lost().len(), 1, "the disk at the root is another device");
    }
}
