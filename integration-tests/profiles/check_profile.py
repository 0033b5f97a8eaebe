"""Check what one install profile can and cannot import. Run by ``nox -s profiles`` in a venv that
holds only that profile's packages.

Usage: python check_profile.py inference|launcher|full
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

EXPECTED = {
    "inference": {
        "present": ["torch", "accel_base", "accel_ops", "accel_bigmodel"],
        "absent": ["accel_core", "accel_launch", "accel_backends", "accel"],
    },
    "launcher": {
        # accel-base is the launcher's one dependency among the accel packages: standard library
        # only, it brings no torch
        "present": ["accel_launch", "accel_base", "yaml"],
        "absent": ["torch", "accel_ops", "accel_core", "accel_bigmodel", "accel_backends", "accel"],
    },
    "full": {
        "present": [
            "torch",
            "accel",
            "accel_base",
            "accel_ops",
            "accel_core",
            "accel_bigmodel",
            "accel_launch",
        ],
        "absent": [],
    },
}


def _fresh_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"profile check failed running {code!r}:\n{done.stderr}")
    return done.stdout


def check_inference() -> None:
    out = _fresh_python(
        "import sys, torch, accel_bigmodel\n"
        "with accel_bigmodel.init_empty_weights():\n"
        "    layer = torch.nn.Linear(4096, 4096)\n"
        "print(layer.weight.device, sorted(m for m in sys.modules if m.startswith('accel')))"
    )
    assert out.startswith("meta"), out
    assert "accel_core" not in out and "accel_launch" not in out, out


def check_launcher() -> None:
    accel = shutil.which("accel")
    assert accel, "the accel command is not on PATH"
    help_text = subprocess.run([accel, "--help"], capture_output=True, text=True, check=True).stdout
    assert "launch" in help_text and "config" in help_text, help_text
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "default_config.yaml")
        subprocess.run([accel, "config", "default", "--config_file", path], check=True)
        assert os.path.getsize(path) > 0
    # the description types and the entry-point reader are there; no package registers an engine,
    # so only the launcher's built-in strategies exist, and reading them imports no torch
    out = _fresh_python(
        "import sys\n"
        "from accel_launch.launch import engines\n"
        "print(sorted(engines.installed()), engines.strategy_names(), 'torch' in sys.modules)"
    )
    assert out.split("\n")[0] == "[] ['single_device', 'ddp'] False", out


def check_full() -> None:
    out = _fresh_python(
        "import sys\nimport accel\n"
        "print('torch' in sys.modules)\n"
        "from accel import Accelerator, PartialState, init_empty_weights\n"
        "from accel.utils import gather, infer_auto_device_map, set_seed\n"
        "from accel.hooks import AlignDevicesHook\n"
        "print(PartialState().num_processes)"
    )
    assert out.split() == ["False", "1"], out


def main() -> None:
    profile = sys.argv[1]
    expected = EXPECTED[profile]
    for name in expected["present"]:
        assert importlib.util.find_spec(name) is not None, f"{profile}: {name} should be installed"
    for name in expected["absent"]:
        assert importlib.util.find_spec(name) is None, f"{profile}: {name} should NOT be installed"
    {"inference": check_inference, "launcher": check_launcher, "full": check_full}[profile]()
    print(
        f"profile {profile}: ok ({', '.join(expected['present'])} present; "
        f"{', '.join(expected['absent']) or 'nothing'} absent)"
    )


if __name__ == "__main__":
    main()
