//! Events or polling (ADR 0014, decision 3): the operator's choice, and for `auto` the root's file system type.
//! Where other machines write (network and FUSE file systems) inotify hears nothing they do: those are polled.

use std::path::Path;

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
    fn a_local_folder_reads_as_some_file_system() {
        let dir = tempfile::tempdir().unwrap();
        assert!(fs_type(dir.path()).is_ok());
        assert!(fs_type(&dir.path().join("missing")).unwrap_err().contains("missing"));
    }
}
