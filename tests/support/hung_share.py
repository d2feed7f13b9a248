#!/usr/bin/python3
"""A library share whose server stopped answering, as an NFS or SMB mount of a NAS that was turned off: mounted at
argv[1] (FUSE): every look beneath its root (a lookup, a listing) waits, in the kernel, until this process ends.
Killed, it leaves a mount whose every call fails at once ("Transport endpoint is not connected") until it is
unmounted. Prints "mounted" once the mount answers."""
import errno
import stat
import sys
import threading

import llfuse

never = threading.Event()


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


llfuse.init(StoppedAnswering(), sys.argv[1], ["fsname=stopped-answering", "allow_other", "nonempty"])
print("mounted", flush=True)
try:
    llfuse.main(workers=64)
finally:
    llfuse.close(unmount=False)
