"""Files: a JSON input read with a clear error, and outputs written whole or not at all.

Every command that reads a graph, plan or platform reads it here, and every output file (plans, pictures,
calibrated graphs) is written here: to temporaries first, renamed into place together, so that a run that fails
or is stopped leaves no half-written file (see ``cli._exit_on_signal``).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from .errors import InputError

__all__ = ["read_json", "write_files_atomic", "write_text_atomic"]


def read_json(path: str | Path):
    """Read a JSON file, turning every failure into an InputError that names the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it ({exc.__class__.__name__})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a graph, plan or platform") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def write_text_atomic(path: str | Path, text: str | bytes) -> None:
    """Write a whole file or nothing (see :func:`write_files_atomic`)."""
    write_files_atomic([(path, text)])


# What a run that is stopped by a signal must settle before it exits (see cli._exit_on_signal): the lock is
# held while staged outputs are renamed into place, so that they are replaced all together or not at all, and
# STAGING holds the temporaries being written, which it removes.
RENAMING = threading.Lock()
STAGING: set[str] = set()


def write_files_atomic(outputs) -> None:
    """Write every (path, text or bytes) or none: each goes to a temporary file of its own beside its target
    (a unique name, so concurrent runs writing the same path do not share one), flushed to disk; only when all
    are written are they renamed into place. A failure removes the temporaries and names the path."""
    import os
    import tempfile
    staged: list[tuple[str, Path]] = []
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, text in outputs:
            path = Path(path)
            if path.is_dir():
                raise InputError(f"{path}: cannot write it (a folder of that name exists)")
            try:
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
                staged.append((tmp, path))
                STAGING.add(tmp)
                os.fchmod(fd, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's owner-only mode
                with os.fdopen(fd, "wb") as f:
                    f.write(text if isinstance(text, bytes) else text.encode())
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                raise InputError(f"{path}: cannot write it ({exc.strerror or exc})") from None
        with RENAMING:
            for tmp, path in staged:
                try:
                    os.replace(tmp, path)
                except OSError as exc:
                    raise InputError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
            STAGING.discard(tmp)
