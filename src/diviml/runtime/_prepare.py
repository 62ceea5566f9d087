"""A plan made ready to run: the request checked, the model captured and cut into per-device pieces by the
plan, the unsplit module's outputs to check against, and the workers (and ranks) that run the pieces."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..errors import InputError
from ..frontends._torch import float32_in_full
from ..plan import Plan
from ._dist import Comm, ValueMeta, init, memory_order, rank_of_devices
from ._execute import Executor
from ._pieces import check_plan_tasks, cut, piece_stages
from ._rows import split_rows
from ._source import ModelSource, model_source

# outputs must match the unsplit module within these (relative, absolute) tolerances, by dtype: the split
# program runs the same kernels, but a kernel may sum in another order on another thread count or device
TOLERANCE = {"float64": (1e-9, 1e-12), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2)}
# where the plan runs tasks on a GPU, the reference (the unsplit module on this CPU) and the split program run
# other kernels (cuDNN or cuBLAS against oneDNN), each rounding in its own order, through every layer; TF32
# is off for the run (frontends._torch.float32_in_full), so float32 stays float32
TOLERANCE_ACROSS_DEVICES = {"float64": (1e-7, 1e-10), "float32": (1e-3, 1e-4), "float16": (2e-2, 2e-3),
                            "bfloat16": (5e-2, 2e-2)}


STREAM_REQUESTS = 16  # requests a pipeline plan's run streams, by default


def torch_devices(platform, devices: list[str], rank_of: dict[str, int], rank: int) -> dict:
    """Plan device -> torch device for the devices of this rank; a GPU the machine lacks is an InputError."""
    import torch
    out, gpus = {}, 0
    for name in devices:
        d = platform.by_name[name]
        if rank_of[name] != rank:
            continue
        if d.is_host:
            out[name] = torch.device("cpu")
            continue
        if not torch.cuda.is_available():
            raise InputError(f"the plan runs tasks on {name!r} (type {d.type}), a GPU, but this machine has none "
                             "(torch.cuda.is_available() is False): run it where the GPU is, or schedule for a "
                             "CPU platform such as cpu-workers-2")
        if gpus >= torch.cuda.device_count():
            raise InputError(f"the plan needs more GPUs on this rank than the {torch.cuda.device_count()} here")
        out[name] = torch.device("cuda", gpus)
        gpus += 1
    return out


def gpu_type_notes(platform, devices: dict) -> list[str]:
    """A note for each plan GPU that runs on a GPU of another type than the platform gives it: the plan was
    solved, and is predicted, with the times of the platform's type (measured on that GPU, or the catalogue's
    roofline), not with this GPU's."""
    import torch

    from ..frontends.pytorch import measured_device_type
    notes = []
    for name, device in devices.items():
        if device.type != "cuda":
            continue
        here, given = measured_device_type(str(device)), platform.by_name[name].type
        if here != given:
            notes.append(f"{name} is a {given} in the platform but runs on {torch.cuda.get_device_name(device)} "
                         f"(type {here}): the prediction uses the {given}'s times, not this GPU's; profile with "
                         f"--device cpu,cuda and give {name} the type {here} to predict this GPU")
    return notes


def _tolerance(platform, used: list[str], torch) -> dict:
    """The outputs' tolerance by dtype for a plan over ``used``; TF32 off where it runs tasks on a GPU."""
    if all(platform.by_name[d].is_host for d in used):
        return TOLERANCE
    float32_in_full(torch)
    return TOLERANCE_ACROSS_DEVICES


def _placed(platform, used: list[str], rank_of: dict[str, int]) -> dict[str, str]:
    """Plan device -> "rank R: torch device", by the rule :func:`torch_devices` applies on every rank."""
    out: dict[str, str] = {}
    gpus: dict[int, int] = {}
    for name in used:
        r = rank_of[name]
        if platform.by_name[name].is_host:
            out[name] = f"rank {r}: cpu"
        else:
            out[name] = f"rank {r}: cuda:{gpus.get(r, 0)}"
            gpus[r] = gpus.get(r, 0) + 1
    return out


@dataclass
class _Prepared:
    """A plan ready to run: its program cut into pieces, the workers that run it, and what a run is checked
    against."""
    source: ModelSource
    plan: Plan
    platform: object
    problem: object
    batch: int
    program: object
    order: dict  # plan device -> [(task, part)] in the order its worker runs them
    stages: dict  # (device, piece index) -> stage in a stream (a pipeline plan), else empty
    requests: int  # requests a run streams: 1, or more for a pipeline plan
    meta: dict
    references: list  # the unsplit module's results for each set of inputs (a stream alternates two)
    tolerance: dict
    eager: float
    executor: Executor
    comm: Comm | None
    used: list
    rank_of: dict
    world: int


def _prepare(source: ModelSource | str, plan: Plan, platform, problem, batch: int | None, repeats: int, warmup: int,
             rank: int, world: int, progress, requests: int | None = None) -> _Prepared:
    """Check the request, capture the model, cut it by the plan and start the workers (and the ranks)."""
    import torch

    if isinstance(source, str):
        source = model_source(source)
    batch = _check_request(source, plan, platform, batch, repeats, warmup)
    streamed = plan.objective_kind == "pipeline"
    if not streamed and requests not in (None, 1):
        raise InputError(f"--requests streams requests through a pipeline plan; this is a {plan.objective_kind} "
                         "plan, which runs one request at a time: leave --requests out")
    split = any(len(p) > 1 for p in plan.parts.values())
    rank_of = rank_of_devices(platform, world)
    used = sorted({a.device for a in plan.assignments}, key=list(platform.by_name).index)
    devices = torch_devices(platform, used, rank_of, rank)
    tolerance = _tolerance(platform, used, torch)
    threads = {d.name: d.threads for d in platform.devices}
    cpu_threads = next((d.threads for d in platform.devices if d.is_host and d.threads), None)
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    if progress:
        progress(f"capturing {source.name} at batch {batch}")
    captured, runnable, program, order = _program(source, plan, problem, batch, split)
    stages = piece_stages(program) if streamed else {}
    requests = _stream_requests(stages, requests) if streamed else 1
    values = dict(zip([n.name for n in captured.gm.graph.nodes if n.op == "placeholder"], captured.args))
    reference, meta = _reference(captured, runnable, program, torch)
    inputs = [{v: values[v] for v in program.inputs}]
    references = [reference]
    if requests > 1:  # a stream alternates two sets of inputs, so a value handed to the wrong request shows
        inputs.append(_varied(torch, inputs[0]))
        references.append(_results(captured, program, inputs[1], torch))
    eager = _time_eager(captured, torch, max(3, repeats // 2))
    comm = None
    if world > 1:
        init(rank, world)
        comm = Comm(program, rank_of, rank, meta)
    local = {d for d in program.pieces if rank_of[d] == rank}
    executor = Executor(program, {**devices, **{d: torch.device("cpu") for d in program.pieces if d not in devices}},
                        threads, {v: values[v] for v in program.state}, inputs, comm=comm, local=local, stages=stages)
    return _Prepared(source, plan, platform, problem, batch, program, order, stages, requests, meta, references,
                     tolerance, eager, executor, comm, used, rank_of, world)


def _program(source: ModelSource, plan: Plan, problem, batch: int, split: bool):
    """The model captured at ``batch`` (the same weights on every rank), the program that runs (with a copy of
    each split task per sub-batch: runtime._rows), its cut into per-device pieces and each device's order."""
    from ..frontends.pytorch import task_of_nodes
    captured = source.captured(batch)
    if problem is not None:
        _check_edges(captured, problem.graph)
    order = plan.device_order or stream_order(captured, plan.placement)
    if split:  # the plan's tasks checked before its rows are cut by them (cut checks its own program's)
        check_plan_tasks(set(task_of_nodes(captured).values()), set(plan.placement))
        _check_cut_tasks(captured, plan, source)
        jobs = split_rows(captured, plan.parts, order, batch)
        return captured, jobs.captured, cut(jobs.captured, jobs.device_order, jobs.task_of), order
    return captured, captured, cut(captured, {d: [t for t, _ in ts] for d, ts in order.items()}), order


def _check_cut_tasks(captured, plan: Plan, source: ModelSource) -> None:
    """Refuse, naming them, a plan that cuts tasks whose result for a sample depends on other samples: its
    sub-batches would compute something else than the model (a graph profiled before diviml marked such tasks,
    or a plan made by hand). Checked on two samples, which tell a sample from the others as well as more do."""
    from ..frontends.pytorch import with_inputs
    from ..frontends.pytorch._samples import whole_batch_tasks
    cut_tasks = {t for t, parts in plan.parts.items() if len(parts) > 1}
    wrong = [t for t in whole_batch_tasks(with_inputs(captured, source.inputs(2))) if t in cut_tasks]
    if wrong:
        names = ", ".join(repr(t) for t in wrong[:4]) + (f" and {len(wrong) - 4} more" if len(wrong) > 4 else "")
        raise InputError(f"the plan cuts {names} into sub-batches, but a sample's result there depends on the "
                         "other samples, so it must run on the whole batch at once: profile the model again "
                         "('diviml profile' marks such tasks whole_batch) and schedule from that graph")


def stream_order(captured, placement: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
    """A pipeline plan's order, which it does not give: each device's tasks in the captured program's order.

    Tasks are named after their fx node, and the program lists a node after every node it reads, so this is
    one topological order shared by every device, as the stream's slots need (a piece reads a value of its own
    device from an earlier piece of its order; see :func:`~diviml.runtime._pieces.piece_stages`). Tasks the plan
    places but the program lacks come last, so that :func:`~diviml.runtime._pieces.cut` names them (as it names
    the program's tasks the plan leaves out)."""
    from ..frontends.pytorch import task_of_nodes
    tasks = set(task_of_nodes(captured).values())
    order: dict[str, list[tuple[str, int]]] = {d: [] for d in dict.fromkeys(placement.values())}
    for node in captured.gm.graph.nodes:
        if node.name in tasks and node.name in placement:
            order[placement[node.name]].append((node.name, 0))
    for task in sorted(set(placement) - tasks):
        order[placement[task]].append((task, 0))
    return order


def _check_request(source: ModelSource, plan: Plan, platform, batch: int | None, repeats: int, warmup: int) -> int:
    """The batch to run at, after checking the plan can run here at it (InputError saying why not)."""
    if repeats < 1 or warmup < 0:
        raise InputError(f"--repeats must be >= 1 and --warmup >= 0, got {repeats} and {warmup}")
    unknown = sorted({a.device for a in plan.assignments} - set(platform.by_name))
    if unknown:
        raise InputError(f"the plan uses devices {unknown} that platform {platform.name!r} lacks: give the "
                         "platform it was scheduled for (--platform)")
    if plan.device_order is None and plan.objective_kind != "pipeline":
        raise InputError(f"a {plan.objective_kind} plan has no start times to run in order: run a latency, batch "
                         "or pipeline plan")
    batch = batch or plan.batch_size
    if any(len(p) > 1 for p in plan.parts.values()) and batch != plan.batch_size:
        raise InputError(f"the plan splits tasks into sub-batches of a batch of {plan.batch_size}: run it at that "
                         f"batch, not {batch}")
    return batch


def _stream_requests(stages: dict, requests: int | None) -> int:
    """How many requests a pipeline plan's run streams. Its time per request is measured over the slots in
    which every piece runs (runtime._run.stream_period), from slot D (the deepest stage) to the last request's
    slot, so at least D + 2 requests; by default twice D + 1, and at least 16."""
    depth = max(stages.values(), default=0)
    if requests is None:
        return max(STREAM_REQUESTS, 2 * (depth + 1))
    if requests < depth + 2:
        raise InputError(f"--requests {requests} is too few for this pipeline: its values cross devices {depth} "
                         f"time(s) in a row, so only its slots from the {depth + 1}th on are full; give at least "
                         f"--requests {depth + 2} (more measure the steady state better)")
    return requests


def _check_edges(captured, graph) -> None:
    """The captured program's task-level edges must be the graph's: same names wired otherwise is another model."""
    from ..frontends.pytorch import task_of_nodes
    task_of = task_of_nodes(captured)
    edges = {(task_of[a.name], task_of[n.name]) for n in captured.gm.graph.nodes if n.name in task_of
             for a in n.all_input_nodes if a.name in task_of and task_of[a.name] != task_of[n.name]}
    differ = edges ^ set(graph.edges)
    if differ:
        raise InputError(f"the model's captured graph and the given graph have the same tasks but {len(differ)} "
                         f"different edges (e.g. {sorted(differ)[0]}): give the graph profiled from this model")


def _reference(captured, runnable, program, torch):
    """The unsplit module's results (flat, in the program's order) and every tensor value's shape, dtype and
    memory order in the program that runs (``runnable``: the captured one, or its rewrite into sub-batch jobs)."""
    meta: dict[str, ValueMeta] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            if isinstance(value, torch.Tensor):
                meta[node.name] = ValueMeta(tuple(value.shape), value.dtype, memory_order(value.shape, value.stride()))
            elif isinstance(value, int):  # a size read off an input (dynamic batch): sent as a one-element tensor
                meta[node.name] = ValueMeta(None, int)
            return value

    with torch.no_grad():
        Recorder(runnable.gm).run(*runnable.args)
    return _results(captured, program, {}, torch), meta


def _varied(torch, inputs: dict) -> dict:
    """Other inputs of the same shapes and kinds: floating-point values moved by seeded noise (the same on
    every rank), integers (token ids, indices) rolled by one along their last dimension, anything else kept."""
    generator = torch.Generator().manual_seed(1)
    out = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
            noise = torch.randn(value.shape, generator=generator, dtype=torch.float64).to(value.dtype)
            out[name] = value + 0.5 * noise.to(value.device)
        elif isinstance(value, torch.Tensor) and value.dim() > 0 and value.dtype != torch.bool:
            out[name] = value.roll(1, dims=-1)
        else:
            out[name] = value
    return out


def _results(captured, program, inputs: dict, torch) -> dict:
    """The unsplit module's flat results, in the program's order, for ``inputs`` (user inputs by name; those
    not given, and the state, as captured)."""
    names = [n.name for n in captured.gm.graph.nodes if n.op == "placeholder"]
    with torch.no_grad():
        out = captured.gm(*[inputs.get(n, a) for n, a in zip(names, captured.args)])
    return dict(zip(program.results, torch.utils._pytree.tree_flatten(out)[0]))


def _time_eager(captured, torch, repeats: int) -> float:
    import time
    with torch.no_grad():
        captured.gm(*captured.args)
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            captured.gm(*captured.args)
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


