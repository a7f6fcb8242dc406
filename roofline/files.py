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
def atomic_write(path: str, flag: str, binary: bool = False) -> Iterator[IO]:
    """Open a temp file next to `path`; on success give it the usual permissions and rename it to `path`.

    `flag` names the option the path came from, for the one-line error when the folder is not writable.
    """
    target = checked_target(path, flag)
    folder = target.parent
    try:
        handle, temp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise UsageError(f"{flag}: cannot write in {shown(str(folder))} ({e.strerror})") from None
    try:
        with os.fdopen(handle, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            yield f
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp makes 0600; a result file should read like any other
        os.replace(temp, target)
    except OSError as e:  # the name is too long, the disk is full, the target became a folder
        Path(temp).unlink(missing_ok=True)
        raise UsageError(f"{flag}: cannot write {shown(path)} ({e.strerror})") from None
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
