"""Module detection: series points, constants that must not glue modules, multi-channel cuts."""

from diviml import Task, TaskGraph
from diviml.generators import layered_dag
from diviml.solvers.engines.modules import constants, cut_widths, detect, series_points


def chain_of_diamonds(blocks: int) -> TaskGraph:
    """x -> (a_i, b_i) -> m_i for each block, block after block: the merges m_i are series points."""
    tasks = [Task(id="x", kind="input", time={"cpu": 0.0})]
    edges, last = [], "x"
    for i in range(blocks):
        for name in (f"a{i}", f"b{i}", f"m{i}"):
            tasks.append(Task(id=name, time={"cpu": 1.0}))
        edges += [(last, f"a{i}"), (last, f"b{i}"), (f"a{i}", f"m{i}"), (f"b{i}", f"m{i}")]
        last = f"m{i}"
    return TaskGraph.create(tasks, edges)


def test_series_points_are_the_tasks_every_path_passes_through():
    g = chain_of_diamonds(3)
    order = list(g.topological_order)
    assert [order[p] for p in series_points(g, order)] == ["x", "m0", "m1", "m2"]


def test_a_cut_after_a_series_point_is_crossed_by_one_tensor():
    g = chain_of_diamonds(2)
    order = list(g.topological_order)
    widths = cut_widths(g, order)
    points = series_points(g, order)
    assert [widths[p] for p in points] == [1] * (len(points) - 1) + [0]  # nothing leaves the output


def test_a_constant_shared_by_every_layer_does_not_glue_the_graph():
    tasks = [Task(id="x", kind="input", time={"cpu": 0.0}), Task(id="mask", time={"cpu": 1.0})]
    tasks += [Task(id=f"l{i}", time={"cpu": 1.0}) for i in range(4)]
    edges = [("x", "l0"), ("l0", "l1"), ("l1", "l2"), ("l2", "l3")] + [("mask", f"l{i}") for i in range(4)]
    g = TaskGraph.create(tasks, edges)
    assert constants(g) == {"mask"}
    chain = detect(g, max_size=2)
    assert set(chain.series_points) == {"x", "l0", "l1", "l2", "l3"}
    assert len(chain.modules) == 3
    assert "mask" in chain.modules[chain.module_of["l0"]].tasks  # it joins its first consumer's module


def test_every_task_is_in_one_module_and_modules_are_closed_under_predecessors():
    g = layered_dag(120, seed=3)
    chain = detect(g, max_size=12)
    assert sorted(t for m in chain.modules for t in m.tasks) == sorted(t.id for t in g.tasks)
    for i, m in enumerate(chain.modules):
        assert len(m.tasks) <= 12 or m.inputs == 1 and len(m.tasks) <= 24  # a whole series group: up to 2x
        for t in m.tasks:
            assert all(chain.module_of[u] <= i for u in g.predecessors[t])


def test_a_region_without_series_points_is_cut_at_small_multi_channel_boundaries():
    # two long parallel chains that meet only at the end: no series point inside
    tasks = [Task(id="x", kind="input", time={"cpu": 0.0}), Task(id="out", time={"cpu": 1.0})]
    tasks += [Task(id=f"{c}{i}", time={"cpu": 1.0}) for c in "pq" for i in range(10)]
    edges = [("x", "p0"), ("x", "q0"), ("p9", "out"), ("q9", "out")]
    edges += [(f"{c}{i}", f"{c}{i + 1}") for c in "pq" for i in range(9)]
    chain = detect(TaskGraph.create(tasks, edges), max_size=6)
    assert len(chain.modules) >= 4 and all(len(m.tasks) <= 6 for m in chain.modules)
    assert chain.multi_channel_cuts >= 1 and chain.widest_cut == 2  # the two chains cross every inner cut
    # the exact solver's decomposition cuts at series points only: the region stays whole
    whole = detect(TaskGraph.create(tasks, edges), max_size=6, cut_large=False)
    assert whole.multi_channel_cuts == 0 and max(len(m.tasks) for m in whole.modules) >= 20


def test_a_group_between_series_points_up_to_twice_the_module_size_stays_whole():
    # two parallel chains of 3 between x and out: 8 tasks, no series point inside
    tasks = [Task(id="x", kind="input", time={"cpu": 0.0}), Task(id="out", time={"cpu": 1.0})]
    tasks += [Task(id=f"{c}{i}", time={"cpu": 1.0}) for c in "pq" for i in range(3)]
    edges = [("x", "p0"), ("x", "q0"), ("p2", "out"), ("q2", "out")]
    edges += [(f"{c}{i}", f"{c}{i + 1}") for c in "pq" for i in range(2)]
    g = TaskGraph.create(tasks, edges)
    # a cut at a series point keeps the join exact; a cut inside the group would not
    kept = detect(g, max_size=4)
    assert kept.multi_channel_cuts == 0 and [len(m.tasks) for m in kept.modules] == [1, 7]
    cut = detect(g, max_size=4, whole_size=4)
    assert cut.multi_channel_cuts >= 1 and all(len(m.tasks) <= 4 for m in cut.modules)
