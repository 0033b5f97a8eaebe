"""The proof that an engine describes itself: a strategy package that only an entry point names
(``fixtures/third_party_strategy``, "installed" by being on ``PYTHONPATH``) is launched by name
with ``accel launch --strategy fixture_ddp``, trains as plain PyTorch does, passes the strategy
contract, and nothing under ``packages/`` names it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from test_end_to_end import accel_command

from accel_testing.strategy_contract import StrategyContract

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "third_party_strategy"
SCRIPT = HERE / "scripts" / "fixture_strategy_training.py"
NAME = "fixture_ddp"

pytestmark = pytest.mark.multiprocess


def _with_fixture(env: dict[str, str]) -> dict[str, str]:
    paths = [str(FIXTURE), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def plain_pytorch(global_batch: int, epochs: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The script's loop in plain PyTorch, one process, each global batch whole."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # as the script: the same draws, in float64
    try:
        torch.manual_seed(0)
        features = torch.randn(48, 8)
        targets = (features @ torch.arange(1.0, 9.0)).unsqueeze(-1)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    finally:
        torch.set_default_dtype(default)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for _epoch in range(epochs):
        for start in range(0, 48, global_batch):
            x, y = features[start : start + global_batch], targets[start : start + global_batch]
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    return losses, model.state_dict()


def test_launch_by_name_trains_like_plain_pytorch(tmp_path: Path):
    env = _with_fixture({**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(tmp_path)})
    command = [*accel_command(), "launch", "--strategy", NAME, "--num_processes", "2", "--cpu"]
    dry = subprocess.run(
        [*command, "--dry-run", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120
    )
    assert dry.returncode == 0, dry.stderr
    assert f"ACCEL_STRATEGY={NAME}" in dry.stdout
    assert any(line.split()[:3] == ["strategy", NAME, "flag"] for line in dry.stdout.splitlines())
    done = subprocess.run(
        [*command, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["class"] == "accel_fixture_strategy.strategy:FixtureDDPStrategy"
    assert (report["name"], report["setups"], report["num_processes"]) == (NAME, 1, 2)
    # 2 processes x batches of 4 = the plain run's batches of 8; DDP averages the gradients
    losses, weights = plain_pytorch(global_batch=8, epochs=2)
    assert len(report["losses"]) == len(losses) == 12
    torch.testing.assert_close(report["losses"], losses, rtol=1e-12, atol=1e-12)
    got = torch.load(tmp_path / "weights.pt")
    for name, value in weights.items():
        torch.testing.assert_close(got[name], value, rtol=1e-12, atol=1e-12)


def fixture_from_the_registry(**options: object) -> object:
    """The strategy as accel-core's registry makes it from the name alone."""
    from accel_core.strategies.registry import create_strategy

    return create_strategy(NAME, **options)


class TestFixtureStrategyContract(StrategyContract):
    # workers get this process's sys.path: this module, and the fixture (prepended below)
    strategy_factory = f"{__name__}:fixture_from_the_registry"
    num_processes = 2

    def test_contract(self, check: str, tmp_path: Path) -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.syspath_prepend(str(FIXTURE))
            super().test_contract(check, tmp_path)


def test_nothing_in_packages_names_it():
    done = subprocess.run(
        ["grep", "-rIl", NAME, "packages"],
        cwd=HERE.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, f"{NAME} is named in: {done.stdout}"
