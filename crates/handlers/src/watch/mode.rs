//! Events or polling (ADR 0014, decision 3): the operator's choice, and for `auto` the root's file system type.
//! Where other machines write (network and FUSE file systems) inotify hears nothing they do: those are polled.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use almanac_domain::ports::{WatchChoice, WatchMode};

/// File system types (`statfs`'s `f_type`) whose files other machines may change without this kernel seeing
/// it: NFS, SMB, CIFS, SMB2, FUSE (sshfs, rclone, mergerfs, …), 9P, Ceph, AFS, OCFS2, GFS2, Lustre, GPFS, Coda,
/// NCP. `auto` polls them.
const POLLED_FS: [(u32, &str); 14] = [
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x6573_5546, "FUSE"),
    (0x0102_1997, "9P"),
    (0x00C3_6400, "Ceph"),
    (0x5346_414F, "AFS"),
    (0x7461_636F, "OCFS2"),
    (0x0116_1970, "GFS2"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0x7375_7245, "Coda"),
    (0x564C, "NCP"),
];

/// The same file systems by the type names the kernel lists in `/proc/self/mountinfo` (any `fuse.*` too).
const POLLED_TYPES: [&str; 16] = [
    "nfs", "nfs4", "smbfs", "cifs", "smb3", "fuse", "fuseblk", "9p", "ceph", "afs", "ocfs2", "gfs2", "lustre", "gpfs",
    "coda", "ncpfs",
];

/// Whether `auto` polls a file system of type `name` (as `/proc/self/mountinfo` names it).
pub fn polled_type(name: &str) -> bool {
    POLLED_TYPES.contains(&name) || name.starts_with("fuse.")
}

/// One mount, as `/proc/self/mountinfo` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mount {
    /// The device (`major:minor`) of its file system.
    pub device: String,
    /// The folder of that file system it shows (`/` for the whole of it; another for a bind mount).
    pub top: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
    /// Its file system type.
    pub fs_type: String,
}

/// A mount as the supervisor compares mount tables: its point, file system type and device. The device tells a
/// disk plugged in again (a new device number) from the one it replaced at the same point.
pub type MountKey = (PathBuf, String, String);

/// The mounts a `/proc/self/mountinfo` text lists, as [`MountKey`]s.
pub fn mount_keys(mountinfo: &str) -> std::collections::HashSet<MountKey> {
    mounts(mountinfo).into_iter().map(|m| (m.point, m.fs_type, m.device)).collect()
}

/// The mounts a `/proc/self/mountinfo` text lists (their paths' escaped characters, `\040` for a space, read
/// back).
pub fn mounts(mountinfo: &str) -> Vec<Mount> {
    let path = |field: &str| PathBuf::from(OsString::from_vec(unescape(field)));
    let mount = |line: &str| {
        let (left, right) = line.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        let (device, top, point) = (fields.get(2)?, fields.get(3)?, fields.get(4)?);
        let fs_type = right.split(' ').next()?;
        Some(Mount { device: (*device).to_owned(), top: path(top), point: path(point), fs_type: fs_type.to_owned() })
    };
    mountinfo.lines().filter_map(mount).collect()
}

/// A mountinfo field with its octal escapes (`\ooo`) read back.
pub(super) fn unescape(field: &str) -> Vec<u8> {
    let mut rest = field.as_bytes();
    let mut out = Vec::with_capacity(rest.len());
    while let Some((&first, tail)) = rest.split_first() {
        match tail.split_first_chunk::<3>() {
            Some((digits, after)) if first == b'\\' && digits.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                let value = digits.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                rest = after;
            }
            _ => {
                out.push(first);
                rest = tail;
            }
        }
    }
    out
}

/// The first mount strictly below `root` whose file system `auto` polls (its mount point and type), among
/// `mounts`.
pub fn polled_below(mounts: &[Mount], root: &Path) -> Option<(PathBuf, String)> {
    let below = |m: &&Mount| m.point != root && m.point.starts_with(root) && polled_type(&m.fs_type);
    mounts.iter().find(below).map(|m| (m.point.clone(), m.fs_type.clone()))
}

/// This process's mounts, as the kernel lists them (`/proc/self/mountinfo`); `None` when they cannot be read.
pub fn mountinfo() -> Option<String> {
    std::fs::read_to_string("/proc/self/mountinfo").ok()
}

/// [`polled_below`] among the mounts `mountinfo` lists, `root` resolved first; `None` when they could not be
/// read. Blocking (resolving a root on a hung mount blocks).
pub fn polled_mount_below(root: &Path, mountinfo: Option<&str>) -> Option<(PathBuf, String)> {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    polled_below(&mounts(mountinfo?), &root)
}

/// Whether `point` lies beneath `root` under a name the crawl skips (a snapshot folder such as `.zfs`, a NAS's own
/// folder): the watcher never walks there, so nothing mounted there changes what it watches.
pub fn beneath_a_skipped_name(point: &Path, root: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    point.strip_prefix(root).is_ok_and(|rel| crate::crawl::passes_over(rel.as_os_str().as_bytes()))
}

/// Whether a mount at `point` (made or gone) changes what is seen at or beneath `root`: it is on the root, beneath
/// it (but not [`beneath_a_skipped_name`]: a ZFS snapshot shown under `.zfs` while someone browses it would have
/// restarted the watcher and crawled the whole root), or on a folder that holds it.
pub fn touches(point: &Path, root: &Path) -> bool {
    (point.starts_with(root) && !beneath_a_skipped_name(point, root)) || root.starts_with(point)
}

/// [`decide`], and for `auto` on a file system that gets events, polling when a polled file system is mounted
/// below the root (`nested`: its mount point and type): other machines' writes there raise no event.
pub fn decide_below(
    choice: WatchChoice,
    f_type: Result<u32, String>,
    nested: Option<(PathBuf, String)>,
) -> (WatchMode, Option<String>) {
    match (choice, &f_type, nested) {
        (WatchChoice::Auto, Ok(magic), Some((point, name))) if polled_fs(*magic).is_none() => (
            WatchMode::Polling,
            Some(format!(
                "a {name} file system is mounted below the root at {}, where changes made by other machines raise \
                 no event",
                point.display()
            )),
        ),
        _ => decide(choice, f_type),
    }
}

/// The name of a file system type `auto` polls, or `None` for one whose changes this kernel sees.
pub fn polled_fs(f_type: u32) -> Option<&'static str> {
    POLLED_FS.iter().find(|(magic, _)| *magic == f_type).map(|(_, name)| *name)
}

/// How a root is watched: the operator's choice, and for [`WatchChoice::Auto`] its file system type (`f_type`,
/// or the reason it could not be read). Answers the mode and, when it is not what was chosen or `auto` chose
/// polling, why.
pub fn decide(choice: WatchChoice, f_type: Result<u32, String>) -> (WatchMode, Option<String>) {
    match choice {
        WatchChoice::Events => (WatchMode::Events, None),
        WatchChoice::Polling => (WatchMode::Polling, None),
        WatchChoice::Off => (WatchMode::Off, None),
        WatchChoice::Auto => match f_type {
            Ok(f_type) => match polled_fs(f_type) {
                Some(name) => (
                    WatchMode::Polling,
                    Some(format!("the root is on {name}, where changes made by other machines raise no event")),
                ),
                None => (WatchMode::Events, None),
            },
            Err(reason) => (WatchMode::Off, Some(reason)),
        },
    }
}

/// The file system type of the folder at `root` (`statfs`), or why it could not be read. Blocking (a hung
/// network mount may block it: call it on a blocking thread, with a time limit).
pub fn fs_type(root: &Path) -> Result<u32, String> {
    rustix::fs::statfs(root)
        // The magic numbers are 32 bits; `f_type`'s width and sign vary by architecture.
        .map(|s| s.f_type as u32)
        .map_err(|e| format!("cannot read the file system of {}: {e}", root.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_and_fuse_file_systems_are_polled_and_local_ones_get_events() {
        for (magic, name) in [
            (0x6969, "NFS"),
            (0x517B, "SMB"),
            (0xFF53_4D42, "CIFS"),
            (0xFE53_4D42, "SMB2"),
            (0x6573_5546, "FUSE"),
            (0x0102_1997, "9P"),
            (0x00C3_6400, "Ceph"),
            (0x5346_414F, "AFS"),
        ] {
            let (mode, note) = decide(WatchChoice::Auto, Ok(magic));
            assert_eq!(mode, WatchMode::Polling, "{name}");
            assert!(note.unwrap().contains(name), "{name}");
        }
        // ext4, XFS, Btrfs, ZFS, tmpfs, overlayfs.
        for local in [0xEF53, 0x5846_5342, 0x9123_683E, 0x2FC1_2FC1, 0x0102_1994, 0x794C_7630] {
            assert_eq!(decide(WatchChoice::Auto, Ok(local)), (WatchMode::Events, None), "{local:#x}");
        }
    }

    #[test]
    fn the_operators_choice_overrides_the_file_system() {
        let nfs = 0x6969;
        assert_eq!(decide(WatchChoice::Events, Ok(nfs)), (WatchMode::Events, None));
        assert_eq!(decide(WatchChoice::Polling, Ok(0xEF53)), (WatchMode::Polling, None));
        assert_eq!(decide(WatchChoice::Off, Ok(0xEF53)), (WatchMode::Off, None));
        let unreadable = decide(WatchChoice::Auto, Err("gone".into()));
        assert_eq!(unreadable, (WatchMode::Off, Some("gone".into())));
        assert_eq!(decide(WatchChoice::Polling, Err("gone".into())).0, WatchMode::Polling);
    }

    #[test]
    fn this_process_mounts_are_read_and_a_polled_one_below_a_root_found_through_its_real_path() {
        let ours = mounts(&mountinfo().expect("/proc/self/mountinfo"));
        assert!(ours.iter().any(|m| m.point == Path::new("/")), "the root mount: {ours:?}");
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink(&real, real.join("link")).unwrap();
        let line = format!("50 1 0:60 / {} rw - nfs4 nas:/share rw\n", real.join("share").display());
        let found = Some((real.join("share"), "nfs4".to_owned()));
        assert_eq!(polled_mount_below(&real.join("link"), Some(&line)), found, "through a link to the root");
        assert_eq!(polled_mount_below(&real, None), None, "mounts that could not be read");
        // A root on a polled file system is polled for itself, whatever is mounted below it.
        let nested = Some((real.join("share"), "nfs4".to_owned()));
        assert_eq!(decide_below(WatchChoice::Auto, Ok(0x6969), nested), decide(WatchChoice::Auto, Ok(0x6969)));
    }

    #[test]
    fn a_polled_file_system_mounted_below_the_root_makes_it_polled() {
        let mountinfo = r"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 0:31 / /srv/photos rw,relatime shared:2 - ext4 /dev/sdb1 rw
41 36 0:44 / /srv/photos/from\040phone rw,relatime shared:9 - nfs4 nas:/phone rw,vers=4.2
42 22 0:45 / /srv/photos2/x rw - cifs //nas/x rw
43 36 0:46 / /srv/photos/sshfs rw - fuse.sshfs me@host: rw
44 36 0:47 / /srv/photos/tmp rw - tmpfs tmpfs rw";
        let mounts = mounts(mountinfo);
        assert_eq!(mounts.len(), 6);
        let nfs = Mount {
            device: "0:44".into(),
            top: "/".into(),
            point: "/srv/photos/from phone".into(),
            fs_type: "nfs4".into(),
        };
        assert_eq!(mounts[2], nfs, "\\040 is a space");
        let root = Path::new("/srv/photos");
        let nested = polled_below(&mounts, root);
        assert_eq!(nested, Some((PathBuf::from("/srv/photos/from phone"), "nfs4".to_owned())));
        let (mode, note) = decide_below(WatchChoice::Auto, Ok(0xEF53), nested.clone());
        assert_eq!(mode, WatchMode::Polling);
        assert!(note.unwrap().contains("nfs4 file system is mounted below the root at /srv/photos/from phone"));
        assert_eq!(decide_below(WatchChoice::Events, Ok(0xEF53), nested).0, WatchMode::Events, "the choice rules");
        assert_eq!(polled_below(&mounts, Path::new("/srv/photos/tmp")), None, "a local mount below is no reason");
        assert_eq!(polled_below(&mounts, Path::new("/srv/photos2/x")), None, "the root's own mount is statfs's");
        assert_eq!(polled_below(&mounts, Path::new("/srv/photo")), None, "a name that only begins the same");
        assert_eq!(decide_below(WatchChoice::Auto, Ok(0xEF53), None), (WatchMode::Events, None));
        assert!(polled_type("fuse.rclone") && polled_type("smb3") && !polled_type("xfs"));
        assert_eq!(unescape(r"a\134b\011c\9"), b"a\\b\tc\\9");
        assert_eq!(unescape(r"photos 2017\040x"), b"photos 2017 x", "digits after no backslash are digits");
        assert_eq!(unescape(r"\777\04"), b"?\\04", "too large a byte, too few digits");
        let root = Path::new("/srv/photos");
        assert!(touches(root, root) && touches(Path::new("/srv/photos/usb"), root) && touches(Path::new("/srv"), root));
        assert!(!touches(Path::new("/srv/photos2"), root) && !touches(Path::new("/mnt/usb"), root));
        assert!(!touches(Path::new("/srv/photos/.zfs/snapshot/daily"), root), "beneath a name the crawl skips");
    }

    #[test]
    fn a_local_folder_reads_as_some_file_system() {
        let dir = tempfile::tempdir().unwrap();
        assert!(fs_type(dir.path()).is_ok());
        assert!(fs_type(&dir.path().join("missing")).unwrap_err().contains("missing"));
    }
}
