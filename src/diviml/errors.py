"""Typed errors. Every message says what was wrong and what to do about it.

The CLI turns any :class:`DivimlError` into one line on stderr and exit status 2.
"""


class DivimlError(Exception):
    """Base class of every error diviml raises on purpose."""


class InputError(DivimlError):
    """A file, preset, option or model that cannot be used as given."""


class InfeasibleError(DivimlError):
    """The problem has no feasible plan (memory, device restrictions, ...)."""


class ValidationError(DivimlError):
    """A plan breaks a constraint of its problem."""
