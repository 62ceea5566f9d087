"""Keeping native libraries' prints off stdout, which ``--json`` owns, and METIS's off both streams."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager

__all__ = ["native_output_discarded", "native_stdout_to_stderr"]


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


@contextmanager
def native_output_discarded():
    """What a native library prints on file descriptors 1 and 2 for the duration goes nowhere. For short calls
    whose prints say nothing to a user: METIS's recursive bisection prints "Cannot bisect a graph with 0
    vertices" where a weighted part comes out empty, and returns a partition that the partitioner repairs."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no usable stdout or stderr: nothing to keep clean
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            for fd, old in zip((1, 2), saved):
                os.dup2(old, fd)
                os.close(old)
