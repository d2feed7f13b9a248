#!/usr/bin/python3
"""A library share whose server stopped answering, as an NFS or SMB mount of a NAS that was turned off, mounted at
argv[1] (FUSE). Prints "mounted" once the mount answers.

- `hung_share.py MOUNT`: every look beneath its root (a lookup, a listing) waits, in the kernel, until this process
  ends.
- `hung_share.py MOUNT SOURCE LOG`: the folder SOURCE, read-only, until the server stops answering in the middle of
  a crawl: listing a folder, or reading a file, whose name holds `stops-answering` waits until this process ends (its
  lookup and attributes still answer, so the crawl finds it, and only then waits). Each such wait starts with a line
  `waiting <path>` in the file LOG.

Killed, it leaves a mount whose every call fails at once ("Transport endpoint is not connected") until it is
unmounted."""
import errno
import os
import stat
import sys
import threading

import llfuse

never = threading.Event()
STOPS = "stops-answering"


class StoppedAnswering(llfuse.Operations):
    def getattr(self, inode, ctx=None):
        if inode != llfuse.ROOT_INODE:
            raise llfuse.FUSEError(errno.ENOENT)
        attributes = llfuse.EntryAttributes()
        attributes.st_ino = inode
        attributes.st_mode = stat.S_IFDIR | 0o755
        attributes.st_nlink = 2
        attributes.attr_timeout = attributes.entry_timeout = 0
        return attributes

    def lookup(self, parent, name, ctx=None):
        never.wait()
        raise llfuse.FUSEError(errno.EIO)

    def opendir(self, inode, ctx):
        never.wait()
        raise llfuse.FUSEError(errno.EIO)

    def statfs(self, ctx):
        never.wait()
        raise llfuse.FUSEError(errno.EIO)


class StopsAnsweringMidway(llfuse.Operations):
    """SOURCE served read-only, each path its own inode, until a name holding STOPS is listed or read."""

    def __init__(self, source, log):
        super().__init__()
        self.paths = {llfuse.ROOT_INODE: source}
        self.inodes = {source: llfuse.ROOT_INODE}
        self.log = log
        self.lock = threading.Lock()

    def inode(self, path):
        with self.lock:
            if path not in self.inodes:
                self.inodes[path] = len(self.paths) + llfuse.ROOT_INODE
                self.paths[self.inodes[path]] = path
            return self.inodes[path]

    def attributes(self, path):
        try:
            st = os.lstat(path)
        except OSError as e:
            raise llfuse.FUSEError(e.errno)
        attributes = llfuse.EntryAttributes()
        attributes.st_ino = self.inode(path)
        for field in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns",
                      "st_ctime_ns"):
            setattr(attributes, field, getattr(st, field))
        attributes.st_blksize = 4096
        attributes.st_blocks = (st.st_size + 511) // 512
        attributes.attr_timeout = attributes.entry_timeout = 0
        return attributes

    def stops_answering(self, path):
        if STOPS in os.path.basename(path):
            with open(self.log, "a") as log:
                log.write(f"waiting {path}\n")
            # Without llfuse's global lock, which every other call takes: they go on answering.
            with llfuse.lock_released:
                never.wait()
            raise llfuse.FUSEError(errno.EIO)

    def getattr(self, inode, ctx=None):
        return self.attributes(self.paths[inode])

    def lookup(self, parent, name, ctx=None):
        return self.attributes(os.path.join(self.paths[parent], os.fsdecode(name)))

    def opendir(self, inode, ctx):
        self.stops_answering(self.paths[inode])
        return inode

    def readdir(self, inode, offset):
        names = sorted(os.listdir(self.paths[inode]))
        for i, name in enumerate(names[offset:], offset):
            yield os.fsencode(name), self.attributes(os.path.join(self.paths[inode], name)), i + 1

    def releasedir(self, inode):
        pass

    def open(self, inode, flags, ctx):
        return os.open(self.paths[inode], os.O_RDONLY)

    def read(self, fd, offset, size):
        self.stops_answering(os.readlink(f"/proc/self/fd/{fd}"))
        return os.pread(fd, size, offset)

    def release(self, fd):
        os.close(fd)

    def statfs(self, ctx):
        answer = llfuse.StatvfsData()
        st = os.statvfs(self.paths[llfuse.ROOT_INODE])
        for field in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
            setattr(answer, field, getattr(st, field))
        answer.f_namemax = st.f_namemax
        return answer


share = StoppedAnswering() if len(sys.argv) == 2 else StopsAnsweringMidway(sys.argv[2], sys.argv[3])
llfuse.init(share, sys.argv[1], ["fsname=stopped-answering", "allow_other", "nonempty"])
print("mounted", flush=True)
try:
    llfuse.main(workers=64)
finally:
    llfuse.close(unmount=False)
