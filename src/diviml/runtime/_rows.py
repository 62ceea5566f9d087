"""Run a batch plan's split tasks: rewrite the captured program into one copy of a task per sub-batch.

A batch plan may run a task as several parts, each on consecutive samples of the batch in the order the
plan lists them (as :mod:`diviml.simulate` reads it). Before the program is cut, every part of a split task
becomes its own copy of the task's operators (a *job*), fed the samples it covers of each input: the
matching part of a producer split the same way, a slice of one producer part, or the concatenation of the
slices of several. The program's results join their parts. The rewritten program is specialised to the
batch: a size read off the batch (a SymInt of the dynamic-batch export) is the part's own sample count in
each copy.

Where the batch sits in a value comes from the export's symbolic shapes and the program (:class:`~diviml.frontends.pytorch._layout.BatchLayout`):
in an input, the one dimension whose size is the batch symbol; through a view or reshape, wherever the
samples' step in row-major order lands, so a dimension that merges the batch with others is read as (outer,
sample, inner) rows (attention's batch x heads: the sample outer; sequence x batch: the sample inner), and
cut or joined by sample along its middle index. A value whose size does not depend on the batch is read
whole; a value whose batch cannot be located passes only between parts that cover the same samples, else the
plan is refused with the task named. Cut and joined tensors keep the memory order the program gave the whole
one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InputError
from ..frontends.pytorch import Captured, task_of_nodes
from ..frontends.pytorch._layout import BatchLayout

__all__ = ["Jobs", "split_rows", "job_id", "sample_offsets"]


@dataclass(frozen=True)
class Jobs:
    """A captured program rewritten so that every job (a task's part) has its own operators."""
    captured: Captured  # same placeholders and arguments as the original, specialised to the batch
    task_of: dict  # fx node name -> job id
    device_order: dict  # plan device -> job ids in the plan's order
    copies: dict  # (original node name, part index) -> the name of its copy


def job_id(task: str, k: int, parts: dict) -> str:
    """A task's own id when it runs whole, ``task:k`` for its k-th part."""
    return task if len(parts[task]) == 1 else f"{task}:{k}"


def sample_offsets(sizes: list[int]) -> list[int]:
    """The first sample of each part, for parts of these sizes in order."""
    out, at = [], 0
    for b in sizes:
        out.append(at)
        at += b
    return out


def split_rows(captured: Captured, parts: dict, device_order: dict, batch: int) -> Jobs:
    """The program with one copy of every split task per part (see the module docstring).

    ``parts``: task -> [(device, samples)] in sample order; ``device_order``: device -> [(task, part index)]."""
    return _RowSplitter(captured, parts, batch).jobs(device_order)


class _RowSplitter:
    """Rewrites a captured program into one copy of each task per part, with the glue (cuts and joins of
    rows) between parts of different sizes; the state of one rewrite."""

    def __init__(self, captured: Captured, parts: dict, batch: int):
        import torch
        self.torch, self.aten = torch, torch.ops.aten
        self.captured, self.parts, self.batch = captured, parts, batch
        self.layout = BatchLayout(captured)
        self.task_of = task_of_nodes(captured)
        self.user = set(captured.user_inputs)
        self.offsets = {t: sample_offsets([b for _, b in p]) for t, p in parts.items()}
        self.graph = torch.fx.Graph()
        self.whole: dict[str, object] = {}  # placeholder / attribute name -> its node in the new graph
        self.copy: dict[tuple[str, int], object] = {}  # (old node, part) -> its copy
        self.new_task: dict[str, str] = {}  # new node name -> job id
        self.glue: dict[tuple, object] = {}  # (old node, job) -> the value that job reads
        self.joins: dict[str, str] = {}  # join job -> its device

    def rows(self, task: str, k: int) -> tuple[int, int]:
        lo = self.offsets[task][k]
        return lo, lo + self.parts[task][k][1]

    def emit(self, job: str, target, args) -> object:
        node = self.graph.call_function(target, args)
        self.new_task[node.name] = job
        return node

    def in_layout(self, job: str, old, make):
        """``make(permuted) -> tensor`` run with the value's dimensions in the memory order the whole tensor
        has in the program, so the result is dense in that order: later views need the strides the program
        gave it (a cut or joined tensor is otherwise laid out as a fresh contiguous one)."""
        order = self.layout.memory_order(old, self.batch)
        if order == list(range(len(order))):
            return make(lambda x: x, lambda d: d)
        back = [order.index(d) for d in range(len(order))]
        dense = make(lambda x: self.emit(job, self.aten.permute.default, (x, order)), lambda d: order.index(d))
        return self.emit(job, self.aten.permute.default, (dense, back))

    def _outer_split(self, job: str, old, value, where, samples: int, to, at):
        """``value`` (holding ``samples`` samples) with its batch dimension as two, (outer, samples x inner),
        in the permuted frame of :meth:`in_layout`; and the frame's sizes."""
        dim, outer, inner = where
        sizes = self.layout.sizes(old, samples)
        frame = [0] * len(sizes)
        for d, n in enumerate(sizes):
            frame[at(d)] = n
        k = at(dim)
        return self.emit(job, self.aten.reshape.default, (to(value), frame[:k] + [outer, samples * inner]
                                                          + frame[k + 1:])), frame, k

    def cut_rows(self, job: str, old, value, where: tuple[int, int, int], lo: int, hi: int, samples: int):
        """Samples [lo, hi) of a value that holds ``samples`` samples, dense in the value's own memory order."""
        dim, outer, inner = where
        aten = self.aten
        if outer == 1:
            return self.in_layout(job, old, lambda to, at: self.emit(job, aten.clone.default, (self.emit(
                job, aten.slice.Tensor, (to(value), at(dim), lo * inner, hi * inner)),), ))

        def make(to, at):
            two, frame, k = self._outer_split(job, old, value, where, samples, to, at)
            cut = self.emit(job, aten.slice.Tensor, (two, k + 1, lo * inner, hi * inner))
            return self.emit(job, aten.reshape.default, (cut, frame[:k] + [outer * (hi - lo) * inner] + frame[k + 1:]))
        return self.in_layout(job, old, make)

    def join(self, job: str, old, values: list, where: tuple[int, int, int], counts: list[int]):
        """The values (``counts`` samples each, in sample order) as one."""
        dim, outer, inner = where
        aten = self.aten
        if outer == 1:
            return self.in_layout(job, old, lambda to, at: self.emit(job, aten.cat.default,
                                                                     ([to(v) for v in values], at(dim))))

        def make(to, at):
            split = [self._outer_split(job, old, v, where, n, to, at) for v, n in zip(values, counts)]
            frame, k = split[0][1], split[0][2]
            joined = self.emit(job, aten.cat.default, ([two for two, _, _ in split], k + 1))
            return self.emit(job, aten.reshape.default, (joined, frame[:k] + [outer * sum(counts) * inner]
                                                         + frame[k + 1:]))
        return self.in_layout(job, old, make)

    def read(self, a, task: str, k: int):
        """The value of old node ``a`` as part ``k`` of ``task`` needs it."""
        if a.name in self.whole:
            return self.whole[a.name]
        producer = self.task_of.get(a.name)
        if producer == task:
            return self.copy[a.name, k]
        lo, hi = self.rows(task, k)
        scalar = self.layout.scalar(a, hi - lo)
        if scalar is not None:
            return scalar
        job = job_id(task, k, self.parts)
        where = self.layout.batch_dim(a)
        if a.name in self.user:  # a user input is whole on its device: slice what this part needs
            if where is None or (lo, hi) == (0, self.batch):
                return self.copy[a.name, 0]
            if where == "unknown":
                raise InputError(f"input {a.name!r} carries the batch where it cannot be cut")
            if (a.name, job) not in self.glue:
                self.glue[a.name, job] = self.cut_rows(job, a, self.copy[a.name, 0], where, lo, hi, self.batch)
            return self.glue[a.name, job]
        if where is None:  # the same whole value in every part
            return self.copy[a.name, 0]
        same = [j for j in range(len(self.parts[producer])) if self.rows(producer, j) == (lo, hi)]
        if same:
            return self.copy[a.name, same[0]]
        if where == "unknown":
            raise InputError(f"task {task!r} and its input {producer!r} are split into different sub-batches, but "
                             f"{producer!r}'s output holds the batch where samples cannot be cut from it: give "
                             "both the same split")
        if (a.name, job) not in self.glue:
            self.glue[a.name, job] = self.glued(a, producer, job, where, lo, hi)
        return self.glue[a.name, job]

    def glued(self, a, producer: str, job: str, where: tuple[int, int, int], lo: int, hi: int):
        """Rows [lo, hi) of ``a`` from the producer's parts that overlap them, cut and joined."""
        pieces, counts = [], []
        for j in range(len(self.parts[producer])):
            plo, phi = self.rows(producer, j)
            top, bottom = max(lo, plo), min(hi, phi)
            if top >= bottom:
                continue
            value = self.copy[a.name, j]
            pieces.append(value if (top, bottom) == (plo, phi)
                          else self.cut_rows(job, a, value, where, top - plo, bottom - plo, phi - plo))
            counts.append(bottom - top)
        return pieces[0] if len(pieces) == 1 else self.join(job, a, pieces, where, counts)

    def copy_nodes(self):
        """Every node copied once per part of its task (placeholders and attributes once); the output node."""
        output = None
        for node in self.captured.gm.graph.nodes:
            if node.op == "output":
                output = node
                continue
            if node.op in ("placeholder", "get_attr") or node.name not in self.task_of:
                new = self.graph.node_copy(node, lambda a: self.whole[a.name])
                self.whole[node.name] = new
                if node.name in self.user:
                    del self.whole[node.name]
                    self.copy[node.name, 0] = new
                    self.new_task[new.name] = job_id(node.name, 0, self.parts)
                continue
            task = self.task_of[node.name]
            for k in range(len(self.parts[task])):
                new = self.graph.node_copy(node, lambda a, k=k, task=task: self.read(a, task, k))
                self.copy[node.name, k] = new
                self.new_task[new.name] = job_id(task, k, self.parts)
        return output

    def result(self, a):
        """The model's output ``a``, its parts joined where its task is split."""
        if a.name not in self.task_of:  # a weight or buffer of the model's, returned as it is
            return self.whole[a.name]
        task = self.task_of[a.name]
        if len(self.parts[task]) == 1 or a.name in self.user:  # a user input is whole on its device, however cut
            return self.copy[a.name, 0]
        where = self.layout.batch_dim(a)
        if not isinstance(where, tuple):
            raise InputError(f"the model's output {a.name!r} is split into sub-batches but its batch cannot be "
                             "located to join them: keep its task whole")
        # the join is a job of its own, last on the device of the largest part: it waits for every part and
        # nothing waits for it, so it cannot hold up a device another part needs
        device = max(self.parts[task], key=lambda p: p[1])[0]
        self.joins[f"{task}:join"] = device
        return self.join(f"{task}:join", a, [self.copy[a.name, k] for k in range(len(self.parts[task]))], where,
                         [b for _, b in self.parts[task]])

    def jobs(self, device_order: dict) -> Jobs:
        """The rewritten program as jobs, each device's jobs in the plan's order (joins last)."""
        torch, gm, parts = self.torch, self.captured.gm, self.parts
        output = self.copy_nodes()
        self.graph.output(torch.fx.node.map_arg(output.args[0], self.result))
        module = torch.fx.GraphModule(gm, self.graph)
        names = [n.name for n in self.graph.nodes if n.op == "placeholder"]
        if names != [n.name for n in gm.graph.nodes if n.op == "placeholder"]:
            raise InputError("the rewritten program renamed its inputs")  # a bug, not the user's input
        present = set(self.new_task.values())  # a split user input is one job: its other parts hold no operators
        order = {d: [job_id(t, k, parts) for t, k in seq if job_id(t, k, parts) in present]
                 for d, seq in device_order.items()}
        for job, device in self.joins.items():
            order.setdefault(device, []).append(job)
        return Jobs(replace(self.captured, gm=module), self.new_task, order,
                    {key: n.name for key, n in self.copy.items()})
