"""Rewrites of the exported program where its decomposition does more work than the module itself.

With a dynamic batch, ``torch.export`` cannot prove a transposed activation contiguous, so ``x @ W`` on an
activation of shape [seq, batch, k] (nn.MultiheadAttention's in-projection with ``batch_first``) becomes
``bmm(x, W.expand(seq, k, n))``: one small product per position, each reading the whole weight. Eager PyTorch
folds the same product into one matrix product; the exported one reads the weight ``seq`` times (GPT-3's
in-projection: 3.7 TB instead of 1.8 GB per layer; 3.4x slower measured on a CPU at gpt2-small's size).
:func:`read_weights_once` writes such a product back as ``matmul(x, W)``, which folds as eager does, and
reads ``W`` itself, so the weight stays resident memory of the product (not of a view before it).
"""

from __future__ import annotations

from .._torch import import_torch

__all__ = ["read_weights_once"]

# operators that only reshape or broadcast their first argument (no kernel)
_SHAPING = ("view", "_unsafe_view", "reshape", "expand", "unsqueeze")


def read_weights_once(gm) -> int:
    """Rewrite, in place, every ``bmm(a, b)`` whose ``b`` repeats one matrix along its first dimension (stride
    0) as ``matmul(a, matrix)``; returns how many were rewritten."""
    torch = import_torch()
    done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != torch.ops.aten.bmm.default:
            continue
        a, b = node.args
        val = b.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.stride(0) != 0:
            continue
        matrix = _repeated_matrix(b, tuple(val.shape[1:]))
        if matrix is None:
            continue
        with gm.graph.inserting_before(node):
            product = gm.graph.call_function(torch.ops.aten.matmul.default, (a, matrix))
        product.meta.update(node.meta)  # the same value: shape, strides, module path
        node.replace_all_uses_with(product)
        gm.graph.erase_node(node)
        done += 1
    if done:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return done


def _repeated_matrix(node, shape: tuple):
    """The node holding the [k, n] matrix that ``node`` only reshapes and broadcasts, or None."""
    torch = import_torch()
    while True:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dim() == 2 and tuple(val.shape) == shape:
            return node
        name = getattr(node.target, "__name__", "").split(".")[0]
        if node.op != "call_function" or name not in _SHAPING or not node.args:
            return None
        node = node.args[0]
