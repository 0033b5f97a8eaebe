"""Accelerate's testing helpers (accel_testing.accelerate): they answer for this machine and run
real subprocesses."""

from __future__ import annotations

import sys
import unittest

import pytest

from accel_testing.accelerate import testing
from accel_testing.accelerate.devices import get_backend
from accel_testing.accelerate.training import RegressionDataset, RegressionModel


def test_the_backend_is_this_machines():
    import torch

    kind, count, allocated = get_backend()
    if torch.cuda.is_available():
        assert (kind, count) == ("cuda", torch.cuda.device_count())
    else:
        assert (kind, count, allocated()) == ("cpu", 1, 0)
    launch = testing.DEFAULT_LAUNCH_COMMAND
    assert launch == ["accel", "launch", f"--num_processes={count}", "--monitor_interval=0.1"]


def _skipped(decorated) -> bool:
    return getattr(decorated, "__unittest_skip__", False)


def test_require_decorators_skip_by_what_the_machine_has():
    # unittest.skipUnless marks the function it is given: a fresh one per check
    def case():
        return None

    cpu_only = testing.torch_device == "cpu"
    assert _skipped(testing.require_cpu(lambda: None)) is not cpu_only
    assert _skipped(testing.require_non_cpu(lambda: None)) is cpu_only
    assert testing.require_torch_min_version(version="2.0")(case) is case and not _skipped(case)
    assert _skipped(testing.require_torch_min_version(lambda: None, version="99.0"))
    assert _skipped(testing._package("surely_not_installed_pkg")(lambda: None))
    assert not _skipped(testing._package("torch")(lambda: None))


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("no", False), (None, False)])
def test_slow_follows_run_slow(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("RUN_SLOW", raising=False)
    else:
        monkeypatch.setenv("RUN_SLOW", value)
    assert testing.parse_flag_from_env("RUN_SLOW") is expected
    monkeypatch.setenv("RUN_SLOW", "maybe")
    with pytest.raises(ValueError, match="RUN_SLOW='maybe'"):
        testing.parse_flag_from_env("RUN_SLOW")


def test_execute_subprocess_async_returns_the_lines_and_raises_with_stderr():
    code = "import sys; print('out'); print('err', file=sys.stderr)"
    result = testing.execute_subprocess_async([sys.executable, "-c", code], quiet=True)
    assert (result.returncode, result.stdout, result.stderr) == (0, ["out"], ["err"])
    failing = [sys.executable, "-c", "import sys; sys.exit('broken')"]
    with pytest.raises(RuntimeError, match=r"failed with returncode 1[\s\S]*broken"):
        testing.execute_subprocess_async(failing, quiet=True, echo=False)
    with pytest.raises(RuntimeError, match="produced no output"):
        testing.execute_subprocess_async([sys.executable, "-c", "pass"], quiet=True)


def test_run_command_and_its_failure():
    assert testing.run_command([sys.executable, "-c", "print(6 * 7)"], return_stdout=True) == "42\n"
    with pytest.raises(testing.SubprocessCallException, match="nope"):
        testing.run_command([sys.executable, "-c", "import sys; sys.exit('nope')"])


def test_assert_exception_and_capture_call_output():
    with testing.assert_exception(ValueError, "bad"):
        raise ValueError("a bad value")
    with pytest.raises(AssertionError, match="was not raised"), testing.assert_exception(KeyError):
        pass
    assert testing.capture_call_output(print, "hello") == "hello\n"


def test_xdist_ports(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert (testing.pytest_xdist_worker_id(), testing.get_torch_dist_unique_port()) == (3, 29503)


def test_temp_dir_test_case_empties_its_folder():
    class Case(testing.TempDirTestCase):
        def test_write(self):
            assert not any(self.tmpdir.iterdir())
            (self.tmpdir / "file").write_text("x")

    result = unittest.TextTestRunner(stream=open("/dev/null", "w")).run(  # noqa: SIM115
        unittest.defaultTestLoader.loadTestsFromTestCase(Case)
    )
    assert result.wasSuccessful() and not Case.tmpdir.exists()


def test_regression_model_and_dataset_as_accelerates():
    dataset = RegressionDataset(a=2, b=3, length=64, seed=42)
    assert len(dataset) == 64 and sorted(dataset[0]) == ["x", "y"]
    # Accelerate 1.15's RegressionDataset(seed=42)[0]
    assert (round(float(dataset[0]["x"]), 6), round(float(dataset[0]["y"]), 6)) == (
        0.304717,
        3.680557,
    )
    import torch

    model = RegressionModel(a=2, b=1)
    assert torch.equal(model(torch.tensor([1.0, 3.0])), torch.tensor([3.0, 7.0]))
