"""Keep glibc's heap from growing with a long ingest (peak RSS flat in corpus size).

Trade-off: a fixed mmap threshold costs a page-fault per large allocation while it is set,
so it is set only around the ingest loop and put back where glibc's own adaptation ends up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def steady_heap() -> Iterator[None]:
    """Keep glibc from growing the heap with the corpus (peak RSS flat in corpus size), then
    leave the allocator set for tensor work.

    glibc raises its mmap threshold each time a large block is freed, after which the
    multi-MB texts and id lists of every batch come from the heap, and the heap fragments
    and grows slowly over a long ingest (measured: 139 MB peak for 10 MB of books, 177 MB
    for 67 MB). A fixed 128 KB threshold sends large blocks back to the OS when freed.

    A fixed threshold also stops glibc's adaptation for the rest of the process, and at
    128 KB every activation tensor of a training step would be mmapped and page-faulted
    anew (a 4 x 256 step ran 1.7x slower after an ingest in the same process). On the way
    out the thresholds are set where glibc's adaptation ends up on its own (mmap 32 MB,
    trim 64 MB). Elsewhere than glibc this does nothing.
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    try:
        yield
    finally:
        if libc is not None:
            libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)
            libc.mallopt(_M_TRIM_THRESHOLD, 64 * 1024 * 1024)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def _glibc():
    """The process's C library through ctypes when it is glibc (it has mallopt), else None."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt  # noqa: B018 (present in glibc)
        return libc
    except (OSError, AttributeError):
        return None
