"""The CP-SAT model of a job graph (the engine of exact and split)."""

import random

import pytest
from conftest import busy_machine
from ortools.sat.python import cp_model

import diviml
from diviml import Objective, Problem
from diviml.bounds import energetic_bound, energetic_cuts, lower_bound
from diviml.generators import layered_dag, random_dag
from diviml.simulate import latency
from diviml.solvers.baselines import heft
from diviml.solvers.engines.cpsat import _heads_and_tails_on_devices, seconds_for, solve_jobs
from diviml.solvers.engines.jobs import JobGraph


def _jobs_and_optimum(seed: int):
    p = Problem(layered_dag(12, seed=seed), diviml.preset("paper-server"))
    jobs = JobGraph.whole(p)
    device_of, start, _ = heft.heft_schedule(jobs)
    upper = max(start[j] + jobs.duration(j, device_of[j]) for j in jobs.jobs)
    best = solve_jobs(jobs, upper=upper, time_limit=30, workers=1)
    assert best.status == "optimal"
    return jobs, upper, best


@pytest.mark.parametrize("seed", range(3))
def test_a_cutoff_below_the_optimum_is_proven_out_of_reach(seed):
    jobs, upper, best = _jobs_and_optimum(seed)
    out = solve_jobs(jobs, upper=upper, time_limit=30, workers=1, cutoff=best.objective * 0.98)
    assert out.status == "infeasible" and out.device_of is None


@pytest.mark.parametrize("seed", range(3))
def test_a_cutoff_at_or_above_the_optimum_keeps_the_optimum(seed):
    jobs, upper, best = _jobs_and_optimum(seed)
    out = solve_jobs(jobs, upper=upper, time_limit=30, workers=1, cutoff=best.objective * 1.0001)
    assert out.status == "optimal" and out.objective == pytest.approx(best.objective)


@pytest.mark.parametrize("seed", range(3))
def test_deadlines_bind_each_job_and_a_first_schedule_meeting_them_is_enough(seed):
    jobs, upper, best = _jobs_and_optimum(seed)
    first = jobs.jobs[0]
    earliest = min(jobs.duration(first, d) for d in jobs.devices(first))
    out = solve_jobs(jobs, upper=upper, time_limit=30, workers=1, deadlines={first: 0.99 * earliest})
    assert out.status == "infeasible"
    # the optimum's own end times as deadlines: a schedule meets them, the first one found is returned
    ends = {j: best.start[j] * best.stats["tick"] + jobs.duration(j, best.device_of[j]) for j in jobs.jobs}
    out = solve_jobs(jobs, upper=upper, time_limit=30, workers=1, deadlines=ends, first_only=True)
    assert out.status in ("timeout", "optimal") and out.device_of is not None
    tick = out.stats["tick"]
    for j in jobs.jobs:
        assert out.start[j] * tick + jobs.duration(j, out.device_of[j]) <= ends[j] + 2 * tick


def test_a_model_with_no_time_left_to_build_says_so_and_used_no_work():
    """split's workers subtract a solve's work from their budget: a model not built in time (its module's
    deadline passed, as on a 16-core machine with a batch of 8) ran none, and says it."""
    jobs, upper, _ = _jobs_and_optimum(0)
    out = solve_jobs(jobs, upper=upper, time_limit=0.0, workers=1, cutoff=upper, first_only=True)
    assert out.status == "unknown" and out.device_of is None
    assert out.stats["work"] == 0.0 and "longer to build" in out.stats["note"]


def test_a_work_limit_stops_one_worker_at_the_same_point_with_the_same_answer_however_loaded_the_machine():
    p = Problem(layered_dag(60, seed=1), diviml.preset("paper-server"))
    jobs = JobGraph.whole(p)
    device_of, start, upper = heft.heft_schedule(jobs)

    def run():
        return solve_jobs(jobs, upper=upper, time_limit=30, work_limit=0.05, workers=1, symmetry="none",
                          small=True, hint=(device_of, start))

    quiet = run()
    with busy_machine():
        loaded = run()
    assert quiet.status == loaded.status == "timeout"  # the work limit ended both, well before 30 s
    assert quiet.stats["work"] == pytest.approx(0.05, rel=0.2)
    assert (loaded.device_of, loaded.start, loaded.bound) == (quiet.device_of, quiet.start, quiet.bound)


def test_the_energetic_cuts_lift_cp_sat_s_bound_in_the_same_work():
    # one worker and a work limit: the same search, with and without the rows that hold the LP bound up
    problem = Problem(random_dag(40, seed=140, ccr=(0.2, 0.4)), diviml.preset("paper-server"), Objective("latency"))
    floor = lower_bound(problem)
    jobs = JobGraph.whole(problem)
    upper = diviml.solve(problem, "heft", time_limit=10).objective
    outcomes = [solve_jobs(jobs, upper=upper, time_limit=60, workers=1, work_limit=3, floor=floor, cuts=cuts)
                for cuts in ((), energetic_cuts(problem))]
    assert energetic_cuts(problem) and outcomes[1].bound > outcomes[0].bound * 1.01
    assert outcomes[1].bound <= upper


@pytest.mark.parametrize("seed", range(4))
def test_the_cuts_keep_the_proven_optimum(seed):
    # small graphs proven with and without the cuts: the same optimum, up to the ticks that rounding each
    # duration down can gain a schedule that no real one maps to (the cuts keep every real one)
    problem = Problem(random_dag(14, seed=seed, ccr=(0.5, 1.5)), diviml.preset("paper-server"), Objective("latency"))
    energetic_bound(problem)
    jobs = JobGraph.whole(problem)
    upper = diviml.solve(problem, "heft", time_limit=10).objective
    plain, cut = (solve_jobs(jobs, upper=upper, time_limit=30, workers=1, cuts=cuts) for cuts in ((), energetic_cuts(problem)))
    assert plain.status == cut.status == "optimal" and cut.objective == pytest.approx(plain.objective, rel=1e-6)


def test_cp_sat_is_given_its_time_less_what_loading_a_large_model_runs_over():
    large, small = cp_model.CpModel(), cp_model.CpModel()
    for _ in range(100_000):
        large.new_bool_var("")
    small.new_bool_var("")
    assert seconds_for(large, 10.0) == pytest.approx(9.7)  # 3 us a variable kept back
    assert seconds_for(small, 0.1) == pytest.approx(0.1, abs=1e-5)  # a module solve keeps its whole slice
    assert seconds_for(large, 0.1) == 0.01  # never nothing


def test_a_job_that_may_run_on_two_devices_does_not_make_a_feasible_model_infeasible():
    """Found by fuzzing (exact refused an 11-task problem that heft, milp and split placed): with each job's
    optional intervals sharing one start and one end, CP-SAT (9.10-9.15) proved this feasible model
    infeasible. Two CPU-only jobs feed c, c feeds d; c and d run faster on the GPU. In ticks of 1: the
    CPU jobs end by 48, c on the GPU by 56, d by 62, within the horizon of 100 (upper / resolution)."""
    link = diviml.Link(1.0, 7.0)  # every transfer takes 7
    tasks = [diviml.Task("a", {"cpu": 23.0}), diviml.Task("b", {"cpu": 25.0}),
             diviml.Task("c", {"cpu": 50.0, "gpu": 8.0}), diviml.Task("d", {"cpu": 55.0, "gpu": 6.0})]
    platform = diviml.Platform((diviml.Device("cpu", "cpu", is_host=True), diviml.Device("gpu", "gpu", link=link)))
    problem = Problem(diviml.TaskGraph.create(tasks, [("a", "c"), ("b", "c"), ("c", "d")]), platform)
    out = solve_jobs(JobGraph.whole(problem), upper=100.0, resolution=100, time_limit=10, workers=1)
    assert out.status == "optimal" and out.objective == pytest.approx(62.0 + 7.0)


@pytest.mark.parametrize("seed", range(6))
def test_each_job_starts_after_its_head_and_ends_its_tail_before_the_makespan_on_the_device_it_runs_on(seed):
    # the rows a cutoff propagates through: they must hold in every schedule, whatever the placement and order
    # (random placements, list-scheduled and in a random topological order, of random DAGs with transfers)
    rng = random.Random(seed)
    problem = Problem(random_dag(12, seed=seed, ccr=(0.5, 1.5)), diviml.preset("paper-server"), Objective("latency"))
    jobs = JobGraph.whole(problem)
    duration = {(j, d): jobs.duration(j, d) for j in jobs.jobs for d in jobs.devices(j)}
    bounds = _heads_and_tails_on_devices(jobs, lambda x: x, duration)
    assert bounds and any(head > 0 for head, _ in bounds.values())
    for _ in range(40):
        placement = {t: rng.choice(problem.allowed_devices[t]) for t in problem.graph.topological_order}
        order = None
        if rng.random() < 0.5:
            topo = sorted(problem.graph.topological_order, key=lambda t: rng.random())
            done, sequence = set(), []
            while topo:  # a random topological order
                t = next(t for t in topo if set(problem.graph.predecessors[t]) <= done)
                topo.remove(t)
                done.add(t)
                sequence.append(t)
            order = {d.name: [t for t in sequence if placement[t] == d.name] for d in problem.platform.devices}
        schedule = latency(problem, placement, order)
        for job in schedule.jobs:
            head, tail = bounds[(job.task, 0), job.device]
            assert job.start >= head * (1 - 1e-9) - 1e-12
            assert schedule.makespan - job.finish >= tail * (1 - 1e-9) - 1e-12
