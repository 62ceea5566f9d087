"""Keeping native libraries' prints off stdout, which ``--json`` owns."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

__all__ = ["native_stdout_to_stderr"]


@contextmanager
def native_stdout_to_stderr():
    """Native solver libraries sometimes print on file descriptor 1 (HiGHS's MILP, when it mends a presolved
    solution): send it to stderr for the duration."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no usable stdout: nothing to protect
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
