//! Originals are only read, and only beneath their root (ADR 0009). A root (a config's folder of originals,
//! or the proxy root) is opened once; every folder and file under it is opened relative to that handle, with
//! no link followed at any component, so a file or folder swapped for a link after the listing cannot lead
//! outside the root. An original that is opened is what gets read, hashed and handed to external tools (as
//! their standard input), never the path again. In the proxy root, files are removed the same way.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use almanac_domain::ports::EARLIEST_TIME;
use chrono::{DateTime, Utc};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::answers::{Answering, Answers};

/// A root folder (a storage config's root, or the proxy root), opened once.
#[derive(Debug)]
pub struct RootFolder {
    dir: OwnedFd,
    path: PathBuf,
    /// The calls made beneath it since it was opened, its files' reads among them.
    answers: Arc<Answers>,
}

/// A directory entry as the walk sees it: its name and what `lstat` said (links are reported, not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name, as the exact bytes the file system gave.
    pub name: OsString,
    /// What it is.
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, truncated to microseconds (what the catalogue keeps).
    pub mtime: DateTime<Utc>,
    /// Its file-system identity (device, inode), which tells a folder mounted in a second place.
    pub identity: (u64, u64),
    /// When its inode last changed (`st_ctime`, truncated to microseconds): any write, rename or change of its
    /// times sets it, and nothing sets it back.
    pub changed: DateTime<Utc>,
}

/// The kinds of entry the walk tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A folder.
    Folder,
    /// A symbolic link: never followed.
    Link,
    /// A FIFO, socket or device: never opened.
    Other,
}

/// What [`RootFolder::remove_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Removed.
    Removed,
    /// Already gone.
    Gone,
    /// Left in place: a folder, or the check right before the unlink said no.
    Kept,
}

/// An original opened beneath its root: the open file, and its path for messages only.
#[derive(Debug)]
pub struct Original {
    file: File,
    path: PathBuf,
    answers: Arc<Answers>,
}

impl Original {
    /// The open file. Reading through it reads what was opened, whatever happens to the path meanwhile.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The open file, each read a call into its root's share ([`RootFolder::answers`]).
    pub fn reader(&self) -> Answering<'_, &File> {
        self.answers.reading(&self.file)
    }

    /// The path, for messages only: it is never opened again.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size and modification time now (`fstat` of the open file), as the walk reads them: the mtime
    /// truncated to microseconds. Compared with the walk's, it tells a file that changed since it was listed.
    pub fn size_and_mtime(&self) -> std::io::Result<(u64, DateTime<Utc>)> {
        let stat = self.answers.call(|| rustix::fs::fstat(&self.file))?;
        let entry = entry_of(OsString::new(), &stat);
        Ok((entry.size, entry.mtime))
    }

    /// A second handle on the same open file, for an external tool's standard input.
    pub(crate) fn handle_for_tool(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }
}

/// Why something beneath a root could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// It is not there (vanished since the listing).
    #[error("{0}: vanished since the folder was listed")]
    Vanished(PathBuf),
    /// A component is a symbolic link (or a folder replaced by something else), or the path would leave the
    /// root: refused, nothing read.
    #[error(
        "{0}: a link, or a folder replaced by a file or a link, is on the way to it (or it leads outside the \
         storage root); it is not followed and nothing is read"
    )]
    Escapes(PathBuf),
    /// Not a regular file (a FIFO, socket or device swapped in): refused, never opened for reading.
    #[error("{0}: not a regular file; it is not read")]
    NotAFile(PathBuf),
    /// Anything else the operating system said.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// A folder's entries as [`RootFolder::list_each`] found them.
#[derive(Debug, Default)]
pub struct Listing {
    /// Each entry looked up (`lstat`), in the folder's own order.
    pub entries: Vec<Entry>,
    /// The entries the folder lists whose own `lstat` failed.
    pub unexamined: Vec<Unexamined>,
}

/// An entry a folder lists whose own `lstat` failed.
#[derive(Debug)]
pub struct Unexamined {
    /// Its name in the folder.
    pub name: OsString,
    /// What the folder's listing says it is, when the file system says (`d_type`): not looked up, so a hint only.
    pub listed_as: Option<EntryKind>,
    /// Why it could not be looked up.
    pub error: std::io::Error,
}

impl RootFolder {
    /// Opens a root folder by its absolute path, no link followed at any component: a root registered
    /// canonical has none, and one swapped for a link since (by a user who can write to the folder above it)
    /// is refused with `ELOOP` (`ENOTDIR` when a component became a file). What lies beneath is then opened
    /// relative to this handle.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if !path.is_absolute() {
            return Err(std::io::Error::other(format!("{} is not an absolute path", path.display())));
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let dir = match rustix::fs::openat2(rustix::fs::CWD, path, flags, Mode::empty(), resolve) {
            Err(Errno::NOSYS | Errno::PERM) => {
                let slash = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
                let rel = path.as_os_str().as_bytes().strip_prefix(b"/").unwrap_or_default();
                if rel.is_empty() {
                    Ok(rustix::fs::openat(&slash, ".", flags, Mode::empty())?)
                } else {
                    open_component_by_component(&slash, rel, flags)
                }
            }
            other => other,
        }?;
        Ok(Self { dir, path: path.to_owned(), answers: Arc::default() })
    }

    /// The root's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The calls made beneath the root (and into the files opened there) since it was opened: whether its share
    /// still answers.
    pub fn answers(&self) -> &Answers {
        &self.answers
    }

    /// The identity of `folder`, opened beneath the root ([`folder_identity`]): a call into its share.
    pub fn identity_of(&self, folder: &OwnedFd) -> Option<(u64, u64)> {
        self.answers.call(|| folder_identity(folder))
    }

    /// Whether the root is a mount point: its device differs from its parent folder's.
    pub fn is_mount_point(&self) -> std::io::Result<bool> {
        let own = self.answers.call(|| rustix::fs::fstat(&self.dir))?;
        let parent = self.answers.call(|| rustix::fs::statat(&self.dir, "..", AtFlags::empty()))?;
        Ok(own.st_dev != parent.st_dev || own.st_ino == parent.st_ino)
    }

    fn display(&self, rel: &[u8]) -> PathBuf {
        if rel.is_empty() { self.path.clone() } else { self.path.join(OsStr::from_bytes(rel)) }
    }

    /// Opens a folder beneath the root (`rel` empty for the root itself), no link followed.
    pub fn open_folder(&self, rel: &[u8]) -> Result<OwnedFd, OpenError> {
        if rel.is_empty() {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let opened = self.answers.call(|| rustix::fs::openat(&self.dir, ".", flags, Mode::empty()));
            return opened.map_err(|e| self.open_error(rel, e));
        }
        self.open_beneath(rel, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    /// Lists a folder opened with [`Self::open_folder`]: every entry but `.` and `..`, each with its `lstat`.
    /// An entry that vanished between listing and looking is left out; one that cannot be looked up fails the
    /// listing (for callers that must know the whole folder or nothing of it: the proxy sweep deletes by it).
    pub fn list(&self, folder: &OwnedFd, rel: &[u8]) -> Result<Vec<Entry>, OpenError> {
        let listing = self.list_each(folder, rel)?;
        match listing.unexamined.into_iter().next() {
            Some(bad) => {
                Err(OpenError::Io { path: self.display(&join_beneath(rel, bad.name.as_bytes())), source: bad.error })
            }
            None => Ok(listing.entries),
        }
    }

    /// [`RootFolder::list`], going on past an entry whose own `lstat` fails (a damaged inode: "Structure needs
    /// cleaning", an I/O error of the disk under it, a name a network share lists but cannot look up): such an
    /// entry is neither a file nor a folder the caller can tell, and is handed back with why, beside the others.
    /// A folder that cannot be read, or whose entries cannot be looked up at all (it may be listed but not
    /// searched: `EACCES`), is an error as for `list`.
    pub fn list_each(&self, folder: &OwnedFd, rel: &[u8]) -> Result<Listing, OpenError> {
        let mut dir = self.answers.call(|| rustix::fs::Dir::read_from(folder)).map_err(|e| self.open_error(rel, e))?;
        let mut out = Listing::default();
        while let Some(entry) = self.answers.call(|| dir.next()) {
            let entry = entry.map_err(|e| self.open_error(rel, e))?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            // The listed name as it came, already NUL-terminated: no copy made for the call.
            match self.answers.call(|| rustix::fs::statat(folder, name, AtFlags::SYMLINK_NOFOLLOW)) {
                Ok(stat) => out.entries.push(entry_of(OsStr::from_bytes(name.to_bytes()).to_owned(), &stat)),
                Err(Errno::NOENT) => continue,
                Err(e @ (Errno::ACCESS | Errno::PERM)) => return Err(self.open_error(rel, e)),
                Err(e) => out.unexamined.push(Unexamined {
                    name: OsStr::from_bytes(name.to_bytes()).to_owned(),
                    listed_as: kind_of(entry.file_type()),
                    error: e.into(),
                }),
            }
        }
        Ok(out)
    }

    /// Opens an original for reading beneath the root, no link followed at any component, and only when it
    /// is a regular file: it is first located without being opened (`O_PATH`), so a FIFO or a device swapped
    /// in is never opened at all (opening one could hang, or have side effects); a regular file is then opened
    /// for reading through that very handle.
    pub fn open_file(&self, rel: &[u8]) -> Result<Original, OpenError> {
        let located = self.open_beneath(rel, OFlags::PATH)?;
        let stat = self.answers.call(|| rustix::fs::fstat(&located)).map_err(|e| self.open_error(rel, e))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            // O_PATH | O_NOFOLLOW hands back a trailing link itself rather than refusing it.
            FileType::Symlink => return Err(OpenError::Escapes(self.display(rel))),
            _ => return Err(OpenError::NotAFile(self.display(rel))),
        }
        // Reopening the located file through its descriptor reads exactly that inode, whatever the path is now.
        let reopen = format!("/proc/self/fd/{}", located.as_raw_fd());
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = self.answers.call(|| rustix::fs::open(reopen.as_str(), flags, Mode::empty()));
        let file = File::from(fd.map_err(|e| self.open_error(rel, e))?);
        Ok(Original { file, path: self.display(rel), answers: self.answers.clone() })
    }

    /// Whether something (not following a link) exists at `rel` beneath the root. Only what is known to be gone
    /// is not: a path whose folder, or which itself, cannot be looked up for another reason (a damaged inode, an
    /// I/O error, no rights) may be there, and is taken to be (the crawl then keeps an asset where it is).
    pub fn exists(&self, rel: &[u8]) -> bool {
        let (parent, name) = split_parent(rel);
        let folder = match self.open_folder(parent) {
            Ok(folder) => folder,
            Err(OpenError::Vanished(_) | OpenError::Escapes(_) | OpenError::NotAFile(_)) => return false,
            Err(OpenError::Io { .. }) => return true,
        };
        match self.answers.call(|| rustix::fs::statat(&folder, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW)) {
            Ok(_) => true,
            Err(Errno::NOENT | Errno::NOTDIR) => false,
            Err(_) => true,
        }
    }

    /// Removes the file (or link: never its target) at `rel` beneath the root when `confirm`, given its
    /// `lstat` taken right before the unlink, agrees. No link is followed on the way.
    pub fn remove_file(&self, rel: &[u8], confirm: impl FnOnce(&Entry) -> bool) -> Result<Removal, OpenError> {
        let (parent, name) = split_parent(rel);
        let folder = match self.open_folder(parent) {
            Ok(folder) => folder,
            Err(OpenError::Vanished(_)) => return Ok(Removal::Gone),
            Err(e) => return Err(e),
        };
        let name = OsStr::from_bytes(name);
        let entry = match rustix::fs::statat(&folder, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => entry_of(name.to_owned(), &stat),
            Err(Errno::NOENT) => return Ok(Removal::Gone),
            Err(e) => return Err(self.open_error(rel, e)),
        };
        if entry.kind == EntryKind::Folder || !confirm(&entry) {
            return Ok(Removal::Kept);
        }
        match rustix::fs::unlinkat(&folder, name, AtFlags::empty()) {
            Ok(()) => Ok(Removal::Removed),
            Err(Errno::NOENT) => Ok(Removal::Gone),
            Err(e) => Err(self.open_error(rel, e)),
        }
    }

    /// Removes the folder at `rel` and then its parents up to (not including) the root, as long as each is
    /// empty. No link is followed.
    pub fn remove_empty_folders(&self, rel: &[u8]) {
        let mut rel = rel;
        while !rel.is_empty() && self.remove_empty_folder(rel) {
            rel = split_parent(rel).0;
        }
    }

    /// Removes the folder at `rel` beneath the root if it is empty (never the root itself); answers whether it did.
    /// No link is followed.
    pub fn remove_empty_folder(&self, rel: &[u8]) -> bool {
        let (parent, name) = split_parent(rel);
        let Ok(folder) = self.open_folder(parent) else { return false };
        !rel.is_empty() && rustix::fs::unlinkat(&folder, OsStr::from_bytes(name), AtFlags::REMOVEDIR).is_ok()
    }

    fn open_beneath(&self, rel: &[u8], flags: OFlags) -> Result<OwnedFd, OpenError> {
        // O_PATH takes no other open flags (openat2 refuses them).
        let extra = if flags.contains(OFlags::PATH) { OFlags::empty() } else { OFlags::NOCTTY };
        let flags = flags | extra | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        self.answers
            .call(|| match rustix::fs::openat2(&self.dir, OsStr::from_bytes(rel), flags, Mode::empty(), resolve) {
                // Kernels before 5.6 (many NAS systems) have no openat2, and some container seccomp profiles
                // refuse it with EPERM: walk the components one by one instead.
                Err(Errno::NOSYS | Errno::PERM) => open_component_by_component(&self.dir, rel, flags),
                other => other,
            })
            .map_err(|e| self.open_error(rel, e))
    }

    fn open_error(&self, rel: &[u8], e: Errno) -> OpenError {
        let path = self.display(rel);
        match e {
            Errno::NOENT => OpenError::Vanished(path),
            // ELOOP: a link refused by NO_SYMLINKS or O_NOFOLLOW; EXDEV: would leave the root; ENOTDIR: a
            // folder component swapped for a file or a link.
            Errno::LOOP | Errno::XDEV | Errno::NOTDIR => OpenError::Escapes(path),
            e => OpenError::Io { path, source: e.into() },
        }
    }
}

/// An open folder's file-system identity (device, inode), as [`Entry::identity`] gives a listed one's.
pub fn folder_identity(folder: &OwnedFd) -> Option<(u64, u64)> {
    #[allow(clippy::useless_conversion)]
    rustix::fs::fstat(folder).ok().map(|stat| (u64::from(stat.st_dev), u64::from(stat.st_ino)))
}

/// How long a look at a library's root (or the proxy root) on the file system may take before it is given up on: a
/// share whose server stopped answering (a NAS turned off, mounted `hard`) holds every call into it for ever, while
/// one whose disks are waking up (ADR 0013) answers within seconds. The commands and the Worker's start wait this long
/// at most; it is also the default of `storage.root_answer_limit`, each crawl's limit for its looks before it reads.
pub const ROOT_ANSWERS_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// A path's file-system identity (device, inode), following links; `None` when it does not exist.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path)
        .ok()
        .map(|m| (std::os::unix::fs::MetadataExt::dev(&m), std::os::unix::fs::MetadataExt::ino(&m)))
}

/// Whether two existing paths are one folder (same device and inode), however they are spelled or mounted.
pub fn same_folder(a: &Path, b: &Path) -> bool {
    identity(a).is_some_and(|id| identity(b) == Some(id))
}

/// Whether two existing folders are one tree or one lies inside the other, by file-system identity: `b` is
/// `a` or one of the folders above it, or the other way round. This catches what comparing paths cannot: a
/// bind mount of a library at another path, or another spelling of one folder on a case-insensitive share.
pub fn same_tree(a: &Path, b: &Path) -> bool {
    lies_within(a, b) || lies_within(b, a)
}

/// Whether two folders are one tree or one lies inside the other: by their paths
/// ([`almanac_domain::roots_overlap`]) or, where they exist, by file-system identity ([`same_tree`]).
pub fn trees_overlap(a: &Path, b: &Path) -> bool {
    almanac_domain::roots_overlap(a, b) || same_tree(a, b)
}

/// Whether two folders overlap only as the file system sees them (a bind mount, another spelling of one folder
/// on a case-insensitive share): what a comparison of paths, such as the catalogue's, cannot find.
pub fn overlap_hidden_from_paths(a: &Path, b: &Path) -> bool {
    !almanac_domain::roots_overlap(a, b) && same_tree(a, b)
}

/// Whether `inner` is `outer` or lies inside it, by file-system identity: `outer` is `inner` or one of the
/// existing folders above it (so a folder not created yet is placed by its parents). False when `outer`
/// does not exist.
pub fn lies_within(inner: &Path, outer: &Path) -> bool {
    let Some(outer) = identity(outer) else { return false };
    inner.ancestors().any(|f| identity(f) == Some(outer))
}

/// The same guarantee as `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, for kernels without it: each
/// component is opened relative to the previous one with `O_NOFOLLOW`; `..`, `.` and empty components are
/// refused.
pub(crate) fn open_component_by_component(root: &OwnedFd, rel: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
    let components: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
    let (last, folders) = components.split_last().ok_or(Errno::NOENT)?;
    let mut current: Option<OwnedFd> = None;
    for name in folders.iter().chain(std::iter::once(last)) {
        if name.is_empty() || *name == b"." || *name == b".." {
            return Err(Errno::XDEV);
        }
    }
    for folder in folders {
        let at = current.as_ref().map_or(root.as_fd(), AsFd::as_fd);
        // O_PATH: passing through a folder needs only search permission, as with openat2.
        let next = rustix::fs::openat(
            at,
            OsStr::from_bytes(folder),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        current = Some(next);
    }
    let at = current.as_ref().map_or(root.as_fd(), AsFd::as_fd);
    rustix::fs::openat(at, OsStr::from_bytes(last), flags | OFlags::NOFOLLOW, Mode::empty())
}

// `st_mtime` is 32-bit on some 32-bit targets (older ARM NAS boxes), so the conversion is not useless there.
#[allow(clippy::useless_conversion)]
fn entry_of(name: OsString, stat: &rustix::fs::Stat) -> Entry {
    let kind = kind_of(FileType::from_raw_mode(stat.st_mode)).unwrap_or(EntryKind::Other);
    let mtime = mtime_of(i64::from(stat.st_mtime), stat.st_mtime_nsec as u32);
    let identity = (u64::from(stat.st_dev), u64::from(stat.st_ino));
    let changed = mtime_of(i64::from(stat.st_ctime), stat.st_ctime_nsec as u32);
    Entry { name, kind, size: u64::try_from(stat.st_size).unwrap_or(0), mtime, identity, changed }
}

/// What a file type is to the walk; `None` for a type the file system did not give (`d_type` unknown).
fn kind_of(file_type: FileType) -> Option<EntryKind> {
    match file_type {
        FileType::RegularFile => Some(EntryKind::File),
        FileType::Directory => Some(EntryKind::Folder),
        FileType::Symlink => Some(EntryKind::Link),
        FileType::Unknown => None,
        _ => Some(EntryKind::Other),
    }
}

/// The mtime of a file whose own the catalogue cannot hold ([`mtime_of`]): a time no one dates a photo by.
pub const UNKNOWN_MTIME: DateTime<Utc> = DateTime::<Utc>::UNIX_EPOCH;

/// A file's mtime from its seconds and nanoseconds, to the microsecond. One the catalogue cannot hold (before
/// [`EARLIEST_TIME`], as a file system with 64-bit times allows, or past chrono's last year) is taken as unknown:
/// [`UNKNOWN_MTIME`], as it is on every crawl, so the file is neither failed for it nor seen as changed.
pub(crate) fn mtime_of(seconds: i64, nanoseconds: u32) -> DateTime<Utc> {
    let micros = seconds.saturating_mul(1_000_000).saturating_add(i64::from(nanoseconds / 1000));
    DateTime::from_timestamp_micros(micros).filter(|t| *t >= EARLIEST_TIME).unwrap_or(UNKNOWN_MTIME)
}

/// `dir/name` beneath a root, or `name` beneath the root itself (`dir` empty): how every path beneath a root is
/// made from its folder's path and a listed name.
pub fn join_beneath(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = dir.to_vec();
    if !out.is_empty() {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}

/// A path beneath a root (`/`-separated bytes) split into the folder holding it (`""`: the root) and its last name.
pub fn split_parent(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|b| *b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&rel[..0], rel),
    }
}

#[cfg(test)]
mod tests;
