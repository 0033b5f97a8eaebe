"""CPU offload under the FSDP2 strategy on a CPU run (2 real gloo processes): accepted, and the
same run as without it, since the parameters are in CPU memory already."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from worker_env import worker_env

from accel_testing.processes import run_workers

WORKERS = f"{Path(__file__).parent / 'fsdp_offload_workers.py'}"


def test_cpu_offload_on_a_cpu_run_trains_exactly_as_without_it(tmp_path):
    run_workers(
        2,
        function=f"{WORKERS}::offload_versus_plain",
        args=[str(tmp_path)],
        env=worker_env(),
        timeout=180,
    )
    found = json.loads((tmp_path / "results.json").read_text())
    # the plugin turns the flag into torch's policy; a pinned-memory policy (torch's default,
    # which needs an accelerator) runs too: sharding unpins it on a CPU mesh
    assert [found[k]["policy"] for k in ("plain", "flag", "policy")] == [
        "OffloadPolicy",
        "CPUOffloadPolicy",
        "CPUOffloadPolicy",
    ]
    assert all(found[k]["devices"] == ["cpu"] for k in found)
    plain = found["plain"]["losses"]
    assert plain[-1] < plain[0]
    # Exact: offloading to the CPU from the CPU copies nothing and changes no operation
    assert found["flag"]["losses"] == found["policy"]["losses"] == plain
    weights = torch.load(tmp_path / "weights.pt")
    for name in ("flag", "policy"):
        assert weights[name].keys() == weights["plain"].keys()
        assert all(torch.equal(weights[name][k], weights["plain"][k]) for k in weights["plain"])
