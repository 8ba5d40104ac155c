"""Keep freed heap memory for the next request instead of handing it back to the kernel.

A batch request is a few hundred KiB, and gRPC and protobuf copy it several times. glibc serves
blocks that large with mmap and unmaps them on free, so every copy lands on fresh pages, which are
slow to touch here (ARCHITECTURE.md, "Speed facts"): a 270 KiB request cost a broker about 1 ms of
CPU, and 0.45 ms once these blocks stay in the heap. The thresholds below make glibc keep them;
what the process holds beyond its live data is bounded by the trim threshold.
"""

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # the largest glibc accepts; above a batch's 16 MiB of bodies
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024

_kept: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process; False where that is not glibc."""
    global _kept
    if _kept is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
            _kept = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 \
                and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
        except (OSError, AttributeError):
            _kept = False
        if not _kept:
            log.debug("mallopt is not available: freed request buffers go back to the kernel")
    return _kept
