//! Small volumes for tests of a proxy root that is full or cannot be written: a tmpfs of a few KiB mounted on a
//! folder (root only: tests skip, saying so, where mounting is not permitted), or a folder whose mode refuses
//! writes (enough for a user other than root). Unmounted, or given its mode back, when dropped.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A folder that is a small volume, or a folder made unwritable, until dropped.
#[derive(Debug)]
pub struct ScratchVolume {
    path: PathBuf,
    mounted: bool,
}

impl ScratchVolume {
    /// Mounts a tmpfs of `kib` KiB on `path` (created), filled up to its last byte when `full`. `None`, after
    /// printing why, where mounting is not permitted: the caller skips its test.
    pub fn small(path: &Path, kib: u32, full: bool) -> Option<Self> {
        let volume = Self::mount(path, &format!("size={kib}k"))?;
        if full {
            volume.fill();
        }
        Some(volume)
    }

    /// Writes a file (`filler`) until the volume refuses: then it holds not one byte more. Removing that file gives
    /// the space back.
    pub fn fill(&self) -> PathBuf {
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).expect("create the filler");
        let block = [0x55u8; 1024];
        while std::io::Write::write_all(&mut file, &block).is_ok() {}
        while std::io::Write::write_all(&mut file, &block[..1]).is_ok() {}
        filler
    }

    /// Makes `path` (created) a folder this process cannot write: a read-only tmpfs when we are root (root
    /// writes through any mode), its mode 0555 otherwise. `None`, after printing why, when neither works.
    pub fn read_only(path: &Path) -> Option<Self> {
        std::fs::create_dir_all(path).expect("create the folder");
        if is_root(path) {
            return Self::mount(path, "ro,size=64k");
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555)).expect("set the folder's mode");
        Some(Self { path: path.to_owned(), mounted: false })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn mount(path: &Path, options: &str) -> Option<Self> {
        std::fs::create_dir_all(path).expect("create the mount point");
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(path).output();
        match out {
            Ok(o) if o.status.success() => Some(Self { path: path.to_owned(), mounted: true }),
            Ok(o) => {
                eprintln!("SKIPPED: cannot mount a tmpfs here: {}", String::from_utf8_lossy(&o.stderr).trim());
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Drop for ScratchVolume {
    fn drop(&mut self) {
        if self.mounted {
            let unmounted = Command::new("umount").arg("-l").arg(&self.path).status();
            // The mount point, empty once the volume is gone, is not left behind in the temporary folder (the
            // full-disk tests make one per database); a folder that holds anything stays.
            if unmounted.is_ok_and(|s| s.success()) {
                let _ = std::fs::remove_dir(&self.path);
            }
        } else {
            let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755));
        }
    }
}

/// Whether this process runs as root: a file it makes belongs to uid 0.
fn is_root(beside: &Path) -> bool {
    let probe = beside.with_extension("uid-probe");
    std::fs::write(&probe, b"").expect("write a probe file");
    let uid = std::fs::metadata(&probe).expect("read the probe file").uid();
    let _ = std::fs::remove_file(&probe);
    uid == 0
}
