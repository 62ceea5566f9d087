"""PyTorch front end: a ``torch.nn.Module`` and example inputs -> a TaskGraph with per-device costs.

Capture: ``torch.export`` (decomposed to core ATen operators) first, ``torch.fx.symbolic_trace`` as a
fallback; if both fail, the error names what broke capture. One task per operator; getitem nodes are
folded into the operator whose tuple they unpack; parameters and buffers are not tasks but resident memory
of the first task that uses them; every task keeps the module path it came from.

Costs: FLOPs (convolutions, matrix products; elementwise, normalisation and pooling count one FLOP per
output element and are memory-bound through their bytes) and bytes moved per task; measured time on the
CPU or a CUDA device (warm-up, repeats, median, a fixed thread count) at several batch sizes; an analytic roofline time for
the devices of :mod:`diviml.catalogue` that are not measured. On a CUDA device the model runs there and
each operator's time is read off CUDA events; the times are recorded under the catalogue's name for that
device (an H100 SXM's as 'h100-sxm'), beside the roofline of every other type.
"""

from __future__ import annotations

from ._capture import (
    Captured,
    batch_first,
    capture,
    capture_at,
    example_batch,
    fold,
    inputs_at_batch,
    task_of_nodes,
    with_inputs,
)
from ._costs import VIEWS, NodeRecord, count_flops
from ._measure import MIN_TIMING_S, WARMUP_S_CUDA, measure
from ._profile import (
    Calibration,
    calibrate,
    default_table_sizes,
    measured_device_type,
    profile,
    profile_module,
    profile_zoo,
    to_task_graph,
)

__all__ = [
    "Calibration", "Captured", "MIN_TIMING_S", "NodeRecord", "VIEWS", "WARMUP_S_CUDA", "batch_first", "calibrate",
    "capture", "capture_at", "count_flops", "default_table_sizes", "example_batch", "fold", "inputs_at_batch",
    "measure", "measured_device_type", "profile", "profile_module", "profile_zoo", "task_of_nodes", "to_task_graph", "with_inputs",
]
