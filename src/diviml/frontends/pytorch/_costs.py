"""What an operator costs without running it: FLOPs, bytes moved and stored, views, roofline times."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence

from ...catalogue import spec
from .._torch import import_torch
from ..host import HOST_TYPE, HostSpec, derived_time


# -- running and measuring ---------------------------------------------------------------------------
@dataclass
class NodeRecord:
    name: str
    kind: str
    inputs: list  # names of producing task nodes
    state_inputs: list  # placeholder names of parameters / buffers read
    flops: float
    bytes_accessed: float
    output_bytes: float
    times: list = field(default_factory=list)  # measured seconds
    alias: bool = False  # no kernel runs: a view of an input, a shape query, a check
    outputs: float | None = None  # elements of the output (how many cores a CPU spreads the operator over)
    dtype: str | None = None  # "float16" or "bfloat16" where the output is: tensor-core rates apply (catalogue)


def half_dtype(value) -> str | None:
    """"float16" or "bfloat16" where ``value`` is a tensor of that type, else None."""
    torch = import_torch()
    if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
        return str(value.dtype).removeprefix("torch.")
    return None


def nbytes(value) -> float:
    torch = import_torch()
    if isinstance(value, torch.Tensor):
        return float(value.numel() * value.element_size())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    return 0.0


# operators that always return a view of their input: no kernel runs, only the tensor's metadata changes
VIEWS = frozenset({"view", "_unsafe_view", "permute", "expand", "unsqueeze", "squeeze", "select", "slice", "t",
                   "transpose", "alias", "as_strided", "detach", "diagonal", "unfold", "split", "split_with_sizes",
                   "unbind", "chunk", "narrow", "view_as", "expand_as", "detach_"})
# operators that return a view when they can and copy otherwise: a view where the output shares its input's storage
MAYBE_VIEWS = frozenset({"reshape", "flatten", "unflatten", "contiguous"})


def is_view(kind: str, inputs: list, result) -> bool:
    """Whether the operator runs no kernel: a view of an input, or no tensor at all (a shape query such as
    ``sym_size``, a check such as ``_assert_tensor_metadata``)."""
    if kind in VIEWS:
        return True
    torch = import_torch()
    if not _holds_tensor(result):
        return True
    if kind not in MAYBE_VIEWS or not isinstance(result, torch.Tensor) or result.device.type == "meta":
        return False
    ptr = result.untyped_storage().data_ptr()
    return any(x.untyped_storage().data_ptr() == ptr for x in inputs)


def _holds_tensor(value) -> bool:
    torch = import_torch()
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_tensor(v) for v in value)


def analytic_time(device_type: str, record: "NodeRecord") -> float:
    """The catalogue's roofline time of an operator; zero for inputs and for views (no kernel runs)."""
    if record.kind == "input" or record.alias:
        return 0.0
    return spec(device_type).roofline(record.flops, record.bytes_accessed, record.outputs, record.dtype)


def task_times(record: "NodeRecord", measured_type: str | None, analytic_types: Sequence[str],
           host: HostSpec | None) -> dict[str, float]:
    """One operator's time per device type: the measured median; a catalogue CPU's derived from the host's
    measurement (:mod:`diviml.frontends.host`); the roofline for the rest. Inputs cost nothing, and views
    nothing but what was measured (a view runs no kernel)."""
    if record.kind == "input":
        return {t: 0.0 for t in ([measured_type] if measured_type else []) + list(analytic_types)}
    measured = statistics.median(record.times) if record.times else None
    if record.alias:  # what the measurement saw (an eager call); no kernel anywhere else
        return {**({measured_type: measured or 0.0} if measured_type else {}), **{t: 0.0 for t in analytic_types}}
    times = {}
    if measured_type == HOST_TYPE:
        times[HOST_TYPE] = measured if measured is not None else host.roofline(
            record.flops, record.bytes_accessed, record.outputs)
    elif measured_type:
        times[measured_type] = measured if measured is not None else analytic_time(measured_type, record)
    for t in analytic_types:
        if spec(t).is_cpu:
            times[t] = derived_time(spec(t), record.flops, record.bytes_accessed, record.outputs,
                                    measured if measured_type == HOST_TYPE else None, host)
        else:
            times[t] = analytic_time(t, record)
    return times


def stored_bytes(value) -> float:
    """Bytes a transfer of ``value`` moves: each tensor's elements, or its storage where that is smaller (a
    stride-0 expand sends its source, not the broadcast view)."""
    torch = import_torch()
    if isinstance(value, torch.Tensor):
        try:
            return float(min(value.numel() * value.element_size(), value.untyped_storage().nbytes()))
        except (RuntimeError, NotImplementedError):  # no storage (some tensor subclasses): its elements
            return nbytes(value)
    if isinstance(value, (list, tuple)):
        return sum(stored_bytes(v) for v in value)
    return 0.0


def numel(value) -> float:
    torch = import_torch()
    if isinstance(value, torch.Tensor):
        return float(value.numel())
    if isinstance(value, (list, tuple)):
        return sum(numel(v) for v in value)
    return 0.0


def count_flops(target, args, out, module=None) -> float:
    """FLOPs of one operator: 2 x multiply-adds for convolutions and matrix products, one per output element
    otherwise (the convention of torch.utils.flop_counter for the former)."""
    torch = import_torch()
    name = str(getattr(target, "__name__", target))
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if module is not None:
        if isinstance(module, torch.nn.modules.conv._ConvNd):
            w = module.weight
            return 2.0 * numel(out) * w.shape[1] * math.prod(w.shape[2:])
        if isinstance(module, torch.nn.Linear):
            return 2.0 * numel(out) * module.in_features
        return numel(out)
    if name.startswith("convolution"):
        w = args[1]
        return 2.0 * numel(out) * w.shape[1] * math.prod(w.shape[2:])
    if name.startswith(("mm", "addmm", "bmm", "baddbmm", "matmul")):
        a = tensors[-2]
        return 2.0 * numel(out) * a.shape[-1]
    return numel(out)
