"""Typed errors. Every message says what was wrong and what to do about it.

The CLI turns any :class:`DivimlError` into one line on stderr and exit status 2.
"""

from contextlib import contextmanager
from typing import Iterator


class DivimlError(Exception):
    """Base class of every error diviml raises on purpose."""


class InputError(DivimlError):
    """A file, preset, option or model that cannot be used as given."""


class InfeasibleError(DivimlError):
    """The problem has no feasible plan (memory, device restrictions, ...)."""


class ValidationError(DivimlError):
    """A plan breaks a constraint of its problem."""


@contextmanager
def in_file(path) -> Iterator[None]:
    """An :class:`InputError` raised inside names the file it is about (unless it already does)."""
    try:
        yield
    except InputError as exc:
        if str(exc).startswith(f"{path}:"):
            raise
        raise InputError(f"{path}: {exc}") from None
