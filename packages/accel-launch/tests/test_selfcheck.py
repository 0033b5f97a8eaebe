"""``accel test``: its checks compare with known values, and it runs the processes asked for.

The pure parts of :mod:`accel_launch.selfcheck` are tested in this process; the command itself
through real ``accel`` processes on gloo (nothing of torch.distributed is mocked).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path

import pytest
import torch
from conftest import clean_env, run_accel

from accel_launch import selfcheck
from accel_launch.commands.test_cmd import selfcheck_script

HAS_OPS = importlib.util.find_spec("accel_ops") is not None
HAS_CORE = importlib.util.find_spec("accel_core") is not None
TRAINING_LINE = re.compile(
    r"^PASS accel_core\.Accelerator training: 4 steps on (\d+) processes, loss ([\d.]+) -> "
    r"([\d.]+) \(falls\), losses and weights equal a single-process run \(max diff (\S+)\)$",
    re.MULTILINE,
)


def two_process_config(folder: Path) -> Path:
    """A 2-process CPU config in Accelerate's YAML schema."""
    path = folder / "cpu2.yaml"
    path.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n")
    return path


# -- the pure parts, in this process -------------------------------------------------------------


@pytest.mark.parametrize("world", range(1, 9))
def test_the_reference_run_lowers_the_loss_at_every_step(world: int):
    losses, weights = selfcheck.reference_run(world, torch.device("cpu"))
    assert len(losses) == selfcheck.STEPS
    assert all(after < before for before, after in itertools.pairwise(losses))
    start = selfcheck.fresh_model().state_dict()
    assert selfcheck.compare_weights(weights, weights) == 0.0
    with pytest.raises(selfcheck.CheckFailed):  # training moved the weights beyond the tolerance
        selfcheck.compare_weights(weights, start)


def test_compare_weights_fails_on_a_wrong_reference_naming_expected_and_got():
    _, reference = selfcheck.reference_run(2, torch.device("cpu"))
    within = {k: v + 1e-7 for k, v in reference.items()}
    assert selfcheck.compare_weights(within, reference) <= 2e-7
    wrong = {**reference, "bias": reference["bias"] + 0.01}
    with pytest.raises(selfcheck.CheckFailed) as failure:
        selfcheck.compare_weights(wrong, reference)
    message = str(failure.value)
    assert message.startswith("'bias' after 4 steps vs the single-process run (max diff 1.0e-02")
    assert f"expected {reference['bias'].tolist()}, got {wrong['bias'].tolist()}" in message


def test_expect_equal_compares_shape_dtype_and_values():
    selfcheck.expect_equal("ranks", torch.arange(3), torch.tensor([0, 1, 2]))
    for got in (torch.tensor([0, 1]), torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0, 1, 3])):
        with pytest.raises(selfcheck.CheckFailed, match=r"^ranks: expected \[0, 1, 2\] \(int64\)"):
            selfcheck.expect_equal("ranks", torch.arange(3), got)
    with pytest.raises(selfcheck.CheckFailed, match=r"^world: expected 2, got 1$"):
        selfcheck.expect_equal("world", 2, 1)


def test_run_check_reports_pass_fail_and_skip():
    def fails() -> str:
        raise selfcheck.CheckFailed("sum", 3, 2)

    def skipped() -> str:
        raise selfcheck.CheckSkipped("needs numpy")

    def broken() -> str:
        raise RuntimeError("gloo timed out")

    assert selfcheck.run_check("a", lambda: "ok") == ("a", "PASS", "ok")
    assert selfcheck.run_check("a", fails) == ("a", "FAIL", "sum: expected 3, got 2")
    assert selfcheck.run_check("a", skipped) == ("a", "SKIP", "needs numpy")
    assert selfcheck.run_check("a", broken) == ("a", "FAIL", "RuntimeError: gloo timed out")


def test_a_failure_on_another_rank_fails_rank_0s_line(capsys):
    everyone = [
        [("sum", "PASS", "3"), ("gather", "PASS", "[0, 1]")],
        [("sum", "PASS", "3"), ("gather", "FAIL", "gathered: expected [0, 1], got [1, 1]")],
    ]
    selfcheck.report(everyone, [], 2)
    assert capsys.readouterr().out.splitlines() == [
        "PASS sum: 3",
        "FAIL gather: failed on ranks [1]: gathered: expected [0, 1], got [1, 1]",
        "accel test: some checks FAILED on 2 processes.",
    ]


def test_self_check_without_accel_ops_says_what_to_install(monkeypatch, capsys):
    real = importlib.util.find_spec
    hidden = ("accel_ops", "accel_core")
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n in hidden else real(n, *a)
    )
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert selfcheck.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "PASS process group: rank 0 of 1, gloo"
    assert "PASS world size: 1 process, as asked for by default (no launcher)" in lines
    assert "PASS torch.distributed all_gather: gathered [0], as expected" in lines
    assert "SKIP accel_ops checks: not installed (pip install accel-ops accel-core)" in lines
    assert "SKIP accel_core checks: not installed (pip install accel-ops accel-core)" in lines
    assert lines[-1] == "accel test: all checks passed on 1 process."


def test_accel_test_launches_the_packages_main_module_by_path():
    script = Path(selfcheck_script())
    assert script.name == "__main__.py"
    assert script.parent == Path(selfcheck.__file__).parent


# -- the command, on real processes --------------------------------------------------------------


def assert_all_checks_passed(out: str, world: int, asked_by: str) -> None:
    """Every line of a passing run on ``world`` processes, with the values it compared."""
    assert f"accel test: running the self-check on {world} processes ({asked_by}) ..." in out
    expected_lines = [
        f"PASS process group: rank 0 of {world}, gloo",
        f"PASS world size: {world} processes, as asked for by {asked_by}",
        f"PASS torch.distributed all_reduce: sum of rank + 1 = {world * (world + 1) // 2}, as "
        "expected",
        f"PASS torch.distributed all_gather: gathered {list(range(world))}, as expected",
        "PASS torch.distributed broadcast: rank 0's 42 reached every rank",
    ]
    if HAS_OPS:
        expected_lines += [
            f"PASS accel_ops.PartialState: process 0 of {world} on cpu, as expected",
            f"PASS accel_ops.gather: gathered ranks {list(range(world))} and rows "
            f"{[[r, 10 * r + 1] for r in range(world)]}, as expected",
            f"PASS accel_ops.pad_across_processes: lengths 1..{world} padded to {world} with -1 "
            "and gathered as expected",
        ]
    else:
        expected_lines.append(
            "SKIP accel_ops checks: not installed (pip install accel-ops accel-core)"
        )
    lines = out.splitlines()
    for line in expected_lines:
        assert line in lines, f"missing {line!r} in:\n{out}"
    assert re.search(r"^PASS torch\.distributed barrier: ranks? 1.* waited >= ", out, re.MULTILINE)
    if HAS_CORE:
        match = TRAINING_LINE.search(out)
        assert match, out
        assert int(match[1]) == world
        assert float(match[3]) < float(match[2])
        assert float(match[4]) <= selfcheck.ATOL
    assert f"accel test: all checks passed on {world} processes." in lines
    assert "FAIL" not in out


@pytest.mark.multiprocess
@pytest.mark.slow
def test_accel_test_runs_the_processes_of_the_config_file(tmp_path: Path):
    config = two_process_config(tmp_path)
    done = run_accel(
        "test", "--config_file", str(config), env=clean_env(XDG_CONFIG_HOME=str(tmp_path))
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert_all_checks_passed(done.stdout, 2, f"num_processes 2 from config file {config}")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_num_processes_overrides_the_config_file(tmp_path: Path):
    config = two_process_config(tmp_path)
    done = run_accel(
        "test",
        "--config_file",
        str(config),
        "--num_processes",
        "3",
        env=clean_env(XDG_CONFIG_HOME=str(tmp_path)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert_all_checks_passed(done.stdout, 3, "num_processes 3 from flag")


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_wrong_world_size_and_a_wrong_reference_fail_with_expected_and_got(tmp_path: Path):
    done = run_accel(
        "launch",
        "--quiet",
        "--cpu",
        "--num_processes",
        "2",
        "--log_dir",
        str(tmp_path / "logs"),
        selfcheck_script(),
        "--world-size",
        "3",
        "--asked-by",
        "this test",
        "--perturb-reference",
        "0.01",
        env=clean_env(XDG_CONFIG_HOME=str(tmp_path)),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert (
        "FAIL world size: number of processes (asked for by this test): expected 3, got 2" in lines
    )
    if HAS_CORE:
        failed = [line for line in lines if line.startswith("FAIL accel_core.Accelerator training")]
        assert len(failed) == 1, done.stdout
        assert "'weight' after 4 steps vs the single-process run (max diff 1.0e-02" in failed[0]
        assert re.search(r"expected \[\[.*\]\], got \[\[.*\]\]$", failed[0])
    assert lines[-1] == "accel test: some checks FAILED on 2 processes."


@pytest.mark.multiprocess
@pytest.mark.slow
def test_accel_test_needs_no_numpy(tmp_path: Path):
    hidden = tmp_path / "no_numpy" / "numpy"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'numpy\' (hidden)", name="numpy")\n'
    )
    config = two_process_config(tmp_path)
    env = clean_env(XDG_CONFIG_HOME=str(tmp_path), PYTHONPATH=str(hidden.parent))
    done = run_accel("test", "--config_file", str(config), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    if HAS_CORE:
        assert TRAINING_LINE.search(done.stdout), done.stdout
        assert (
            "SKIP accel_core.Accelerator.gather_for_metrics: on several processes it needs numpy "
            "(torch's object collectives); pip install numpy" in done.stdout.splitlines()
        )
    assert "accel test: all checks passed on 2 processes." in done.stdout
