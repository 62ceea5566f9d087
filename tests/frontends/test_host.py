"""A server preset's CPU is a catalogue chip: its times come from this host's measurements by a written rule."""

import pytest

pytest.importorskip("torch")

from diviml.catalogue import GRAIN_SIZE, spec  # noqa: E402
from diviml.frontends.host import HOST_TYPE, HostSpec, derived_time, measure_host  # noqa: E402
from diviml.frontends.pytorch import profile_zoo  # noqa: E402

# a host of 100 GFLOP/s and 20 GB/s per thread, 2 us per call, profiled with one thread
HOST = HostSpec(peak_flops_per_thread=100e9, bandwidth_per_thread=20e9, dispatch=2e-6, threads=1)
XEON = spec("cpu")  # 20 cores, 1.6 TFLOP/s, 140.8 GB/s


def test_a_large_operator_moves_to_the_servers_peak_keeping_its_measured_efficiency():
    flops, nbytes, outputs = 2e9, 1e6, 20 * GRAIN_SIZE  # compute-bound, spreads over all 20 cores
    ideal_host = flops / 100e9  # 20 ms at the host's peak
    measured = HOST.dispatch + 2 * ideal_host  # it reached half the host's peak
    t = derived_time(XEON, flops, nbytes, outputs, measured, HOST)
    assert t == pytest.approx(HOST.dispatch + 2 * flops / 1.6e12)  # half the server's peak


def test_an_operator_timed_faster_than_the_measured_host_peak_still_costs_the_servers_roofline():
    flops, nbytes, outputs = 2e9, 1e6, 20 * GRAIN_SIZE
    measured = HOST.dispatch + 0.5 * flops / 100e9  # twice the host's measured peak: measured in a busy moment
    t = derived_time(XEON, flops, nbytes, outputs, measured, HOST)
    assert t == pytest.approx(HOST.dispatch + flops / 1.6e12)  # no efficiency above 100% carried over


def test_a_small_operator_runs_on_one_core_of_the_server():
    flops, nbytes, outputs = 2e4, 1e2, GRAIN_SIZE // 2  # under one grain: one core, 80 GFLOP/s
    measured = HOST.dispatch + flops / 100e9
    t = derived_time(XEON, flops, nbytes, outputs, measured, HOST)
    assert t == pytest.approx(HOST.dispatch + flops / (1.6e12 / 20))
    assert t > measured  # one of the Xeon's cores is slower than one of this host's threads


def test_an_operator_without_work_keeps_its_measured_time_and_without_a_measurement_gets_the_roofline():
    assert derived_time(XEON, 0.0, 0.0, 1.0, 7e-6, HOST) == 7e-6
    assert derived_time(XEON, 1e9, 1e6, None, None, None) == pytest.approx(XEON.roofline(1e9, 1e6))


def test_the_catalogue_cpu_spreads_an_operator_over_one_core_per_grain_of_outputs_or_multiply_adds():
    one_core = XEON.roofline(2e4, 1e7, outputs=10)
    all_cores = XEON.roofline(2e4, 1e7, outputs=100 * GRAIN_SIZE)
    assert one_core - XEON.launch_overhead == pytest.approx(20 * (all_cores - XEON.launch_overhead))
    # a contraction with a small output (a 512-channel 7x7 convolution) spreads by its multiply-adds
    all_cores = XEON.roofline(1e9, 0.0, outputs=25088)
    assert (all_cores - XEON.launch_overhead) == pytest.approx(1e9 / 1.6e12)
    assert spec("a100").roofline(1e9, 0.0, outputs=10) == spec("a100").roofline(1e9, 0.0)  # a GPU: no such rule


def test_this_host_is_measured_with_plausible_figures():
    host = measure_host(threads=1)
    assert 1e9 < host.peak_flops_per_thread < 1e13  # 1 GFLOP/s .. 10 TFLOP/s per thread
    assert 1e8 < host.bandwidth_per_thread < 1e12
    assert 1e-8 < host.dispatch < 1e-3


def test_a_profile_records_this_cpu_as_host_and_derives_the_server_cpu_from_it():
    graph = profile_zoo("resnet18", repeats=2)
    ops = [t for t in graph.tasks if t.kind != "input"]
    assert all(HOST_TYPE in t.time and "cpu" in t.time for t in ops)
    convs = [t for t in ops if t.kind == "convolution"]
    # 20 cores at 1.6 TFLOP/s against one measured thread: every convolution is faster on the server CPU
    assert all(t.time["cpu"] < t.time[HOST_TYPE] for t in convs)
    # yet not faster than its share of the Xeon's peak allows
    assert all(t.time["cpu"] >= t.flops / XEON.peak_flops for t in convs)
