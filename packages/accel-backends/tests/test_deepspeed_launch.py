"""``accel launch --use_deepspeed`` end to end: the launcher's flags (or an Accelerate config file)
reach the DeepSpeed strategy in the workers, "auto" is filled from the prepared loader, and ZeRO-2
(ZeRO-3 from the config file) trains as the DDP launch of the same script does (float32; the two
clip with their own arithmetic: 1e-6)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed")

SCRIPT = Path(__file__).parent / "launched_training.py"

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _accel() -> list[str]:
    found = shutil.which("accel", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "accel_launch"]


def _launch(out: Path, *flags: str) -> dict:
    out.mkdir()
    command = [*_accel(), "launch", "--num_processes", "2", *flags, str(SCRIPT)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(out), "DS_ACCELERATOR": "cpu"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "report.json").read_text())


def test_use_deepspeed_zero2_trains_like_ddp(tmp_path):
    ddp = _launch(tmp_path / "ddp")
    zero = _launch(
        tmp_path / "zero2", "--use_deepspeed", "--zero_stage", "2", "--gradient_clipping", "1.0"
    )
    assert ddp == {
        "distributed_type": "DistributedType.MULTI_CPU",
        "strategy": "ddp",
        "zero_stage": None,
        "micro_batch": None,
        "clipping": None,
    }
    assert zero == {
        "distributed_type": "DistributedType.DEEPSPEED",
        "strategy": "deepspeed",
        "zero_stage": 2,
        "micro_batch": 4,  # "auto", filled from the prepared data loader
        "clipping": 1.0,  # --gradient_clipping
    }
    expected = torch.load(tmp_path / "ddp" / "weights.pt")
    got = torch.load(tmp_path / "zero2" / "weights.pt")
    assert sorted(got) == sorted(expected) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=0, atol=1e-6, msg=name)


#: An Accelerate 1.15 config file for ZeRO-3, as ``accelerate config`` writes it (2 CPU processes).
ZERO3_CONFIG = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  gradient_accumulation_steps: 1
  gradient_clipping: 1.0
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero3_save_16bit_model: true
  zero_stage: 3
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
use_cpu: true
"""


def test_an_accelerate_zero3_config_file_trains_like_ddp(tmp_path):
    config = tmp_path / "zero3.yaml"
    config.write_text(ZERO3_CONFIG)
    ddp = _launch(tmp_path / "ddp")
    zero = _launch(tmp_path / "zero3", "--config_file", str(config))
    assert zero == {
        "distributed_type": "DistributedType.DEEPSPEED",
        "strategy": "deepspeed",
        "zero_stage": 3,
        "micro_batch": 4,
        "clipping": 1.0,
    }
    assert ddp["strategy"] == "ddp"
    expected = torch.load(tmp_path / "ddp" / "weights.pt")
    got = torch.load(tmp_path / "zero3" / "weights.pt")
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=0, atol=1e-6, msg=name)
