"""What the local cluster is built from agrees with the repository: runner `cluster:local-sim`
in configs/runners.yaml and configs/launch.yaml, and the tools' pins in pyproject.toml."""

from __future__ import annotations

import pytest
import yaml

from sim.cluster import extras, layout
from sim.cluster.layout import ROOT, Layout

LOCAL = "cluster:local-sim"  # the runner label of the simulated cluster (its default three nodes)
WIDE = "cluster:local-sim-wide"  # the same cluster made wide, for make bench-scale


def _runners() -> dict:
    return yaml.safe_load((ROOT / "configs" / "runners.yaml").read_text())


def _launch() -> dict:
    return yaml.safe_load((ROOT / "configs" / "launch.yaml").read_text())["profiles"]


def test_nodes_are_runner_local_each_on_its_own_address_and_port():
    # the wide runner lists every node the cluster can have, the default runner the default cluster's
    # (a node excluded there must never leave a job waiting for nodes that exist only when it is wide)
    node_list = layout.nodes(layout.MAX_NODES)
    assert [n.name for n in node_list] == _runners()["labels"][WIDE]
    assert _runners()["labels"][LOCAL] == [n.name for n in layout.nodes(3)]
    assert _runners()["hardware"][WIDE] == _runners()["hardware"][LOCAL]
    assert _launch()[WIDE] == _launch()[LOCAL]  # launched alike (a YAML anchor)
    assert len({n.addr for n in node_list}) == len({n.port for n in node_list}) == layout.MAX_NODES
    assert node_list[-1].addr == "127.0.0.42" and node_list[-1].port == 16852
    assert layout.CTLD_ADDR not in {n.addr for n in node_list}
    assert layout.CTLD_PORT not in {n.port for n in node_list}


def test_slurm_conf_carries_runner_local_shape(tmp_path):
    hardware = _runners()["hardware"][LOCAL]
    conf = layout.render_conf(Layout(tmp_path), layout.nodes(3))
    assert f"RealMemory={hardware['available-cpu-dram-mib']} " in conf
    assert f"PartitionName={_launch()[LOCAL]['partition']} Nodes=sim1,sim2,sim3 " in conf
    assert "NodeName=sim2 NodeAddr=127.0.0.12 Port=16822 " in conf
    assert "${" not in conf and str(tmp_path / "run" / "munge.socket") in conf


def test_too_many_nodes_is_refused():
    with pytest.raises(ValueError, match="NODES must be 1..32"):
        layout.nodes(layout.MAX_NODES + 1)


def test_torch_pin_is_picked_out_of_the_lmcache_extra():
    (torch,) = extras.requirements("lmcache", only="torch")
    assert torch.startswith("torch==") and torch in extras.requirements("lmcache")
    assert extras.requirements("router", only="torch") == []


def test_local_configs_name_the_tool_versions_the_tool_venvs_install():
    """A local config's component versions are what `make tools` installs (pyproject.toml pins): the
    lock file of a local run must not claim another version than ran."""
    pins = {
        "lmcache": extras.requirements("lmcache", only="lmcache"),
        "vllm-router": extras.requirements("router", only="vllm-router"),
        "sglang-router": extras.requirements("sglang-router", only="sglang-router"),
    }
    pinned = {name: req[0].split("==", 1)[1] for name, req in pins.items()}
    configs = yaml.safe_load((ROOT / "configs" / "local-master.yaml").read_text())
    seen = set()
    for entry in configs.values():
        for group in [
            *entry["scenarios"].get("agentic-coding", []),
            *entry["scenarios"].get("fixed-seq-len", []),
        ]:
            for point in group["search-space"]:
                for component in (point.get("kv-offload-backend"), point.get("router"), entry.get("router")):
                    if component and component["name"] in pinned:
                        assert component["version"] == pinned[component["name"]], component
                        seen.add(component["name"])
    assert seen == set(pinned)
