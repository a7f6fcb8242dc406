"""Writing result files atomically: a temp file in the target's folder, then a rename; nothing half-written."""

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from roofline.errors import UsageError


@contextmanager
def atomic_write(path: str, flag: str, binary: bool = False) -> Iterator[IO]:
    """Open a temp file next to `path`; on success give it the usual permissions and rename it to `path`.

    `flag` names the option the path came from, for the one-line error when the folder is not writable.
    """
    target = Path(path).expanduser()
    if target.is_dir():
        raise UsageError(f"{flag}: {path} is a folder (expected a file path)")
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(f"{flag}: no such folder {str(folder)!r}")
    try:
        handle, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise UsageError(f"{flag}: cannot write in {str(folder)!r} ({e.strerror})") from None
    try:
        with os.fdopen(handle, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            yield f
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp makes 0600; a result file should read like any other
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
