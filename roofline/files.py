"""Writing result files atomically: a temp file in the target's folder, then a rename; nothing half-written."""

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from roofline.errors import UsageError, shown


def checked_target(path: str, flag: str) -> Path:
    """The path to write, checked before any work: not a folder nor a device, pipe or socket, in a folder that
    exists; a symlink's target (the rename then replaces the file it points to, not the link)."""
    try:
        if not path.strip():
            raise UsageError(f"{flag}: expected a file path, got an empty one")
        target = Path(os.path.realpath(Path(path).expanduser()))
        if target.is_dir():
            raise UsageError(f"{flag}: {shown(path)} is a folder (expected a file path)")
        if target.exists() and not target.is_file():
            raise UsageError(f"{flag}: {shown(path)} is not a regular file (a device, pipe or socket)")
        if not target.parent.is_dir():
            raise UsageError(f"{flag}: no such folder {shown(str(target.parent))}")
    except RuntimeError:
        raise UsageError(f"{flag}: cannot expand ~ in {shown(path)} (no such user)") from None
    except OSError as e:
        raise UsageError(f"{flag}: cannot use {shown(path)} ({e.strerror})") from None
    return target


@contextmanager
def atomic_path(path: str, flag: str) -> Iterator[Path]:
    """A temp file's path next to `path` for a writer that takes a path (gguf's); on success it gets the usual
    permissions and is renamed to `path`; on any failure it is removed. `flag` names the option the path came from,
    for the one-line errors (a folder not writable, a name too long, a full disk)."""
    target = checked_target(path, flag)
    folder = target.parent
    try:
        handle, temp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise UsageError(f"{flag}: cannot write in {shown(str(folder))} ({e.strerror})") from None
    os.close(handle)
    try:
        yield Path(temp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp makes 0600; a result file should read like any other
        os.replace(temp, target)
    except OSError as e:  # the name is too long, the disk is full, the target became a folder
        raise UsageError(f"{flag}: cannot write {shown(path)} ({e.strerror})") from None
    finally:
        Path(temp).unlink(missing_ok=True)


@contextmanager
def atomic_write(path: str, flag: str, binary: bool = False) -> Iterator[IO]:
    """Open a temp file next to `path` (atomic_path); on success it is renamed to `path`, nothing half-written."""
    with atomic_path(path, flag) as temp:
        with open(temp, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            yield f
