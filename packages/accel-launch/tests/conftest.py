"""Helpers for accel-launch's tests: run the real ``accel`` command in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
SCRIPTS = HERE / "scripts"


def accel_command() -> list[str]:
    """The installed ``accel`` console script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).parent / "accel"
    if script.exists():
        return [str(script)]
    found = shutil.which("accel")
    return [found] if found else [sys.executable, "-m", "accel_launch.cli"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without variables that would change what ``accel`` resolves."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACCEL_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))
        and k not in ("GROUP_RANK", "CUDA_VISIBLE_DEVICES")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run_accel(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``accel ARGS`` to completion and return the finished process (never raises on rc)."""
    return subprocess.run(
        [*accel_command(), *args],
        env=env if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty XDG_CONFIG_HOME, so no real user config is read or written."""
    home = tmp_path / "xdg"
    home.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("ACCEL_CONFIG_FILE", raising=False)
    return home


@pytest.fixture
def no_launch_variables(monkeypatch: pytest.MonkeyPatch, config_home: Path) -> None:
    """No ACCEL_* or torchrun variable and no user config file changes what is resolved (a file
    asks for it with ``pytestmark = pytest.mark.usefixtures("no_launch_variables")``)."""
    for name in list(os.environ):
        if name not in clean_env():
            monkeypatch.delenv(name)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: launches resolve to CPU
