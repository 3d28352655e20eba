"""One remote shard as the manifest records it (URL, size, sha256), the name of its cached copy,
and whether a file holds it: trusted when read-only, else its bytes checked."""
from __future__ import annotations

import hashlib
import os
import stat as stat_module
from dataclasses import dataclass

CHUNK = 4 << 20
WRITABLE = 0o222  # a cached shard with any write bit set has not been verified (by this iofeed)


@dataclass(frozen=True)
class ShardRef:
    """One remote shard: its URL, and the size and checksum the manifest records for it."""

    url: str
    bytes: int
    sha256: str = ""  # empty for datasets written before checksums: verified by size only

    @property
    def cached_name(self) -> str:
        """The file name of its verified copy."""
        tag = self.sha256[:16] if self.sha256 else f"size{self.bytes}"
        return f"{self.url.rsplit('/', 1)[-1]}~{tag}"


def trusted(stat: os.stat_result, size: int) -> bool:
    """Whether a cached file can be served as is: a regular file of the right size, still linked,
    made read-only by the download that verified it."""
    return (stat_module.S_ISREG(stat.st_mode) and stat.st_nlink > 0 and stat.st_size == size
            and not stat.st_mode & WRITABLE)


def check_bytes(fd: int, ref: ShardRef) -> str | None:
    """What is wrong with the bytes of `fd` against `ref` (size, then sha256), or None."""
    digest, offset = hashlib.sha256(), 0
    while chunk := os.pread(fd, CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    if offset != ref.bytes:
        return f"{offset} bytes where iofeed.json records {ref.bytes}"
    if ref.sha256 and digest.hexdigest() != ref.sha256:
        return f"sha256 {digest.hexdigest()[:16]}... where iofeed.json records {ref.sha256[:16]}..."
    return None
