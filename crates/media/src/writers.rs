//! Whether anyone has a file open for writing now, asked of the kernel (ADR 0014, amendment 1).
//!
//! A watcher sees a file *arrive* (renamed into the library, or found in a folder that appeared with files
//! already in it) without having seen it closed: whether it is complete is then known only if no process has it
//! open for writing. The kernel answers that through a read lease (`fcntl(F_SETLEASE, F_RDLCK)`), which it grants
//! only when no one, on this machine or through its file servers (Samba, the kernel's NFS server while it holds
//! the file), has the file open for writing. The lease is given back at once.
//!
//! The kernel tells a lease's holder when another process opens the file for writing while it holds it, by a
//! signal, SIGIO unless told otherwise, whose default action ends the process. The lease is held for a few
//! system calls, but a writer opening the file within them must not end the Worker: the signal is set to SIGURG
//! first, which a process ignores unless it handles it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

/// `fcntl`'s command that chooses the signal sent to a descriptor's owner: 10 on every Linux architecture
/// (`asm-generic/fcntl.h`); the libc crate lists it for musl only.
const F_SETSIG: libc::c_int = 10;

/// Whether a file is open for writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writers {
    /// No process has it open for writing.
    None,
    /// Some process has it open for writing (or a file server holds it under a lease of its own).
    Some,
    /// No telling: this process may not take a lease on it (neither its owner nor given `CAP_LEASE`).
    NotAllowed,
    /// No telling: it is gone or not a regular file, or its file system grants no lease (network file systems).
    Unknown,
}

/// Whether anyone has the regular file at `path` open for writing now (a link is not followed: `Unknown`).
pub fn writers(path: &Path) -> Writers {
    match ReadLease::take(path) {
        Ok(lease) => {
            drop(lease);
            Writers::None
        }
        Err(writers) => writers,
    }
}

/// How a file is opened for its lease: to read, never through a link, without waiting (see [`ReadLease::take`]),
/// kept from children, and never made this process's terminal.
const LEASE_OPEN: OFlags =
    OFlags::RDONLY.union(OFlags::NOFOLLOW).union(OFlags::NONBLOCK).union(OFlags::CLOEXEC).union(OFlags::NOCTTY);

/// A read lease on a file, given back when dropped: a lease lasts as long as the open file it was taken on, and
/// the descriptor, opened close-on-exec, is the only one there is of it.
struct ReadLease {
    _open: OwnedFd,
}

impl ReadLease {
    /// Takes a read lease on the regular file at `path`; answers why not otherwise.
    fn take(path: &Path) -> Result<Self, Writers> {
        // Non-blocking: an open that would break another's lease (Samba's oplocks) fails instead of waiting for
        // it, which says that a server holds the file.
        let fd = match rustix::fs::open(path, LEASE_OPEN, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(Writers::Some),
            Err(_) => return Err(Writers::Unknown),
        };
        match rustix::fs::fstat(&fd) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {}
            _ => return Err(Writers::Unknown),
        }
        let raw = fd.as_raw_fd();
        // SAFETY: `fcntl` with F_SETSIG takes an integer argument and touches no memory of ours; `raw` is the
        // open descriptor `fd` owns, alive for the call.
        #[allow(unsafe_code)]
        let signal = unsafe { libc::fcntl(raw, F_SETSIG, libc::SIGURG) };
        if signal != 0 {
            return Err(Writers::Unknown);
        }
        // SAFETY: as above, F_SETLEASE with an integer argument.
        #[allow(unsafe_code)]
        let lease = unsafe { libc::fcntl(raw, libc::F_SETLEASE, libc::F_RDLCK) };
        if lease == 0 {
            return Ok(ReadLease { _open: fd });
        }
        match rustix::io::Errno::from_io_error(&std::io::Error::last_os_error()) {
            // Open for writing (EAGAIN), or a lease being broken (EBUSY).
            Some(rustix::io::Errno::AGAIN | rustix::io::Errno::BUSY) => Err(Writers::Some),
            Some(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => Err(Writers::NotAllowed),
            _ => Err(Writers::Unknown),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, Instant};

    #[test]
    fn a_file_open_for_writing_has_writers_and_a_closed_one_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jpg");
        std::fs::write(&path, b"jpeg").unwrap();
        assert_eq!(writers(&path), Writers::None);
        let writing = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        assert_eq!(writers(&path), Writers::Some);
        let reading = std::fs::File::open(&path).unwrap();
        assert_eq!(writers(&path), Writers::Some, "a reader beside the writer changes nothing");
        drop(writing);
        assert_eq!(writers(&path), Writers::None, "readers are no writers");
        drop(reading);
    }

    #[test]
    fn a_link_a_folder_or_nothing_cannot_be_told() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a.jpg");
        std::fs::write(&target, b"jpeg").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("link.jpg")).unwrap();
        assert_eq!(writers(&dir.path().join("link.jpg")), Writers::Unknown, "a link is not followed");
        assert_eq!(writers(dir.path()), Writers::Unknown);
        assert_eq!(writers(&dir.path().join("missing.jpg")), Writers::Unknown);
    }

    /// A file this process does not own, asked by a thread without `CAP_LEASE` (capabilities are per thread): no
    /// lease may be taken, which is told apart from a file that cannot be asked about.
    #[test]
    fn without_cap_lease_a_file_of_another_user_cannot_be_asked_about() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jpg");
        std::fs::write(&path, b"jpeg").unwrap();
        // A folder and a FIFO of the same owner are no regular files: they cannot be told, allowed or not.
        let folder = dir.path().join("a folder.jpg");
        std::fs::create_dir(&folder).unwrap();
        let fifo = dir.path().join("a fifo.jpg");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0).unwrap();
        let mine = rustix::process::getuid();
        let other = if mine.is_root() { rustix::process::Uid::from_raw(65534) } else { mine };
        if mine.is_root() {
            for p in [&path, &folder, &fifo] {
                rustix::fs::chown(p, Some(other), None).unwrap();
            }
        }
        let asked = std::thread::spawn(move || {
            crate::fixtures::without_cap_lease();
            [writers(&path), writers(&folder), writers(&fifo)]
        });
        let [answer, folder, fifo] = asked.join().unwrap();
        if mine.is_root() {
            assert_eq!(answer, Writers::NotAllowed);
        } else {
            // Not root: the file is this user's own, whose leases need no capability.
            assert_eq!(answer, Writers::None);
        }
        assert_eq!((folder, fifo), (Writers::Unknown, Writers::Unknown));
    }

    /// The descriptor a lease is held on is not handed to a child started meanwhile (which would hold the file
    /// open, and so the lease, after it is given back).
    #[test]
    fn a_child_started_during_a_lease_does_not_inherit_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jpg");
        std::fs::write(&path, b"jpeg").unwrap();
        let lease = ReadLease::take(&path).expect("a lease on a file nobody writes");
        let fd = lease._open.as_raw_fd();
        let child = std::process::Command::new("sh")
            .args(["-c", &format!("test -e /proc/self/fd/{fd} && echo open || echo closed")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&child.stdout).trim(), "closed");
        drop(lease);
    }

    /// Forces a writer to open the file while the lease is held: the kernel signals the holder, which must not
    /// end this process (SIGIO's default action would); the writer goes on once the lease is given back.
    #[test]
    fn a_writer_opening_the_file_during_the_lease_ends_nothing_and_waits_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jpg");
        std::fs::write(&path, b"jpeg").unwrap();
        let lease = ReadLease::take(&path).unwrap();
        let at = path.clone();
        let writer = std::thread::spawn(move || {
            let mut file = std::fs::OpenOptions::new().append(true).open(at)?;
            std::io::Write::write_all(&mut file, b" more")
        });
        // The kernel lists the lease as breaking once the writer's open waits on it.
        let ino = std::fs::metadata(&path).unwrap().ino();
        let breaking = |locks: &str| {
            locks.lines().any(|l| l.contains("LEASE") && l.contains("BREAK") && l.contains(&format!(":{ino} ")))
        };
        let deadline = Instant::now() + Duration::from_secs(40);
        while !breaking(&std::fs::read_to_string("/proc/locks").unwrap()) {
            assert!(Instant::now() < deadline, "the writer's open never waited on the lease");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(lease);
        writer.join().unwrap().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"jpeg more");
        assert_eq!(writers(&path), Writers::None);
    }
}
