//! Small volumes for tests of a proxy root that is full or cannot be written: a tmpfs of a few KiB mounted on a
//! folder (root only: tests skip, saying so, where mounting is not permitted), or a folder whose mode refuses
//! writes (enough for a user other than root). Unmounted, or given its mode back, when dropped. And a disk whose
//! inode table took a bad write: an ext4 file system in an image file, one of whose entries the kernel then refuses
//! to look up.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory block as it was before [`ScratchVolume::damage_folder`] wrote over it: where it is in the image.
#[derive(Debug)]
pub struct DamagedBlock {
    at: u64,
    bytes: Vec<u8>,
}

/// A folder that is a small volume, or a folder made unwritable, until dropped.
#[derive(Debug)]
pub struct ScratchVolume {
    path: PathBuf,
    mounted: bool,
    /// The image file of an ext4 volume (removed when dropped).
    image: Option<PathBuf>,
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
        if crate::effective_user() == 0 {
            return Self::mount(path, "ro,size=64k");
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o555)).expect("set the folder's mode");
        Some(Self { path: path.to_owned(), mounted: false, image: None })
    }

    /// An ext4 file system of 8 MiB in an image file beside `path` (`<path>.img`), mounted on `path` (created).
    /// `None`, after printing why, where it cannot be made or mounted (not root, no loop devices, no e2fsprogs): the
    /// caller skips its test.
    pub fn ext4(path: &Path) -> Option<Self> {
        Self::ext4_made_with(path, &[])
    }

    /// [`ScratchVolume::ext4`] whose files' and folders' times are kept to the second, as on ext3, FAT, and the
    /// NFS or SMB servers that store on them (inodes of 128 bytes, which have no room for nanoseconds).
    pub fn ext4_to_the_second(path: &Path) -> Option<Self> {
        Self::ext4_made_with(path, &["-I", "128"])
    }

    fn ext4_made_with(path: &Path, options: &[&str]) -> Option<Self> {
        std::fs::create_dir_all(path).expect("create the mount point");
        let image = path.with_extension("img");
        std::fs::File::create(&image).and_then(|f| f.set_len(8 << 20)).expect("make the image file");
        let made = Command::new(sbin("mkfs.ext4")).args(["-q", "-F"]).args(options).arg(&image).output();
        let mut volume = Self { path: path.to_owned(), mounted: false, image: Some(image) };
        match made {
            Ok(o) if o.status.success() => {}
            Ok(o) => return skipped("cannot make an ext4 file system", &o.stderr),
            Err(e) => return skipped("cannot run mkfs.ext4", e.to_string().as_bytes()),
        }
        if volume.mount_image() { Some(volume) } else { None }
    }

    /// Gives the entry at `rel` beneath the mount point an inode of no type the kernel knows, as a bad write to
    /// the inode table leaves one: its folder still lists its name, and looking it up fails with "Structure needs
    /// cleaning". The volume is unmounted for it (`debugfs`) and mounted again.
    pub fn damage_inode(&mut self, rel: &str) {
        let image = self.image.clone().expect("an ext4 volume");
        self.unmount();
        debugfs(&image, &format!("set_inode_field /{rel} mode 0170644"));
        assert!(self.mount_image(), "mount the volume again");
    }

    /// Gives the folder at `rel` beneath the mount point a first directory block that took a bad write: the folder
    /// can still be looked up and stat'ed, and listing it fails ("Bad message"). The volume is unmounted for it
    /// (`debugfs`) and mounted again. Answers the block as it was, which [`ScratchVolume::mend_folder`] puts back.
    pub fn damage_folder(&mut self, rel: &str) -> DamagedBlock {
        let image = self.image.clone().expect("an ext4 volume");
        self.unmount();
        let block: u64 = debugfs(&image, &format!("bmap /{rel} 0")).parse().expect("the folder's first block");
        let stats = debugfs(&image, "stats");
        let size = stats.lines().find_map(|l| l.strip_prefix("Block size:")).expect("the volume's block size");
        let size: u64 = size.trim().parse().expect("the volume's block size");
        let mut bytes = vec![0; usize::try_from(size).expect("a block's size")];
        let file = std::fs::File::open(&image).expect("open the image");
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, block * size).expect("read the block");
        debugfs(&image, &format!("zap_block -f /{rel} -p 255 0"));
        assert!(self.mount_image(), "mount the volume again");
        DamagedBlock { at: block * size, bytes }
    }

    /// Puts back the block [`ScratchVolume::damage_folder`] damaged: the folder can be listed again, as it was.
    pub fn mend_folder(&mut self, damaged: DamagedBlock) {
        let image = self.image.clone().expect("an ext4 volume");
        self.unmount();
        let file = std::fs::OpenOptions::new().write(true).open(&image).expect("open the image");
        std::os::unix::fs::FileExt::write_all_at(&file, &damaged.bytes, damaged.at).expect("write the block back");
        assert!(self.mount_image(), "mount the volume again");
    }

    /// Unmounts the ext4 volume and mounts it again, its files kept: a disk unplugged and plugged in again.
    pub fn remount(&mut self) {
        self.unmount();
        assert!(self.mount_image(), "mount the volume again");
    }

    /// Unmounts the volume now (not lazily: its file system is gone when this returns). One busy for a moment (a
    /// reader of it) is tried again, for ten seconds at most.
    fn unmount(&mut self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let out = Command::new("umount").arg(&self.path).output().expect("run umount");
            if out.status.success() {
                break;
            }
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(said.contains("busy") && std::time::Instant::now() < deadline, "unmount the volume: {said}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.mounted = false;
    }

    fn mount_image(&mut self) -> bool {
        let image = self.image.as_ref().expect("an ext4 volume");
        match Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(image).arg(&self.path).output() {
            Ok(o) if o.status.success() => {
                self.mounted = true;
                true
            }
            Ok(o) => {
                skipped::<()>("cannot mount an ext4 image here", &o.stderr);
                false
            }
            Err(e) => {
                skipped::<()>("cannot run mount", e.to_string().as_bytes());
                false
            }
        }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn mount(path: &Path, options: &str) -> Option<Self> {
        std::fs::create_dir_all(path).expect("create the mount point");
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(path).output();
        match out {
            Ok(o) if o.status.success() => Some(Self { path: path.to_owned(), mounted: true, image: None }),
            Ok(o) => skipped("cannot mount a tmpfs here", &o.stderr),
            Err(e) => skipped("cannot run mount", e.to_string().as_bytes()),
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
        } else if self.image.is_none() {
            let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755));
        }
        if let Some(image) = &self.image {
            // A lazy unmount detaches the loop device once the volume is unused; the file's space goes with it.
            let _ = std::fs::remove_file(image);
        }
    }
}

/// Runs `debugfs` on an unmounted image, writing (`-w`) as `request` asks; answers what it printed.
fn debugfs(image: &Path, request: &str) -> String {
    let out = Command::new(sbin("debugfs")).args(["-w", "-R", request]).arg(image).output().expect("run debugfs");
    assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Says why a test is skipped; `None`.
fn skipped<T>(what: &str, said: &[u8]) -> Option<T> {
    eprintln!("SKIPPED: {what}: {}", String::from_utf8_lossy(said).trim());
    None
}

/// A tool of e2fsprogs, in /usr/sbin (Debian's place, outside a plain user's `PATH`) or else on the `PATH`.
fn sbin(tool: &str) -> PathBuf {
    let placed = Path::new("/usr/sbin").join(tool);
    if placed.exists() { placed } else { PathBuf::from(tool) }
}
