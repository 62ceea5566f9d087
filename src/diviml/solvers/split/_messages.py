"""What the join keeps and what it asks of a worker: a partial schedule, a module solve's request and answer."""

from __future__ import annotations

from dataclasses import dataclass, field

NAME = "split"
MIN_BUDGET = 0.02  # seconds of work: below this a module solve keeps its first schedule
SMALL_MODULE = 40  # jobs; CP-SAT without presolve and linearization up to this size (see cpsat.solve_jobs)


@dataclass
class Partial:
    """A schedule of the modules so far, in absolute times."""
    device_of: dict = field(default_factory=dict)
    start: dict = field(default_factory=dict)
    finish: dict = field(default_factory=dict)
    free: dict = field(default_factory=dict)  # device -> when its last job ends
    memory_left: dict = field(default_factory=dict)
    resident: frozenset = frozenset()  # (task, device) whose memory is counted
    makespan: float = 0.0
    estimate: float = 0.0  # makespan of the whole graph at least: open jobs' finish plus the fastest path after
    lower: float = 0.0  # on a chain of series points: a lower bound on the makespan of any plan ending in this state
    open: frozenset = frozenset()  # scheduled jobs with consumers in later modules


@dataclass(frozen=True)
class Request:
    """One module solve: everything a worker needs besides the problem (which it already holds)."""
    tasks: tuple[str, ...]
    sizes: tuple[int, ...]
    release: dict  # (job, device) -> earliest start, relative to the step's origin
    only: dict
    capacity: dict | None
    # seconds of work on the reference machine (CP-SAT's deterministic time, see cpsat.solve_jobs): a solve
    # ends at the same point with the same answer however loaded the machine is
    budget: float
    deadline: float  # time.time() by which the solve must end whatever its budget (the join's time limit)
    seed: int
    # only a module schedule that ends before the cutoff (after the origin) can improve on the state
    # already reached: a cutoff on the module's makespan, shift-invariant, so repeated modules share it
    cutoff: float | None = None
    # with a cutoff, where the module's jobs read later decide the state's estimate (the exit does not close
    # the module): job -> its fastest path after the module; only a schedule ending each such job that long
    # before the cutoff can improve on the state (see solve_module)
    tails: dict | None = None
    # a schedule of an earlier module of the same structure (devices and order key by position), which
    # often fits this one nearly as well: a first schedule for CP-SAT beside HEFT's (see Pool.map)
    guide: tuple[dict, dict] | None = None


@dataclass(frozen=True)
class Answer:
    device_of: dict | None
    order_key: dict | None  # job -> a start time (any unit) whose order is the device order
    # optimal | timeout | heft (CP-SAT found nothing: the first schedule, HEFT's or the guide's) | infeasible |
    # cutoff (proven to end no earlier than the cutoff) | late (proven to end a job read later too late to
    # improve on the state: its tail past the cutoff)
    status: str
    bound: float = 0.0  # the module ends at least this long after the step's origin
    guided: bool = False  # CP-SAT started from an earlier module's schedule (the request's guide), not HEFT's
