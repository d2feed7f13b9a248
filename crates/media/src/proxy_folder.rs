//! One file's proxy folder, held open while its proxies are made. It is made one level at a time from the proxy
//! root's handle, never through a link ([`make_proxy_folder`]). Every proxy is then written into the folder's scratch
//! folder, which this process makes for itself alone ([`ProxyFolder::scratch`]), by us through its handle or by a
//! tool given its output's name through that handle ([`Scratch::for_tool`]), and renamed into the folder by both
//! handles. So a link swapped in for the folder (or one above it) while the proxies are made (seconds to minutes: a
//! still waits for the pixel budget, a video for its transcode) redirects nothing, and nobody else can put a link
//! where a tool writes. [`ProxyFolder::still_in_place`] tells the caller, before it records anything, that what
//! stands at the folder's path is no longer the folder that was written.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use almanac_domain::ProxyType;
use almanac_domain::ports::PROXY_SCRATCH_FOLDER;
use rustix::fs::{AtFlags, CWD, Mode, OFlags};
use rustix::io::Errno;

use crate::MediaError;

/// Handles for finding only (`O_PATH`): a folder the Worker may write and search but not list is no refusal.
const FIND: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// The folder of one file's proxies (`<config>/<prefix>/<hash>` beneath the proxy root), open. See the module.
#[derive(Debug)]
pub struct ProxyFolder {
    /// The folder itself, open for reading (its flush needs more than a handle for finding), and where it was made:
    /// for messages, and to tell whether it is still there.
    dir: Held,
    /// The folder it is in, and its name there: to remove it again when nothing was made in it.
    parent: OwnedFd,
    name: OsString,
    /// The proxy root and the folder's path beneath it, as given.
    root: PathBuf,
    relative: PathBuf,
}

/// Makes the folders of one file's proxies, `relative` beneath `proxy_root` (`<config>/<prefix>/<hash>`), one at a
/// time and never through a link: a link (or a file) where one of them should be is refused, and nothing is made
/// beneath it. `create_dir_all` followed a link planted there (by anyone else who may write the proxy volume) and the
/// proxies were written wherever it pointed. The proxy root itself may be a link (the operator's choice). Answers the
/// folder, open. Blocking.
pub fn make_proxy_folder(proxy_root: &Path, relative: &Path) -> Result<ProxyFolder, MediaError> {
    let names = plain_names(proxy_root, relative)?;
    let (last, above) = names.split_last().ok_or_else(|| beneath_the_root(proxy_root, relative))?;
    let mut parent = rustix::fs::openat(CWD, proxy_root, FIND, Mode::empty())
        .map_err(|e| MediaError::write(proxy_root, e.into()))?;
    let mut path = proxy_root.to_path_buf();
    for name in above {
        path.push(name);
        parent = make_one(&parent, name, &path, FIND)?;
    }
    path.push(last);
    let dir = make_one(&parent, last, &path, READ)?;
    let (root, relative) = (proxy_root.to_owned(), relative.to_owned());
    Ok(ProxyFolder { dir: Held { path, fd: dir }, parent, name: last.to_os_string(), root, relative })
}

/// The names of `relative`, each a plain name: anything else (`..`, `/`) is refused.
fn plain_names<'a>(proxy_root: &Path, relative: &'a Path) -> Result<Vec<&'a OsStr>, MediaError> {
    relative
        .components()
        .map(|part| match part {
            Component::Normal(name) => Ok(name),
            _ => Err(beneath_the_root(proxy_root, relative)),
        })
        .collect()
}

fn beneath_the_root(proxy_root: &Path, relative: &Path) -> MediaError {
    let e = std::io::Error::other(format!("{} is not a folder beneath the proxy root", relative.display()));
    MediaError::write(proxy_root.join(relative), e)
}

/// A folder opened for reading: its flush and its listing need more than a handle for finding.
const READ: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// Makes the folder `name` in `parent` if it is not there, and opens it with `flags` ([`open_one`]).
fn make_one(parent: &OwnedFd, name: &OsStr, path: &Path, flags: OFlags) -> Result<OwnedFd, MediaError> {
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o777)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(MediaError::write(path, e.into())),
    }
    open_one(parent, name, path, flags)
}

/// Opens the folder `name` in `parent` (at `path`, for messages) with `flags`, never through a link: a link or a file
/// there is a [`MediaError::ProxyFolderNotAFolder`].
fn open_one(parent: &OwnedFd, name: &OsStr, path: &Path, flags: OFlags) -> Result<OwnedFd, MediaError> {
    rustix::fs::openat(parent, name, flags | OFlags::NOFOLLOW, Mode::empty()).map_err(|e| match e {
        // A link: ENOTDIR (O_DIRECTORY is checked first) or ELOOP; a file: ENOTDIR.
        Errno::LOOP | Errno::NOTDIR => not_a_folder(path.to_owned()),
        e => MediaError::write(path, e.into()),
    })
}

/// The refusal of what stands at `path`, where a proxy folder should be: a link, or a file.
pub(crate) fn not_a_folder(path: PathBuf) -> MediaError {
    let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
    MediaError::ProxyFolderNotAFolder { path, what: if link { "a link" } else { "a file" } }
}

impl ProxyFolder {
    /// Where the folder was made (for messages: nothing is reached through it).
    pub fn path(&self) -> &Path {
        &self.dir.path
    }

    /// Whether what stands at the folder's path now is the folder this handle holds: a [`MediaError::ProxyFolderMoved`]
    /// when the folder, or one above it beneath the proxy root, was moved, removed or swapped for a link since it was
    /// made. Its proxies were then written into the folder itself, wherever it went, and a proxy recorded at the path
    /// would be read through whatever stands there now. Asked before the file's rows are written: a swap after it
    /// is not seen (whatever reads proxies must itself open them without following a link). Blocking.
    pub fn still_in_place(&self) -> Result<(), MediaError> {
        let moved = || MediaError::ProxyFolderMoved { path: self.dir.path.clone() };
        let mut at = rustix::fs::openat(CWD, &self.root, FIND, Mode::empty())
            .map_err(|e| MediaError::write(&self.root, e.into()))?;
        let mut path = self.root.clone();
        for name in plain_names(&self.root, &self.relative)? {
            path.push(name);
            at = match rustix::fs::openat(&at, name, FIND | OFlags::NOFOLLOW, Mode::empty()) {
                Ok(next) => next,
                Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => return Err(moved()),
                Err(e) => return Err(MediaError::write(&path, e.into())),
            };
        }
        let (there, ours) = (rustix::fs::fstat(&at), rustix::fs::fstat(&self.dir.fd));
        match (there, ours) {
            (Ok(there), Ok(ours)) if (there.st_dev, there.st_ino) == (ours.st_dev, ours.st_ino) => Ok(()),
            (_, Err(e)) | (Err(e), _) => Err(MediaError::write(&self.dir.path, e.into())),
            _ => Err(moved()),
        }
    }

    /// Removes the folder when it is empty (a file whose proxies were not made), through its parent's handle: a link
    /// swapped in at its name is left alone. Best effort.
    pub fn remove_if_empty(&self) {
        let _ = rustix::fs::unlinkat(&self.parent, &self.name, AtFlags::REMOVEDIR);
    }

    /// The folder's scratch folder ([`PROXY_SCRATCH_FOLDER`]), made anew for this process alone: where every proxy
    /// of the file is written, by us or a tool, before [`Scratch::place`] renames it into the folder. What stood there
    /// goes first ([`ProxyFolder::remove_left_scratch`]); what cannot go is refused, naming it. The new one is
    /// refused unless it is this process's alone ([`ours_alone`]). Nobody else may then make anything in it, so nothing
    /// another user places (a link at a tool's output) is met. Removed with what is left in it when the answer is
    /// dropped. One at a time: a second would empty the first.
    pub(crate) fn scratch(&self) -> Result<Scratch<'_>, MediaError> {
        let path = self.dir.path.join(PROXY_SCRATCH_FOLDER);
        self.remove_left_scratch(&path);
        match rustix::fs::mkdirat(&self.dir.fd, PROXY_SCRATCH_FOLDER, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            // The folder itself was removed meanwhile (the sweep emptied it): nothing can be made in it.
            Err(Errno::NOENT) => return Err(MediaError::ProxyFolderMoved { path: self.dir.path.clone() }),
            Err(Errno::EXIST) => {
                let shown = rustix::fs::statat(&self.dir.fd, PROXY_SCRATCH_FOLDER, AtFlags::SYMLINK_NOFOLLOW)
                    .map_or_else(
                        |_| String::new(),
                        |s| format!(" (owner {}, mode {:o})", s.st_uid, s.st_mode & 0o7777),
                    );
                let reason = format!(
                    "a folder stands there{shown} that the Worker did not leave (another user's, a sticky one, or one \
                     holding a folder, or one it may not empty: a Worker run once as root leaves one), and it empties \
                     only its own; remove it (rm -r, as its owner or root), the Worker makes it again"
                );
                return Err(MediaError::ProxyScratchRefused { path, reason });
            }
            Err(e) => return Err(MediaError::write(&path, e.into())),
        }
        #[cfg(test)]
        tests::BEFORE_OPENING_SCRATCH.with(|hook| hook.borrow_mut().as_mut().map(|h| h(&path)));
        let fd = open_one(&self.dir.fd, PROXY_SCRATCH_FOLDER.as_ref(), &path, READ)?;
        let dir = Held { path, fd };
        if let Err(refused) = ours_alone(&dir) {
            // Only the empty folder just made (or another's, empty, put in its place) can go.
            self.remove_empty_scratch();
            return Err(refused);
        }
        Ok(Scratch { folder: self, dir })
    }

    /// Removes the scratch folder a killed Worker left, with what is in it, or a link or a file at its name (unlinked,
    /// never followed). A folder there that the Worker did not leave is not emptied: a sticky one (a shared folder
    /// moved there, whose files their owners alone may delete), or one owned by neither this process's user nor the
    /// proxy folder's owner (the owner a volume that squashes users gives what the Worker makes). Whatever else is in
    /// one the Worker may empty, anyone who may write it could delete.
    fn remove_left_scratch(&self, path: &Path) {
        match rustix::fs::openat(&self.dir.fd, PROXY_SCRATCH_FOLDER, READ | OFlags::NOFOLLOW, Mode::empty()) {
            // Nothing there, as nearly always: no more calls (on a NAS, each is a round trip).
            Err(Errno::NOENT) => return,
            Err(_) => {}
            Ok(fd) => {
                let left = Held { path: path.to_owned(), fd };
                let (there, folder) = (rustix::fs::fstat(&left.fd), rustix::fs::fstat(&self.dir.fd));
                let left_by_a_worker = there.is_ok_and(|t| {
                    let owner =
                        t.st_uid == rustix::process::geteuid().as_raw() || folder.is_ok_and(|f| f.st_uid == t.st_uid);
                    owner && t.st_mode & 0o1000 == 0
                });
                if left_by_a_worker {
                    left.empty();
                }
            }
        }
        if !self.remove_empty_scratch() {
            let _ = rustix::fs::unlinkat(&self.dir.fd, PROXY_SCRATCH_FOLDER, AtFlags::empty());
        }
    }

    /// Removes the scratch folder if it is empty (`rmdir` removes no other); whether it did.
    fn remove_empty_scratch(&self) -> bool {
        rustix::fs::unlinkat(&self.dir.fd, PROXY_SCRATCH_FOLDER, AtFlags::REMOVEDIR).is_ok()
    }

    /// Makes the folder's entries durable (after a rename into it), so a power cut cannot leave a proxy row pointing
    /// at a name that never reached the disk.
    pub(crate) fn sync(&self) -> Result<(), MediaError> {
        rustix::fs::fsync(&self.dir.fd).map_err(|e| MediaError::write(&self.dir.path, e.into()))
    }

    /// Writes a still's proxies, each under its temporary name in the scratch folder, flushed and read back (it must
    /// hold exactly the bytes given: a write cut short is never renamed), then renames all of them into place and
    /// flushes the folder once. On any error nothing takes its final name. Every error is a
    /// [`MediaError::ProxyWrite`].
    pub(crate) fn write_proxies(&self, files: &[(ProxyType, &[u8])]) -> Result<(), MediaError> {
        let scratch = self.scratch()?;
        let names: Vec<(&str, &str)> = files
            .iter()
            .map(|(proxy, _)| (crate::still::file_name(*proxy), proxy.temporary_file_name().expect("a file proxy")))
            .collect();
        for ((_, bytes), (_, tmp)) in files.iter().zip(&names) {
            scratch.write_whole(tmp, bytes)?;
        }
        for (name, tmp) in &names {
            scratch.place(tmp, name)?;
        }
        self.sync()
    }
}

/// A folder held open, with its path for messages.
#[derive(Debug)]
struct Held {
    path: PathBuf,
    fd: OwnedFd,
}

impl Held {
    fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Removes `name` (a file). Best effort.
    fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
    }

    /// Opens the file `name` for reading, never through a link.
    fn open(&self, name: &str) -> std::io::Result<std::fs::File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(rustix::fs::openat(&self.fd, name, flags, Mode::empty())?.into())
    }

    /// The size of the file `name` (a link or anything else that is not a file is an error). Looked at, never
    /// opened: opening a pipe placed there would wait for ever.
    fn size(&self, name: &str) -> Result<u64, MediaError> {
        let stat = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| MediaError::write(self.join(name), e.into()))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(MediaError::write(self.join(name), std::io::Error::other("it is not a file")));
        }
        Ok(stat.st_size as u64)
    }

    /// Whether the folder holds nothing.
    fn is_empty(&self) -> Result<bool, Errno> {
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let name = entry?.file_name().to_bytes().to_owned();
            if name != b"." && name != b".." {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Removes every file in the folder. Best effort.
    fn empty(&self) {
        for name in self.names() {
            let _ = rustix::fs::unlinkat(&self.fd, name.as_os_str(), AtFlags::empty());
        }
    }

    /// The names in the folder (those that cannot be read are left out).
    fn names(&self) -> Vec<OsString> {
        let Ok(dir) = rustix::fs::Dir::read_from(&self.fd) else { return Vec::new() };
        dir.flatten()
            .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
            .filter(|n| n != "." && n != "..")
            .collect()
    }
}

/// A file's scratch folder, open ([`ProxyFolder::scratch`]): written by this process and the tools it starts alone.
/// Emptied and removed when dropped.
#[derive(Debug)]
pub(crate) struct Scratch<'a> {
    folder: &'a ProxyFolder,
    dir: Held,
}

impl Scratch<'_> {
    /// The path of `name` in the scratch folder, for messages.
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The name a tool is given for `name` in the scratch folder: the kernel resolves it through this handle,
    /// whatever stands at the folder's path. Valid only in a tool started with the handle handed down to it
    /// ([`crate::tool::Given`]).
    pub(crate) fn for_tool(&self, name: &str) -> OsString {
        crate::tool::through_handle(self.dir.fd.as_raw_fd(), name).into()
    }

    /// The handle a tool writing here inherits, and the folder's path for its words (see [`Scratch::for_tool`]).
    pub(crate) fn handle(&self) -> (BorrowedFd<'_>, &Path) {
        use std::os::fd::AsFd;
        (self.dir.fd.as_fd(), &self.dir.path)
    }

    /// Writes `bytes` to `tmp`, flushes them to disk and reads them back: a short write, an error of the disk or a
    /// file system that drops data is an error here, not a proxy cut short later.
    fn write_whole(&self, tmp: &str, bytes: &[u8]) -> Result<(), MediaError> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let failed = |e| MediaError::write(self.join(tmp), e);
        let fd =
            rustix::fs::openat(&self.dir.fd, tmp, flags, Mode::from_raw_mode(0o666)).map_err(|e| failed(e.into()))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes).map_err(failed)?;
        file.sync_data().map_err(failed)?;
        let mut back = Vec::with_capacity(bytes.len() + 1);
        file.rewind().and_then(|()| (&file).take(bytes.len() as u64 + 1).read_to_end(&mut back)).map_err(failed)?;
        if back != bytes {
            let e = std::io::Error::other(format!(
                "{} bytes were written but {} other bytes were read back (the file system lost data)",
                bytes.len(),
                back.len()
            ));
            return Err(failed(e));
        }
        Ok(())
    }

    /// Removes `name` (one of ours that did not take its name). Best effort.
    pub(crate) fn remove(&self, name: &str) {
        self.dir.remove(name);
    }

    /// The size of the file `name`.
    pub(crate) fn size(&self, name: &str) -> Result<u64, MediaError> {
        self.dir.size(name)
    }

    /// The content of the file `name`, read on a blocking thread: the full-size JPEG of a HEIC is tens of MB, and
    /// reading it back from a NAS would hold a thread of the runtime (the heartbeats, the page) all that time.
    pub(crate) async fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        let mut file = self.dir.open(name)?;
        off_the_runtime(move || {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map(|_| bytes)
        })
        .await
    }

    /// Whether `name` is a file with something in it.
    pub(crate) fn is_non_empty(&self, name: &str) -> bool {
        self.dir.size(name).is_ok_and(|n| n > 0)
    }

    /// Flushes the finished file `name` to disk before it is renamed into place, on a blocking thread: a web video
    /// is hundreds of MB, and flushing it to a NAS or a USB disk takes seconds to minutes.
    pub(crate) async fn sync_file(&self, name: &str) -> Result<(), MediaError> {
        let failed = |e| MediaError::write(self.join(name), e);
        let file = self.dir.open(name).map_err(failed)?;
        off_the_runtime(move || file.sync_all()).await.map_err(failed)
    }

    /// Renames `tmp` in the scratch folder to `name` in the proxy folder: the proxy takes its name.
    pub(crate) fn place(&self, tmp: &str, name: &str) -> Result<(), MediaError> {
        rustix::fs::renameat(&self.dir.fd, tmp, &self.folder.dir.fd, name)
            .map_err(|e| MediaError::write(self.folder.dir.join(name), e.into()))
    }
}

/// `io` on a blocking thread, its file owned by it (a runtime's thread waiting on the disk is one fewer for every
/// other task).
async fn off_the_runtime<T: Send + 'static>(
    io: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(io)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(format!("it ended abnormally: {e}"))))
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        self.dir.empty();
        self.folder.remove_empty_scratch();
    }
}

mod ours;
use ours::ours_alone;

#[cfg(test)]
mod tests;
