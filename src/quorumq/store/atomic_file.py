"""Replace a small file so that a crash leaves either the old or the new content, never a mix."""

import os
from pathlib import Path

from quorumq.store.commit_log import fsync_directory


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a temporary file, fsync it, rename it over `path`, then fsync the directory. `mode`:
    the permissions of a file this makes."""
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    fsync_directory(path.parent)
