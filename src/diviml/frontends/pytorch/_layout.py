"""Where the batch sits in each value of a program exported with a dynamic batch dimension.

The runtime cuts and joins a batch plan's sub-batches by it (:mod:`diviml.runtime._rows`), and the profile
finds by it the tasks whose result for one sample depends on the batch's other samples
(:mod:`._samples`).
"""

from __future__ import annotations

import operator

from ...errors import InputError
from ._capture import Captured

__all__ = ["BatchLayout", "RESHAPES"]


RESHAPES = frozenset({"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"})


class BatchLayout:
    """Where the batch sits in each value of the dynamic-batch export, and what a size read off it is.

    A value's batch is ``(dim, outer, inner)``: dimension ``dim`` of size ``outer * batch * inner`` indexes
    ``(a, sample, c)`` row-major (``outer = inner = 1``: the dimension is the batch). A placeholder's batch is
    the dimension whose size is the batch symbol. A view or reshape keeps each element's row-major position, so
    the samples' step there (``inner`` times the sizes after ``dim``) says where they sit in its result. Any
    other operator's dimension (a permute's too) of the same size as one of its inputs' takes that input's, all
    such inputs agreeing; one of the batch's size made from no input that holds the batch (zeros of a size read
    off it) is the batch. Anything else that depends on the batch is "unknown"."""

    def __init__(self, captured: Captured):
        import sympy
        import torch
        self.torch, self.sympy = torch, sympy
        user = captured.user_inputs
        nodes = {n.name: n for n in captured.gm.graph.nodes}
        symbols: set = set()
        for name in user:
            val = nodes[name].meta.get("val")
            if isinstance(val, torch.Tensor) and val.dim() and isinstance(val.shape[0], torch.SymInt):
                symbols |= val.shape[0].node.expr.free_symbols
        if len(symbols) != 1:
            raise InputError("this model's capture has no single dynamic batch dimension (it was exported at a "
                             "fixed batch), so its tasks cannot be split by samples: run a plan that keeps every "
                             "task whole")
        self.batch = next(iter(symbols))
        self.known: dict[str, tuple[int, int, int] | None | str] = {}
        for node in captured.gm.graph.nodes:
            self.known[node.name] = self._find(node)

    def _expr(self, size):
        return size.node.expr if isinstance(size, self.torch.SymInt) else self.sympy.Integer(int(size))

    def _same(self, x, y) -> bool:
        return self.sympy.expand(x - y) == 0

    def batch_dim(self, node) -> tuple[int, int, int] | None | str:
        """(dimension, outer, inner) of a tensor value (see the class); None when its size does not depend on
        the batch; "unknown" when it does in a way samples cannot be cut from."""
        return self.known[node.name]

    def _find(self, node):
        val = node.meta.get("val")
        if not isinstance(val, self.torch.Tensor):
            return "unknown" if self.depends(node) else None
        found = self.batch_dims(val)
        if len(found) != 1:
            return "unknown" if found else None
        dim, size = found[0], self._expr(val.shape[found[0]])
        if node.op != "call_function":
            return (dim, 1, 1) if self._same(size, self.batch) else "unknown"
        target, source = str(node.target), node.args[0] if node.args else None
        if node.target is operator.getitem:  # an output of a multi-output operator: as its inputs
            node = source
        tensors = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), self.torch.Tensor)]
        inputs = [self.known.get(a.name, "unknown") for a in tensors]
        if "unknown" in inputs:
            return "unknown"
        if target in RESHAPES and isinstance(self.known.get(getattr(source, "name", None)), tuple):
            return self._reshaped(source, val.shape, dim, size)
        like = {lay[1:] for a, lay in zip(tensors, inputs)
                if isinstance(lay, tuple) and self._same(self._expr(a.meta["val"].shape[lay[0]]), size)}
        if len(like) == 1:
            return (dim, *like.pop())
        made = not any(isinstance(lay, tuple) for lay in inputs)  # e.g. zeros of a size read off the batch
        return (dim, 1, 1) if made and self._same(size, self.batch) else "unknown"

    def _reshaped(self, source, shape, dim: int, size):
        """The batch of a view or reshape of ``source``: the samples' step in row-major order is kept."""
        where = self.known[source.name]
        assert isinstance(where, tuple)  # the caller checked
        d, _, inner = where
        step = inner * self.sympy.Mul(*[self._expr(s) for s in source.meta["val"].shape[d + 1:]])
        below = self.sympy.Mul(*[self._expr(s) for s in shape[dim + 1:]])
        inner_here = self.sympy.simplify(step / below)
        outer_here = self.sympy.simplify(size / (self.batch * inner_here))
        if all(isinstance(x, self.sympy.Integer) and x >= 1 for x in (inner_here, outer_here)):
            return dim, int(outer_here), int(inner_here)
        return "unknown"

    def batch_dims(self, value) -> list[int]:
        """The dimensions of a tensor value (its export's fake tensor) whose size is read off the batch."""
        return [d for d, size in enumerate(value.shape) if self.batch in self._expr(size).free_symbols]

    def sizes(self, node, samples: int) -> list[int]:
        """The value's sizes where it holds ``samples`` samples."""
        return [int(self._expr(s).subs(self.batch, samples)) for s in node.meta["val"].shape]

    def memory_order(self, node, batch: int) -> list[int]:
        """The value's dimensions from outermost to innermost in memory (by its strides at this batch)."""
        val = node.meta["val"]
        strides = [int(self._expr(st).subs(self.batch, batch)) for st in val.stride()]
        return sorted(range(len(strides)), key=lambda d: (-strides[d], d))

    def depends(self, node) -> bool:
        val = node.meta.get("val")
        if isinstance(val, (self.torch.SymInt, self.torch.SymFloat)):
            return self.batch in val.node.expr.free_symbols
        if isinstance(val, (list, tuple)):
            return any(isinstance(v, self.torch.Tensor) and any(
                self.batch in self._expr(s).free_symbols for s in v.shape) for v in val)
        return False

    def scalar(self, node, samples: int):
        """A size computed from the batch (a SymInt), at ``samples`` samples; None for any other value."""
        val = node.meta.get("val")
        if isinstance(val, self.torch.SymInt):
            return int(val.node.expr.subs(self.batch, samples))
        if isinstance(val, self.torch.SymFloat):
            return float(val.node.expr.subs(self.batch, samples))
        return None
