"""Rewrites of the exported program where its decomposition does more work than the module itself.

With a dynamic batch, ``torch.export`` cannot prove a transposed activation contiguous, so ``x @ W`` on an
activation of shape [seq, batch, k] (nn.MultiheadAttention's in-projection with ``batch_first``) becomes
``bmm(x, W.expand(seq, k, n))``: one small product per position, each reading the whole weight. Eager PyTorch
folds the same product into one matrix product; the exported one reads the weight ``seq`` times (GPT-3's
in-projection: 3.7 TB instead of 1.8 GB per layer; 3.4x slower measured on a CPU at gpt2-small's size).
:func:`read_weights_once` writes such a product back as ``matmul(x, W)``, which folds as eager does, and
reads ``W`` itself, so the weight stays resident memory of the product (not of a view before it).

A dynamic batch also reads the batch size once, off the model's input (``sym_size(x, 0)``), and hands it to
every operator that needs it (a classifier's flatten, attention's reshapes): an edge from the input to the end
of the network, which crosses every cut between them, so that no single tensor separates the graph's halves
(googlenet: no series point at all, and a latency gap of 23.6% where one exists, proven optimal in 1 s).
:func:`read_sizes_locally` has each such operator read the size off one of its own inputs that carries it.
"""

from __future__ import annotations

from .._torch import import_torch

__all__ = ["PART_OF", "read_sizes_locally", "read_weights_once"]

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
    return _tidied(gm, done)


def _tidied(gm, done: int) -> int:
    """After ``done`` rewrites of ``gm``: dead nodes dropped, the graph checked and its code made again."""
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


def is_size_read(node) -> bool:
    """Is ``node`` a read of one dimension's size (``aten.sym_size.int``)?"""
    torch = import_torch()
    return node.op == "call_function" and node.target == torch.ops.aten.sym_size.int


# meta key of the nodes read_sizes_locally adds: the task (the user's node name) they are a part of
PART_OF = "diviml_part_of"


def read_sizes_locally(gm) -> int:
    """Rewrite, in place, each use of a size read off a tensor its user does not read (or computed from such a
    size: ``sym_size(x, 0) * 2048``) into the same size read off one of the user's own inputs (found in the
    export's symbolic shapes: a dimension of that size, or of the batch symbol when the size is ``c * batch +
    d``); returns how many uses were rewritten. A use with no such input keeps the original. The nodes added,
    and a size read whose one user reads the tensor it measures, carry ``meta[PART_OF]``, the user's name:
    they are a part of its task."""
    done = 0
    for size in [n for n in gm.graph.nodes if n.op == "call_function" and _symbolic(n)]:
        for user in list(size.users):
            if (user.op == "output" or _symbolic(user)
                    or (is_size_read(size) and size.args[0] in user.all_input_nodes)):
                continue
            with gm.graph.inserting_before(user):
                local = _local_size(gm.graph, user, size.meta["val"])
            if local is not None:
                user.replace_input_with(size, local)
                done += 1
    done = _tidied(gm, done)
    for size in gm.graph.nodes:
        if not (is_size_read(size) and len(size.users) == 1):
            continue
        user = next(iter(size.users))
        if user.op != "output" and size.args[0] in user.all_input_nodes:  # the output node is no task
            size.meta.setdefault(PART_OF, user.name)
    return done


def _local_size(graph, user, value):
    """Nodes (at the graph's insertion point) computing the SymInt ``value`` from ``user``'s own inputs, the
    last of them returned; None where no input's shape holds it. ``value`` and the dimension read are each
    exact, or linear in the one batch symbol with integer coefficients (``value = c * b + d`` from a dimension
    ``a * b + e``: ``(dim - e) // a * c + d``, exact for every batch)."""
    import operator
    torch = import_torch()
    expr = value.node.expr
    found = _dimension_holding(user, lambda e: e == expr)
    steps: list = []
    if found is None:
        target = _linear(expr)
        if target is None:
            return None
        symbol, c, d = target
        found = _dimension_holding(user, lambda e: (_linear(e) or (None,))[0] == symbol)
        if found is None:
            return None
        _, a, e = _linear(found[0].meta["val"].shape[found[1]].node.expr)
        steps = [(operator.sub, e), (operator.floordiv, a), (operator.mul, c), (operator.add, d)]
    node = graph.call_function(torch.ops.aten.sym_size.int, found)
    node.meta["val"] = found[0].meta["val"].shape[found[1]]
    for op, k in steps:
        if k != (1 if op in (operator.floordiv, operator.mul) else 0):
            previous, node = node, graph.call_function(op, (node, k))
            node.meta["val"] = op(previous.meta["val"], k)
    for n in _chain_back(node):
        n.meta[PART_OF] = user.name
    return node


def _linear(expr):
    """(symbol, a, b) where ``expr`` is ``a * symbol + b`` with integers a != 0 and b, else None."""
    if len(expr.free_symbols) != 1:
        return None
    symbol = next(iter(expr.free_symbols))
    poly = expr.as_poly(symbol)
    if poly is None or poly.degree() != 1 or not all(c.is_integer for c in poly.all_coeffs()):
        return None
    a, b = (int(c) for c in poly.all_coeffs())
    return symbol, a, b


def _chain_back(node) -> list:
    """``node`` and the size nodes it was computed from, back to the size read."""
    out = [node]
    while not is_size_read(out[-1]):
        out.append(out[-1].args[0])
    return out


def _symbolic(node) -> bool:
    """Is ``node``'s value a size that depends on the batch (a SymInt with a free symbol)?"""
    torch = import_torch()
    val = node.meta.get("val")
    return isinstance(val, torch.SymInt) and bool(val.node.expr.free_symbols)


def _dimension_holding(user, wanted):
    """(input node, dimension) of ``user``'s first tensor input with a symbolic size whose expression passes
    ``wanted``, or None."""
    torch = import_torch()
    for a in user.all_input_nodes:
        val = a.meta.get("val")
        if is_size_read(a) or not isinstance(val, torch.Tensor):
            continue
        for k, dim in enumerate(val.shape):
            if isinstance(dim, torch.SymInt) and wanted(dim.node.expr):
                return (a, k)
    return None
