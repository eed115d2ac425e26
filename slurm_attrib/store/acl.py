"""Let one more user read a file or folder through a POSIX access ACL (standard library only).

The results are written by EpilogSlurmctld's worker, running as SlurmUser, which cannot give a
file to the job's owner (only root may chown).  The file's owner may set its ACL, though: an entry
`user:<uid>:r` (r-x for a folder) lets the job's owner, and nobody else, read it while the mode
stays 0640/0750.  The ACL is set on the open descriptor as the kernel's `system.posix_acl_access`
extended attribute (the format of linux/posix_acl_xattr.h; `setfacl` writes the same), so no
path is looked up again and no `acl` package is needed.
"""

from __future__ import annotations

import os
import struct

_XATTR = "system.posix_acl_access"
_VERSION = 2
_UNDEFINED_ID = 0xFFFFFFFF
# Entry tags, in the order the kernel requires them.
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20


def grant_read(fd: int, uid: int, mode: int) -> bool:
    """Give `uid` the read (and, for a folder, search) bits of `mode`'s owner on the open `fd`,
    whose permission bits are already `mode`.  False when the filesystem takes no ACLs."""
    reader = (mode >> 6) & 0o5
    group = (mode >> 3) & 0o7
    entries = (
        (_USER_OBJ, (mode >> 6) & 0o7, _UNDEFINED_ID),
        (_USER, reader, uid),
        (_GROUP_OBJ, group, _UNDEFINED_ID),
        (_MASK, group | reader, _UNDEFINED_ID),
        (_OTHER, mode & 0o7, _UNDEFINED_ID),
    )
    value = struct.pack("<I", _VERSION) + b"".join(struct.pack("<HHI", *entry) for entry in entries)
    try:
        os.setxattr(fd, _XATTR, value)
    except OSError:  # EOPNOTSUPP: a filesystem mounted without ACLs (e.g. some NFS)
        return False
    return True

