"""Refusing, before any work, results that cannot fit in this machine's memory."""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=None)
def physical_memory() -> int:
    """Bytes of physical memory (a large number when the platform does not say). Asked once:
    the two system calls cost more than a small product."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def check_alloc(nbytes: int, what: str) -> None:
    """Raise ``MemoryError`` naming ``what`` and the bytes needed when they exceed the
    machine's physical memory."""
    total = physical_memory()
    if nbytes > total:
        raise MemoryError(
            f"{what} would need {nbytes:,} bytes ({nbytes / 2**30:.1f} GiB), more than this machine's "
            f"{total / 2**30:.1f} GiB of memory"
        )
