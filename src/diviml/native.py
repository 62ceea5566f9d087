"""Keeping native libraries' prints off stdout, which ``--json`` owns, and METIS's off both streams."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager

__all__ = ["native_output_discarded", "native_stdout_to_stderr"]


@contextmanager
def _pointed_at(target: int, fds: tuple[int, ...]):
    """File descriptors ``fds`` write to ``target`` for the duration (Python's own buffers flushed either side)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = [os.dup(fd) for fd in fds]
    except OSError:  # no usable stream: nothing to protect
        yield
        return
    for fd in fds:
        os.dup2(target, fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip(fds, saved):
            os.dup2(old, fd)
            os.close(old)


@contextmanager
def native_stdout_to_stderr():
    """What a native library prints on file descriptor 1 goes to stderr for the duration: Gurobi's licence and
    banner lines, which a user may want to read, off the stdout that ``--json`` owns."""
    with _pointed_at(2, (1,)):
        yield


@contextmanager
def native_output_discarded():
    """What a native library prints on file descriptors 1 and 2 for the duration goes nowhere. For short calls
    whose prints say nothing to a user: METIS's recursive bisection prints "Cannot bisect a graph with 0
    vertices" where a weighted part comes out empty, and returns a partition that the partitioner repairs;
    HiGHS's MIP, its output_flag off, prints "HighsMipSolverData::transformNewIntegerFeasibleSolution
    tmpSolver.run();" now and then as it mends a presolved solution."""
    with tempfile.TemporaryFile() as sink, _pointed_at(sink.fileno(), (1, 2)):
        yield
