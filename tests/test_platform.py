import math

import pytest

from diviml import Device, InputError, Link, Platform, Task, preset, preset_names


def test_presets_list_localhost_and_the_paper_server():
    assert {"localhost", "paper-server"} <= set(preset_names())


def test_localhost_has_one_cpu_device_per_core():
    import os
    p = preset("localhost")
    assert len(p.devices) == len(os.sched_getaffinity(0))
    assert all(d.type == "host" and d.is_host for d in p.devices)  # this machine: times measured here


def test_paper_server_has_a_cpu_and_two_different_gpus_with_a_source_for_every_number():
    p = preset("paper-server")
    types = [d.type for d in p.devices]
    assert types.count("cpu") == 1 and len(set(types) - {"cpu"}) == 2
    for key in ("cpu memory", "v100 memory", "a100 memory", "v100 link bandwidth", "a100 link bandwidth",
                "link latency"):
        assert p.sources[key]


def test_unknown_preset_names_the_choices():
    with pytest.raises(InputError, match="unknown platform 'nope'.*paper-server"):
        Platform.load("nope")


def _platform(**kw):
    host = Device("cpu", "cpu", math.inf, "s0", True)
    g0 = Device("g0", "gpu", 1e9, "s0", False, Link(10.0, 1.0))
    g1 = Device("g1", "gpu", 1e9, "s0", False, Link(5.0, 0.0))
    g2 = Device("g2", "gpu", 1e9, "s1", False, Link(10.0, 1.0))
    return Platform((host, g0, g1, g2), network=Link(2.0, 3.0), **kw)


@pytest.mark.parametrize("misspelt, where", [
    ({"devices": [{"name": "cpu", "type": "cpu", "host": True, "memroy": 8e9}]}, "device 'cpu'"),
    ({"devices": [{"name": "cpu", "type": "cpu", "host": True},
                  {"name": "g", "type": "a100", "link": {"bandwith": 1e9}}]}, "link of g"),
    ({"devices": [{"name": "cpu", "type": "cpu", "host": True}], "netwrok": {"bandwidth": 1e9}}, "p.yaml"),
    ({"devices": [{"name": "c0", "type": "cpu", "host": True}, {"name": "c1", "type": "cpu", "host": True}],
      "peer_links": [{"between": ["c0", "c1"], "bandwidth": 1e9, "latncy": 1e-6}]}, "peer link #0"),
])
def test_a_misspelt_field_is_refused_by_name_not_left_out(misspelt, where):
    # a device's "memroy" left out would be a device of unlimited memory, which every plan then trusts
    with pytest.raises(InputError, match=r"unknown field\(s\) (memroy|bandwith|netwrok|latncy); known: "):
        Platform.from_dict(misspelt, origin="p.yaml")
    with pytest.raises(InputError, match=where):
        Platform.from_dict(misspelt, origin="p.yaml")


def test_a_host_with_a_link_is_refused_as_its_link_would_be_ignored():
    # a GPU marked host by mistake would move its tensors for free
    with pytest.raises(InputError, match="device 'g' is a host CPU \\('host: true'\\) with a 'link' to the host"):
        Platform.from_dict({"devices": [{"name": "cpu", "type": "cpu", "host": True},
                                        {"name": "g", "type": "a100", "host": True, "link": {"bandwidth": 1e9}}]})


def test_transfers_are_staged_through_the_host_hop_by_hop():
    p = _platform()
    t = Task("a", {"gpu": 1}, output_bytes=20.0)
    assert p.transfer_time(t, "g0", "g0") == 0
    assert p.transfer_time(t, "cpu", "g0") == 1 + 20 / 10  # host CPU hop is free
    assert p.transfer_time(t, "g0", "g1") == (1 + 2) + 4
    assert p.transfer_time(t, "g0", "g2") == 3 + (3 + 10) + 3  # across servers: the network too


def test_a_peer_link_replaces_the_host_path():
    p = _platform(peer_links={frozenset(("g0", "g1")): Link(100.0, 0.5)})
    assert p.transfer_time(Task("a", {"gpu": 1}, output_bytes=20.0), "g1", "g0") == 0.5 + 0.2


def test_a_task_transfer_time_overrides_the_link():
    p = _platform()
    t = Task("a", {"gpu": 1}, output_bytes=20.0, transfer_time=7.0)
    assert p.transfer_time(t, "g0", "g1") == 14.0
    assert p.transfer_time(t, "g0", "cpu") == 7.0


def test_a_hand_off_is_paid_at_each_end_of_a_crossing_host_or_not():
    # two workers of one process hand a tensor over by reference, but the receiver must be woken
    p = Platform.from_dict({"devices": [
        {"name": "w0", "type": "host", "host": True, "handoff": 3e-5},
        {"name": "w1", "type": "host", "host": True, "handoff": 3e-5},
        {"name": "g", "type": "gpu", "handoff": 1e-4, "link": {"bandwidth": 10.0, "latency": 1.0}}]})
    t = Task("a", {"host": 1}, output_bytes=20.0)
    assert p.transfer_time(t, "w0", "w0") == 0  # a device keeps its own values
    assert p.transfer_time(t, "w0", "w1") == pytest.approx(6e-5)
    assert p.transfer_time(t, "w1", "g") == pytest.approx(3e-5 + 1e-4 + 1 + 2)
    assert p.transfer_time(t, "w1", "g", scale=0.5) == pytest.approx(3e-5 + 1e-4 + 1 + 1)  # a latency, not scaled
    assert p.hop_time(t, p.by_name["w0"]) == 3e-5
    assert p.identical_groups == (("w0", "w1"),)
    assert Platform.from_dict(p.to_dict()) == p  # written back with the platform


def test_devices_of_different_hand_offs_are_not_interchangeable():
    p = Platform.from_dict({"devices": [{"name": "w0", "type": "host", "host": True, "handoff": 3e-5},
                                        {"name": "w1", "type": "host", "host": True}]})
    assert p.identical_groups == ()
    assert p.transfer_time(Task("a", {"host": 1}), "w1", "w0") == 3e-5
    # nor may a file declare them a group, which symmetry breaking would swap as if they were
    with pytest.raises(InputError, match=r"group \['w0', 'w1'\] mixes devices of different .*hand-off"):
        Platform.from_dict({"devices": [{"name": "w0", "type": "host", "host": True, "handoff": 3e-5},
                                        {"name": "w1", "type": "host", "host": True}], "groups": [["w0", "w1"]]})


@pytest.mark.parametrize("value", [-1e-6, "soon", float("inf"), float("nan")])
def test_a_hand_off_that_is_no_number_of_seconds_is_refused_by_name(value):
    with pytest.raises(InputError, match=r"handoff of w0 must be a number of seconds >= 0"):
        Platform.from_dict({"devices": [{"name": "w0", "type": "host", "host": True, "handoff": value}]})


def test_the_two_cpu_workers_pay_what_a_crossing_measured_here():
    p = preset("cpu-workers-2")
    crossing = p.transfer_time(Task("a", {"host": 1}, output_bytes=1e6), "worker0", "worker1")
    assert 40e-6 <= crossing <= 150e-6  # results/runtime_crossing.md: 42-143 us on small operators
    assert "runtime_crossing" in p.sources["handoff"]


def test_who_spends_a_transfer_is_read_written_back_and_checked():
    workers = {"devices": [{"name": "w0", "type": "host", "host": True}, {"name": "w1", "type": "host", "host": True}]}
    assert Platform.from_dict(workers).transfers == "overlapped"  # the papers' model unless a file says otherwise
    receiving = Platform.from_dict({**workers, "transfers": "receiver"})
    assert receiving.transfers == "receiver" and Platform.from_dict(receiving.to_dict()) == receiving
    with pytest.raises(InputError, match="'transfers' must be 'overlapped' .* or 'receiver'"):
        Platform.from_dict({**workers, "transfers": "sender"})


def test_the_runtime_presets_have_the_receiver_spend_a_crossing_as_diviml_run_does():
    assert preset("cpu-workers-2").transfers == preset("localhost").transfers == "receiver"
    assert "runtime_receiver_busy" in preset("cpu-workers-2").sources["transfers"]
    assert preset("paper-server").transfers == preset("six-servers").transfers == "overlapped"


@pytest.mark.parametrize("name", ["six-servers", "a100-ib-2x8", "paper-server", "localhost", "cpu-workers-2",
                                  "synthetic"])
def test_transfers_priced_once_per_route_are_every_pairs_transfers(name):
    # HEFT's rank and list search's table price each route once, not each pair: each pair must still get its own
    from itertools import permutations
    p = _platform(peer_links={frozenset(("g0", "g1")): Link(100.0, 0.5)}) if name == "synthetic" else preset(name)
    pairs = list(permutations([d.name for d in p.devices], 2))
    for task in (Task("a", {"gpu": 1}, output_bytes=3e7), Task("b", {"gpu": 1}, output_bytes=0.0, transfer_time=0.2)):
        for scale in (1.0, 0.25):
            every_pair = math.fsum(p.transfer_time(task, a, b, scale) for a, b in pairs) / len(pairs)
            assert p.mean_transfer_time(task, scale) == pytest.approx(every_pair, rel=1e-12)
            assert p.transfer_matrix(task, scale) == [[p.transfer_time(task, a.name, b.name, scale)
                                                       for b in p.devices] for a in p.devices]


def test_identical_devices_are_grouped():
    assert _platform().identical_groups == ()  # links or servers differ
    p = Platform.from_dict({"devices": [{"name": "cpu", "type": "cpu", "host": True},
                                        {"name": "g", "type": "gpu", "count": 3, "memory": 1e9,
                                         "link": {"bandwidth": 1e9}}]})
    assert p.identical_groups == (("g0", "g1", "g2"),)


def servers_platform(peer_across: bool = False, other_memory: bool = False) -> Platform:
    """Three servers of a host CPU and two GPUs joined by a peer link; the third's GPUs may hold less."""
    devices, links = [], []
    for s in ("s0", "s1", "s2"):
        memory = 16e9 if other_memory and s == "s2" else 40e9
        devices += [{"name": f"{s}cpu", "type": "cpu", "server": s, "host": True}]
        devices += [{"name": f"{s}g{i}", "type": "gpu", "server": s, "memory": memory,
                     "link": {"bandwidth": 16e9}} for i in range(2)]
        links.append({"among": [f"{s}g0", f"{s}g1"], "bandwidth": 300e9})
    if peer_across:
        links.append({"between": ["s1g0", "s2g0"], "bandwidth": 50e9})
    return Platform.from_dict({"devices": devices, "peer_links": links, "network": {"bandwidth": 12.5e9}})


def test_identical_servers_are_grouped_device_by_device():
    assert servers_platform().identical_servers == ((("s0cpu", "s0g0", "s0g1"), ("s1cpu", "s1g0", "s1g1"),
                                                      ("s2cpu", "s2g0", "s2g1")),)
    assert servers_platform(other_memory=True).identical_servers == ((("s0cpu", "s0g0", "s0g1"),
                                                                      ("s1cpu", "s1g0", "s1g1")),)
    assert servers_platform(peer_across=True).identical_servers == ()  # s0 alone is like no other
    assert preset("h100-nvlink-8").identical_servers == ()  # one server
    assert len(preset("a100-ib-2x8").identical_servers) == 1
    assert sorted(len(g) for g in preset("six-servers").identical_servers) == [2, 2, 2]


def test_swapping_identical_servers_changes_no_transfer():
    from itertools import combinations
    p = servers_platform(other_memory=True)
    task = Task("a", {"gpu": 1, "cpu": 1}, output_bytes=1e8)
    (first, second), = p.identical_servers
    swap = dict(zip(first, second)) | dict(zip(second, first))
    for a, b in combinations([d.name for d in p.devices], 2):
        assert p.transfer_time(task, a, b) == pytest.approx(p.transfer_time(task, swap.get(a, a), swap.get(b, b)))


@pytest.mark.parametrize("data, message", [
    ({"devices": []}, "no devices"),
    ({"devices": [{"name": "g", "type": "gpu"}]}, "neither a host CPU"),
    ({"devices": [{"name": "g", "type": "gpu", "link": {"bandwidth": -1}}]}, "bandwidth must be a positive"),
    ({"devices": [{"name": "c", "type": "cpu", "host": True}, {"name": "c", "type": "cpu", "host": True}]},
     "duplicate device names"),
    ({"devices": [{"name": "c", "host": True}]}, "malformed platform"),
    ({"devices": [{"name": "a", "type": "cpu", "host": True, "server": "x"},
                  {"name": "b", "type": "cpu", "host": True, "server": "y"}]}, "no 'network'"),
])
def test_bad_platform_files_are_rejected_with_a_reason(data, message):
    with pytest.raises(InputError, match=message):
        Platform.from_dict(data)


def test_platform_files_load_from_yaml(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("devices:\n  - {name: cpu, type: cpu, host: true}\n  - {name: g, type: gpu, memory: 1e9, "
                 "link: {bandwidth: 1.0e+9, latency: 1.0e-5}}\n")
    p = Platform.load(str(f))
    assert p.by_name["g"].link == Link(1e9, 1e-5)
    assert Platform.from_dict(p.to_dict()) == p


def _paper(change) -> dict:
    from importlib import resources

    import yaml
    data = yaml.safe_load((resources.files("diviml") / "presets" / "paper-server.yaml").read_text())
    change(data)
    return data


def _v100(**fields):
    return lambda d: d["devices"][1].update(fields)


@pytest.mark.parametrize("change, says", [
    (_v100(link={"bandwidth": 1e-300}), "at least 1 byte/s"),
    (lambda d: d["devices"].__setitem__(1, 5), "device #1 must be a mapping"),
    (_v100(link=5), "must be a mapping with 'bandwidth'"),
    (lambda d: d.__setitem__("sources", 5), "'sources' must map"),
    (_v100(host="false"), "must be true or false"),        # a string is not read as true
    (_v100(memory=True), "expected a number, got True"),   # nor a boolean as one byte
    (_v100(count=0), "between 1 and"),                      # a device is not dropped silently
    (_v100(count=-1), "between 1 and"),
    (_v100(count=100_000), "between 1 and"),                # nor does a typo make 100,000 devices
    (_v100(memory=10 ** 320), "digits is beyond"),
    (lambda d: d.__setitem__("devices", None), "'devices' must be a list"),
])
def test_a_malformed_platform_is_one_clear_error_not_a_crash(change, says):
    with pytest.raises(InputError, match=says):
        Platform.from_dict(_paper(change))


def test_a_platform_file_nested_too_deeply_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("devices: " + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nested too deeply"):
        Platform.load(str(path))


@pytest.mark.parametrize("name, servers, gpus", [("six-servers", 6, 20), ("h100-nvlink-8", 1, 8), ("a100-ib-2x8", 2, 16)])
def test_cluster_presets_have_servers_a_network_distinct_from_their_links_and_a_source_for_each(name, servers, gpus):
    p = preset(name)
    assert len({d.server for d in p.devices}) == servers
    assert sum(not d.is_host for d in p.devices) == gpus and sum(d.is_host for d in p.devices) == servers
    links = {d.link for d in p.devices if d.link} | set(p.peer_links.values())
    assert servers == 1 or (p.network is not None and p.network not in links)
    assert {"layout", "cpu", "link latency"} <= set(p.sources) and all(p.sources.values())


def test_six_servers_hold_gpt3_weights_only_across_servers():
    p = preset("six-servers")
    per_server: dict[str, float] = {}
    for d in p.devices:
        if not d.is_host:
            per_server[d.server] = per_server.get(d.server, 0.0) + d.memory_bytes
    assert sum(per_server.values()) == 768e9 and max(per_server.values()) < 700e9  # GPT-3 175B in FP32


def test_a_switched_fabric_links_every_pair_and_keeps_its_gpus_interchangeable():
    p = preset("h100-nvlink-8")
    gpus = [d.name for d in p.devices if not d.is_host]
    assert len(p.peer_links) == 28 and p.identical_groups == (tuple(gpus),)
    t = Task("a", {"h100-sxm": 1}, output_bytes=450e6)
    assert p.transfer_time(t, "gpu0", "gpu7") == pytest.approx(3e-6 + 1e-3)


def _swap(a, b, name):
    return b if name == a else a if name == b else name


@pytest.mark.parametrize("seed", range(40))
def test_grouped_devices_can_be_swapped_without_changing_any_transfer(seed):
    import random
    rng = random.Random(seed)
    n = rng.randint(2, 5)
    gpus = [{"name": f"g{i}", "type": "gpu", "memory": 1e9, "link": {"bandwidth": 1e9}} for i in range(n)]
    names = [g["name"] for g in gpus]
    fast, slow = {"bandwidth": 9e9}, {"bandwidth": 3e9}
    peers = []
    for _ in range(rng.randint(0, 3)):
        members = rng.sample(names, rng.randint(2, n))
        peers.append({"among": members, **rng.choice([fast, slow])} if len(members) > 2 or rng.random() < .5
                     else {"between": members, **rng.choice([fast, slow])})
    p = Platform.from_dict({"devices": [{"name": "cpu", "type": "cpu", "host": True}, *gpus], "peer_links": peers})
    t = Task("x", {"gpu": 1}, output_bytes=1e6)
    everyone = [d.name for d in p.devices]
    for group in p.identical_groups:
        for i, a in enumerate(group):
            for b in group[i + 1:]:  # the swap of a and b is an automorphism of the transfer times
                for x in everyone:
                    for y in everyone:
                        assert p.transfer_time(t, x, y) == p.transfer_time(t, _swap(a, b, x), _swap(a, b, y))


@pytest.mark.parametrize("entry, message", [
    ({"bandwidth": 1e9}, "either 'between"), ({"between": ["g0"], "bandwidth": 1e9}, "two different devices"),
    ({"between": ["g0", "g1"], "among": ["g0", "g1"], "bandwidth": 1e9}, "either 'between"),
    ({"among": ["g0", "nope"], "bandwidth": 1e9}, "unknown device 'nope'")])
def test_bad_peer_links_are_refused_with_a_reason(entry, message):
    data = {"devices": [{"name": "cpu", "type": "cpu", "host": True},
                        {"name": "g", "type": "gpu", "count": 2, "link": {"bandwidth": 1e9}}], "peer_links": [entry]}
    with pytest.raises(InputError, match=message):
        Platform.from_dict(data)
