"""Flat arrays for the compiled loops (the pipeline DP's walk, the parts polish's timing)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["csr"]


def csr(rows: Sequence[Sequence[int]], width: int = 1) -> tuple[np.ndarray, ...]:
    """Rows of ints as row pointers, then the rows' items one after another (``width`` ints per item: one array
    per column); row i's items are ``items[ptr[i]:ptr[i + 1]]``.

    >>> ptr, items = csr([[1, 2], [], [0]])
    >>> ptr.tolist(), items.tolist()
    ([0, 2, 2, 3], [1, 2, 0])
    """
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    items = np.array([x for r in rows for x in r], dtype=np.int64).reshape(-1, width)
    return (ptr, *(np.ascontiguousarray(col) for col in items.T))
