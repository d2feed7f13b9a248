//! Libraries this machine also serves over NFS (ADR 0014, amendment 1). An NFSv3 client holds no open file on
//! the server: the kernel's NFS server opens the file for each burst of writes and closes it once idle, so an
//! upload that pauses is seen closed part-way. A file seen closed is then no proof it is complete: in such a
//! library, files seen closed wait for the settle time like any other.
//!
//! The kernel's NFS server lists what it exports in `/proc/fs/nfsd/exports` (while its file system is mounted)
//! and `exportfs` in `/var/lib/nfs/etab`; both are read. An export served by a server this Worker cannot see (a
//! container's host, a user-space server) is covered by `watch.trust_closed_files = false`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::mode::{mounts, unescape};

/// Where this machine's NFS exports are listed.
pub const EXPORT_LISTS: [&str; 2] = ["/proc/fs/nfsd/exports", "/var/lib/nfs/etab"];

/// The paths an export list names (`/proc/fs/nfsd/exports` or `/var/lib/nfs/etab`: a path first on each line,
/// its spaces and other odd characters as octal escapes, `#` lines comments; a path in double quotes too).
pub fn exported_paths(list: &str) -> Vec<PathBuf> {
    let path = |line: &str| {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let field = match line.strip_prefix('"') {
            Some(quoted) => quoted.split_once('"')?.0,
            None => line.split([' ', '\t']).next()?,
        };
        Some(PathBuf::from(OsString::from_vec(unescape(field))))
    };
    list.lines().filter_map(path).collect()
}

/// Where a path is in its file system: the device (`major:minor`) of the mount it is under and its path from
/// that file system's top, read from a `/proc/self/mountinfo` text. One folder reached through two mount points
/// (a bind mount: NFSv4 exports are often `/export/photos` bound from `/srv/photos`) has one place.
fn place(mountinfo: &str, path: &Path) -> Option<(String, PathBuf)> {
    let mount = mounts(mountinfo)
        .into_iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len())?;
    Some((mount.device, mount.top.join(path.strip_prefix(&mount.point).ok()?)))
}

/// Whether one of two paths holds the other.
fn nested(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The first of `exports` that holds `root` or lies beneath it, by path or, through `mountinfo`, by the place in
/// its file system (a bind mount): files there may be written through it.
pub fn export_over(exports: &[PathBuf], root: &Path, mountinfo: Option<&str>) -> Option<PathBuf> {
    let root_place = mountinfo.and_then(|m| place(m, root));
    let same_place = |export: &Path| {
        let (Some((device, at)), Some(m)) = (&root_place, mountinfo) else { return false };
        place(m, export).is_some_and(|(d, e)| d == *device && nested(&e, at))
    };
    exports.iter().find(|e| nested(e, root) || same_place(e)).cloned()
}

/// The NFS export of this machine through which `root` may be written, if any, read from `lists` and this
/// process's mounts (`root` resolved first; a list that cannot be read lists nothing). Blocking.
pub fn exported(root: &Path, lists: &[&str]) -> Option<PathBuf> {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let exports: Vec<PathBuf> =
        lists.iter().filter_map(|l| std::fs::read_to_string(l).ok()).flat_map(|l| exported_paths(&l)).collect();
    if exports.is_empty() {
        return None;
    }
    export_over(&exports, &root, super::mode::mountinfo().as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_above_or_below_the_root_are_found_in_either_list() {
        let proc_list = "# Version 1.1\n# Path Client(Flags) # IPs\n/srv/nas\\040share\t*(rw,root_squash,sync)\n";
        let etab = "/export/other\t192.168.1.0/24(rw,sync,wdelay)\n\"/srv/quoted path\"\t*(ro)\n";
        let exports: Vec<PathBuf> = [proc_list, etab].iter().flat_map(|l| exported_paths(l)).collect();
        assert_eq!(
            exports,
            [PathBuf::from("/srv/nas share"), PathBuf::from("/export/other"), PathBuf::from("/srv/quoted path")]
        );
        let over = |root: &str| export_over(&exports, Path::new(root), None);
        assert_eq!(over("/srv/nas share/photos"), Some(PathBuf::from("/srv/nas share")), "exported above");
        assert_eq!(over("/export"), Some(PathBuf::from("/export/other")), "a folder of the library exported");
        assert_eq!(over("/srv/nas"), None, "a name that only begins the same");
        assert_eq!(over("/home/photos"), None);
    }

    #[test]
    fn a_library_exported_through_a_bind_mount_is_exported() {
        // /srv is on sda1; its photos folder is bound at /export/photos, which is exported (NFSv4's usual layout).
        let mountinfo = "22 1 8:1 / / rw - ext4 /dev/sda1 rw
30 22 8:2 / /srv rw - ext4 /dev/sda2 rw
31 22 8:2 /photos /export/photos rw - ext4 /dev/sda2 rw
32 22 8:3 / /home rw - ext4 /dev/sda3 rw
";
        let exports = [PathBuf::from("/export/photos")];
        let over = |root: &str| export_over(&exports, Path::new(root), Some(mountinfo));
        assert_eq!(over("/srv/photos/library"), Some(PathBuf::from("/export/photos")), "beneath the bound folder");
        assert_eq!(over("/srv"), Some(PathBuf::from("/export/photos")), "holding it");
        assert_eq!(over("/srv/other"), None);
        assert_eq!(over("/home/photos"), None, "the same path on another device");
        assert_eq!(place(mountinfo, Path::new("/srv/photos/a")), Some(("8:2".into(), PathBuf::from("/photos/a"))));
    }

    #[test]
    fn a_library_beneath_a_listed_export_is_exported_and_missing_lists_list_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(dir.path()).unwrap();
        let library = top.join("photos");
        std::fs::create_dir(&library).unwrap();
        let etab = top.join("etab");
        std::fs::write(&etab, format!("{}\t*(rw,sync)\n", top.display())).unwrap();
        let lists = [etab.to_str().unwrap(), "/nonexistent/exports"];
        assert_eq!(exported(&library, &lists), Some(top.clone()));
        assert_eq!(exported(&library, &lists[1..]), None);
    }
}
