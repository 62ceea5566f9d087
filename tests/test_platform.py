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


def test_identical_devices_are_grouped():
    assert _platform().identical_groups == ()  # links or servers differ
    p = Platform.from_dict({"devices": [{"name": "cpu", "type": "cpu", "host": True},
                                        {"name": "g", "type": "gpu", "count": 3, "memory": 1e9,
                                         "link": {"bandwidth": 1e9}}]})
    assert p.identical_groups == (("g0", "g1", "g2"),)


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
