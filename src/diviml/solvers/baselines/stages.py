"""What the layer-split baselines share: the devices stages go to, and a plan from stages.

*Stages* are runs of consecutive layers (:func:`..engines.layers.layers_of`), one per device, and the devices
are taken in the platform's order, server by server, as Megatron-LM and DeepSpeed number pipeline ranks.
"""

from __future__ import annotations

from ...errors import InfeasibleError
from ...problem import Problem
from ...validate import placement_violations
from ..engines.plans import Stopwatch, make_plan

__all__ = ["by_server", "stage_devices", "plan_of_stages", "fit_shares"]


def by_server(problem: Problem) -> list[str]:
    """Every device, server by server in the order the platform first names them."""
    servers = list(dict.fromkeys(d.server for d in problem.platform.devices))
    return [d.name for d in sorted(problem.platform.devices, key=lambda d: servers.index(d.server))]


def stage_devices(problem: Problem) -> list[str]:
    """The devices stages go to: every accelerator, server by server (:func:`by_server`); hosts only where the
    platform has no accelerator."""
    ordered = by_server(problem)
    accelerators = [d for d in ordered if not problem.platform.by_name[d].is_host]
    return accelerators or ordered


def fit_shares(memory: list[float], capacity: list[float], shares: list[int]) -> list[int] | None:
    """``shares`` (layers per device) moved, the fewest layers possible, so that every device holds its
    layers' memory (``memory`` per layer, in order): layers of a device over capacity go to the next device
    with room, or None when they cannot."""
    total = len(memory)
    out, start = [], 0
    for k, cap in enumerate(capacity):
        want = shares[k] if k < len(capacity) - 1 else total - start
        held, n = 0.0, 0
        while n < want and start + n < total and held + memory[start + n] <= cap:
            held += memory[start + n]
            n += 1
        out.append(n)
        start += n
    return out if start == total else None


def plan_of_stages(problem: Problem, layers: list[list[str]], devices: list[str], shares: list[int], *,
                   solver: str, watch: Stopwatch, notes: list[str]):
    """The plan that runs ``shares[k]`` consecutive layers on ``devices[k]`` (a task a device may not run
    goes to the first device of the stage order that may)."""
    placement: dict[str, str] = {}
    start = 0
    for device, n in zip(devices, shares):
        for layer in layers[start:start + n]:
            for t in layer:
                allowed = problem.allowed_devices[t]
                placement[t] = device if device in allowed else next(
                    (d for d in devices if d in allowed), next(iter(allowed)))
        start += n
    if start != len(layers):
        raise InfeasibleError(f"{solver}: the stages hold {start} of {len(layers)} layers")
    _check_moved(problem, placement, solver)
    used = [f"{d} {n}" for d, n in zip(devices, shares) if n]
    return make_plan(problem, placement=placement, solver=solver, status="feasible", watch=watch,
                     notes=notes + [f"layers per device: {', '.join(used)}"],
                     stats={"layers": float(len(layers)), "stages": float(len(used))})


def _check_moved(problem: Problem, placement: dict[str, str], solver: str) -> None:
    """Raise InfeasibleError where tasks a stage's device may not run, moved to another device, break the
    placement (:func:`~diviml.validate.placement_violations`): overfill it, spread their co-location group or
    (a contiguous pipeline) leave the stages out of one order."""
    broken = placement_violations(problem, placement)
    if broken:
        raise InfeasibleError(f"{solver}: tasks that their stage's device may not run moved to another, and then "
                              f"{broken[0]}: use a solver (e.g. ip) that places them")
