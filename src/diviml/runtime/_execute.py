"""Run a cut program: a worker per plan device, each running its pieces in the plan's order (the calling
thread is the first device's worker, a thread each for the others).

A run is one request, or a *stream* of several (a pipeline plan): each worker runs its pieces slot by slot,
piece ``p`` of request ``r`` in slot ``r + stage(p)`` (:func:`~diviml.runtime._pieces.piece_stages`), without
waiting for the other workers to finish a slot, so while one device works on a request the devices before it
in the pipeline are already on the next ones. A value from another device comes from an earlier slot, and a
device runs its own slot's pieces in its order, so a waiting worker always waits for a worker in an earlier
slot: none can wait on another in a cycle.

A CPU device's worker runs with the device's intra-op thread count; a GPU device's worker on a CUDA stream
of its own, synchronised at the end of each piece before its outputs are released. A value goes to another
device by a real copy (``Tensor.to(..., non_blocking=True)``); host CPUs of one process share memory, so
between them it is handed over by reference, with no copy to charge (the platform's ``handoff`` prices the
receiver's waking instead). Values produced on
another rank arrive through :class:`~diviml.runtime._dist.Comm` (torch.distributed send/recv). Workers
wait on events, never poll in the normal path; a failing worker stops the others.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from dataclasses import dataclass


class _Aborted(Exception):
    """Another worker failed: this one stops waiting."""


@dataclass(frozen=True)
class PieceRun:
    device: str
    index: int
    start: float  # seconds from the run's start
    finish: float
    request: int = 0  # which request of a stream


class _Request:
    """One request's values in flight: what each device holds, an event per value another device waits on,
    a lock per value received from another rank (received once however many local devices read it), the
    sends still in flight, and how many of its local pieces (and reads of each awaited value) are left."""

    def __init__(self, base: dict, awaited: set[str], inputs: tuple[str, ...], pieces: int, reads: dict):
        self.values = dict(base)  # state, and this request's user inputs, on the devices that read them
        self.ready = {v: threading.Event() for v in awaited}
        for v in inputs:
            if v in self.ready:
                self.ready[v].set()
        self.received: dict[str, threading.Lock] = {}
        self.sends: list = []
        self.left = pieces
        self.reads = dict(reads)  # value another device waits on -> its local reads left in this request
        self.lock = threading.Lock()
        self.done = threading.Event()  # every local piece has run: results kept, other values dropped
        self.results: dict = {}
        if pieces == 0:
            self.done.set()


class Executor:
    """Persistent workers for the local devices of a program; :meth:`run` runs it once and times it."""

    def __init__(self, program, torch_device: dict, threads: dict, state: dict, inputs: list[dict], comm=None,
                 local: set[str] | None = None, stages: dict | None = None):
        import torch
        self.torch = torch
        self.program = program
        self.stages = stages or {}  # (device, piece index) -> its stage in a stream; none: every piece at 0
        # a stream holds at most this many requests' values: a piece of request r waits for request r - window
        # to be done, which only waits for pieces of earlier slots (its last is in slot r - 2), so no cycle
        self.window = max(self.stages.values(), default=0) + 2
        self.torch_device = torch_device  # plan device -> torch.device
        self.threads = threads  # plan device -> intra-op threads or None
        self.local = set(program.pieces) if local is None else set(local)
        self.comm = comm
        # values another device (or rank) waits for: only these need an event; a value read on its own
        # device is found in ``values`` by the piece after it
        self.awaited = {v for d, ps in program.pieces.items() for p in ps for v in p.inputs
                        if program.producer.get(v, d) != d}
        self._frees = _frees(program, self.awaited)
        # the values another device waits on are dropped after their last local reader, on every device
        self._reads = Counter(v for d in self.local for p in program.pieces[d] for v in p.inputs if v in self.awaited
                              and v not in program.results)
        self._copies = {v: [(v, str(torch_device[d])) for d in self.local] + [(v, "remote")] for v in self._reads}
        self.bases = self._placed(state, inputs)  # request r starts from bases[r % len(inputs)]
        # the program's results held here, each under its device's key: what a request keeps once it is done
        # (a weight the model returns as it is has no producer: it is the model's own, nothing to check)
        self._held = [(v, str(torch_device[program.producer[v]])) for v in program.results
                      if program.producer.get(v) in self.local]
        # a piece's own weights (a torch.fx capture keeps them in its modules) on the piece's device: a copy of
        # the piece there, so the captured module and the pieces of other devices keep theirs
        self.calls = {}
        for d in self.local:
            for p in program.pieces[d]:
                module = p.module
                if torch_device[d].type != "cpu" and module.state_dict():
                    module = copy.deepcopy(module).to(torch_device[d])
                self.calls[d, p.index] = module.forward  # not nn.Module.__call__: no hooks to run
        if any(torch_device[d].type == "cuda" for d in self.local):
            torch.cuda.synchronize()  # the copies above ran on this thread's stream; the workers read on theirs
        self.workers = sorted(d for d in self.local if program.pieces[d])
        self._local_pieces = sum(len(program.pieces[d]) for d in self.workers)  # a request is done after these
        # the calling thread runs the first device's pieces itself: one hand-off fewer per request (none at
        # all for a one-device plan); every other device has a thread of its own
        self._own = self.workers[0] if self.workers else None
        self._own_stream = self._stream(self._own) if self._own else None
        others = self.workers[1:]
        self._go = threading.Barrier(len(others) + 1)
        self._done = threading.Barrier(len(others) + 1)
        self._stop = False
        self._threads = [threading.Thread(target=self._work, args=(d,), daemon=True, name=f"diviml-{d}")
                         for d in others]
        for t in self._threads:
            t.start()

    def _placed(self, state: dict, inputs: list[dict]) -> list[dict]:
        """Per set of inputs, the values a request starts with: the state (parameters, buffers, constants)
        placed once on every device that reads it, shared by all, and the user inputs on the device the plan
        gives their task."""
        torch, program = self.torch, self.program
        shared: dict[tuple[str, str], object] = {}
        for d in self.local:
            key = str(self.torch_device[d])
            for p in program.pieces[d]:
                for v in p.inputs:
                    if v in state and (v, key) not in shared:
                        shared[v, key] = _to(torch, state[v], self.torch_device[d])
        bases = []
        for given in inputs:
            base = dict(shared)
            for v in program.inputs:
                d = program.producer[v]
                if d in self.local:
                    base[v, str(self.torch_device[d])] = _to(torch, given[v], self.torch_device[d])
            bases.append(base)
        return bases

    # -- one run ------------------------------------------------------------------------------------
    def run(self, requests: int = 1) -> tuple[list[dict], list[PieceRun], float]:
        """Run ``requests`` requests as one stream, request r on the executor's set of inputs r % their number:
        (per request, the values of the program's results held here; piece timings; wall seconds of the run)."""
        self.requests = [_Request(self.bases[r % len(self.bases)], self.awaited, self.program.inputs,
                                  self._local_pieces, self._reads) for r in range(requests)]
        # each device's (slot, piece index, request) in the order it runs them
        self.sequence = {d: sorted((r + self.stages.get((d, p.index), 0), p.index, r) for r in range(requests)
                                   for p in ps) for d, ps in self.program.pieces.items()}
        self.timings: list[PieceRun] = []
        self.errors: list[BaseException] = []
        self.t0 = time.perf_counter()
        if self.comm is not None:  # user inputs held here that another rank reads: sent as the stream starts
            for request in self.requests:
                for v in self.program.inputs:
                    d = self.program.producer[v]
                    if d in self.local:
                        request.sends.extend(self.comm.send(v, request.values[v, str(self.torch_device[d])]))
        self._go.wait()
        if self._own is not None:
            own_threads = self.threads.get(self._own)
            if self.torch_device[self._own].type == "cpu" and own_threads and self.torch.get_num_threads() != own_threads:
                self.torch.set_num_threads(own_threads)
            self._run_pieces(self._own, self._own_stream)
        self._done.wait()
        wall = time.perf_counter() - self.t0
        if self.errors:  # before waiting on sends: a peer waiting on a value never made would hide the error
            raise self.errors[0]
        for request in self.requests:
            for work in request.sends:
                work.wait()
        results = [request.results for request in self.requests]
        self.requests = []  # a stream's values are not kept between runs
        return results, sorted(self.timings, key=lambda r: r.start), wall

    def close(self) -> None:
        self._stop = True
        self._go.wait()
        for t in self._threads:
            t.join()

    # -- the workers --------------------------------------------------------------------------------
    def _stream(self, device: str):
        target = self.torch_device[device]
        return self.torch.cuda.Stream(target) if target.type == "cuda" else None

    def _work(self, device: str) -> None:
        torch = self.torch
        target = self.torch_device[device]
        if target.type == "cpu" and self.threads.get(device):
            torch.set_num_threads(self.threads[device])
        stream = self._stream(device)
        while True:
            self._go.wait()
            if self._stop:
                return
            self._run_pieces(device, stream)
            self._done.wait()

    def _run_pieces(self, device: str, stream) -> None:
        """One device's pieces of each request in turn, in the plan's order; a failure stops the other workers."""
        torch = self.torch
        target = self.torch_device[device]
        key = str(target)
        comm, timings, pieces = self.comm, self.timings, self.program.pieces[device]
        clock, t0 = time.perf_counter, self.t0
        try:
            with torch.no_grad():
                for _, index, r in self.sequence[device]:
                    piece, request = pieces[index], self.requests[r]
                    if r >= self.window:
                        self._await(self.requests[r - self.window].done)
                    values, ready = request.values, request.ready
                    call = self.calls[device, index]
                    if stream is not None:
                        with torch.cuda.stream(stream):  # copies in and the piece on one stream
                            args = [self._value(v, target, request) for v in piece.inputs]
                            start = clock()
                            out = call(*args)
                        stream.synchronize()
                    else:
                        args = []
                        for v in piece.inputs:  # held here already, else from another device: wait, copy
                            a = values.get((v, key))
                            args.append(a if a is not None else self._value(v, target, request))
                        start = clock()
                        out = call(*args)
                    finish = clock()
                    for v, value in zip(piece.outputs, out):
                        values[v, key] = value
                        event = ready.get(v)
                        if event is not None:
                            event.set()
                        if comm is not None:
                            request.sends.extend(comm.send(v, value))
                    for v in self._frees.get((device, index), ()):
                        del values[v, key]
                    timings.append(PieceRun(device, index, start - t0, finish - t0, r))
                    self._ran_one(request, piece)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of run()
            if not isinstance(exc, _Aborted):
                self.errors.append(exc)
            for request in self.requests:
                for e in (*request.ready.values(), request.done):
                    e.set()

    def _await(self, event) -> None:
        event.wait()
        if self.errors:
            raise _Aborted()

    def _ran_one(self, request: _Request, piece) -> None:
        """Count a piece of ``request`` run here: drop the values from other devices it was the last to read
        (every copy); after the request's last piece keep its results and drop the rest (and its sends already
        delivered), so a stream holds only what its requests in flight still need."""
        dropped = []
        with request.lock:
            for v in piece.inputs:
                if v in request.reads:
                    request.reads[v] -= 1
                    if request.reads[v] == 0:
                        dropped.append(v)
            request.left -= 1
            last = request.left == 0
        for v in dropped:
            for key in self._copies[v]:
                request.values.pop(key, None)
        if not last:
            return
        request.results = {v: request.values[v, key] for v, key in self._held}
        request.values.clear()
        request.sends = [s for s in request.sends if not s.work.is_completed()]
        request.done.set()

    def _value(self, name: str, target, request: _Request):
        key = (name, str(target))
        value = request.values.get(key)
        if value is not None:
            return value
        producer = self.program.producer.get(name)
        if producer is not None and producer not in self.local:
            value = self._receive(name, request)
        else:
            self._await(request.ready[name])
            value = request.values[name, str(self.torch_device[producer])]
        copied = _to(self.torch, value, target)
        request.values[key] = copied
        return copied

    def _receive(self, name: str, request: _Request):
        """A value from another rank, received once per request. Each value has one tag and every reader takes
        the requests in order, so the receives of one value come in the order its sends went."""
        lock = request.received.setdefault(name, threading.Lock())
        with lock:
            value = request.values.get((name, "remote"))
            if value is None:
                value = request.values[name, "remote"] = self.comm.recv(name)
        return value


def _frees(program, awaited: set[str]) -> dict[tuple[str, int], tuple[str, ...]]:
    """Per piece, the values to drop once it has run: those made and read on its device alone, not results,
    whose last reader it is; so a request holds what the unsplit module would, not every value it made."""
    last: dict[str, tuple[str, int]] = {}
    for d, ps in program.pieces.items():
        for p in ps:
            for v in p.inputs:
                if program.producer.get(v) == d and v not in awaited:
                    last[v] = (d, p.index)
    keep = set(program.results)
    out: dict[tuple[str, int], list[str]] = {}
    for v, at in last.items():
        if v not in keep:
            out.setdefault(at, []).append(v)
    return {k: tuple(v) for k, v in out.items()}


def _to(torch, value, device):
    """``value`` (a tensor, or a tuple/list of them) on ``device``; the same object where it is already there.
    Copies to a GPU are asynchronous on the current stream (the piece that reads them runs after them on it);
    copies to the host wait, so the host never reads a tensor still in flight."""
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device, non_blocking=device.type == "cuda")
    if isinstance(value, (tuple, list)):
        return type(value)(_to(torch, v, device) for v in value)
    return value
