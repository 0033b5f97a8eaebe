"""The launch options for faults: machine ranges, the rendezvous default, the preemption signal,
and what reaches the workers and torch's agent."""

from __future__ import annotations

import argparse
import json
import signal

import pytest

from accel_launch import AccelLaunchError
from accel_launch.launch import faults
from accel_launch.launch.options import add_options
from accel_launch.launch.resolve import resolve
from accel_launch.launch.workerenv import accel_environment


def flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_options(parser)
    return parser.parse_args(list(argv))


TWO = ("--num_machines", "2", "--num_processes", "4", "--main_process_ip", "10.0.0.1", "--cpu")


def test_several_machines_default_to_c10d_one_machine_to_static():
    assert resolve(flags("--cpu"), {}, {})["rdzv_backend"] == "static"
    plan = resolve(flags(*TWO), {}, {})
    assert (plan["rdzv_backend"], plan["min_machines"], plan["num_machines"]) == ("c10d", 2, 2)
    given = resolve(flags(*TWO, "--rdzv_backend", "static"), {}, {})
    assert given["rdzv_backend"] == "static"


def test_num_machines_min_max():
    plan = resolve(flags(*TWO[2:], "--num_machines", "1:2"), {}, {})
    assert (plan["min_machines"], plan["num_machines"], plan.nproc_per_node) == (1, 2, 2)
    assert plan.values["min_machines"].source == "flag"
    from_env = resolve(flags(*TWO[2:]), {"ACCEL_NUM_MACHINES": "2:4"}, {})
    assert (from_env["min_machines"], from_env["num_machines"]) == (2, 4)


def test_a_range_on_the_static_rendezvous_is_refused():
    with pytest.raises(AccelLaunchError, match=r"a range of machines \(1:2\) needs an elastic"):
        resolve(flags(*TWO[2:], "--num_machines", "1:2", "--rdzv_backend", "static"), {}, {})
    with pytest.raises(AccelLaunchError, match=r"--min_machines 3 .* between 1 and"):
        resolve(flags(*TWO, "--min_machines", "3"), {}, {})


@pytest.mark.parametrize("text", ["2:1", "0:2", "a:b", "x"])
def test_bad_machine_ranges(text, capsys):
    with pytest.raises(SystemExit):
        flags("--num_machines", text)
    assert "--num_machines" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("SIGTERM", "SIGTERM"),
        ("usr1", "SIGUSR1"),
        ("SIGUSR2", "SIGUSR2"),
        ("10", "SIGUSR1"),
        ("none", "none"),
    ],
)
def test_preemption_signal_names(given, canonical):
    plan = resolve(flags("--cpu", "--preemption_signal", given), {}, {})
    assert plan["preemption_signal"] == canonical
    assert accel_environment(plan)["ACCEL_PREEMPTION_SIGNAL"] == canonical


@pytest.mark.parametrize("given", ["SIGKILL", "9", "BOGUS"])
def test_a_signal_that_cannot_be_caught_is_refused(given):
    with pytest.raises(AccelLaunchError, match="is not a signal a process can catch"):
        resolve(flags("--cpu", "--preemption_signal", given), {}, {})


def test_worker_environment_and_config_keys():
    config = {
        "preemption_signal": "SIGUSR1",
        "auto_resume": True,
        "project_dir": "/runs/a",
        "join_timeout": 60.0,
    }
    env = accel_environment(resolve(flags("--cpu"), {}, config, "c.yaml"))
    assert env["ACCEL_PREEMPTION_SIGNAL"] == "SIGUSR1"
    assert env["ACCEL_AUTO_RESUME"] == "true"
    assert env["ACCEL_PROJECT_DIR"] == "/runs/a"
    assert env["ACCEL_JOIN_TIMEOUT"] == "60.0"
    plain = accel_environment(resolve(flags("--cpu"), {}, {}))
    assert plain["ACCEL_PREEMPTION_SIGNAL"] == "SIGTERM"
    assert "ACCEL_AUTO_RESUME" not in plain and "ACCEL_PROJECT_DIR" not in plain


def test_agent_settings():
    assert faults.signals_to_handle(signal.SIGUSR1) == "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
    assert faults.signals_to_handle(signal.SIGTERM) == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    assert faults.signals_to_handle(None) == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    c10d = resolve(flags(*TWO, "--machine_rank", "1", "--rdzv_conf", "last_call_timeout=5"), {}, {})
    assert faults.rendezvous_settings(c10d) == {
        "timeout": 900,
        "is_host": False,
        "join_timeout": 300.0,
        "last_call_timeout": "5",
    }
    static = resolve(flags("--cpu", "--machine_rank", "0"), {}, {})
    assert faults.rendezvous_settings(static) == {"timeout": 900, "rank": 0}
    with pytest.raises(AccelLaunchError, match="expected key=value pairs"):
        faults.rendezvous_settings(resolve(flags("--cpu", "--rdzv_conf", "oops"), {}, {}))
    environ: dict[str, str] = {}
    faults.prepare_agent_environment(environ, "c10d")
    assert environ == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_preempted_marker(tmp_path):
    assert faults.preempted_line(str(tmp_path)) is None
    (tmp_path / faults.MARKER_FILE).write_text(json.dumps({"line": "accel: stopped by X"}))
    assert faults.preempted_line(str(tmp_path)) == "accel: stopped by X"
    (tmp_path / faults.MARKER_FILE).write_text("{")
    assert faults.preempted_line(str(tmp_path)) is None

    class Failure:
        def __init__(self, code: int) -> None:
            self.exitcode = code

    assert faults.all_preempted({0: Failure(75), 1: Failure(75)})
    assert not faults.all_preempted({0: Failure(75), 1: Failure(1)})
    assert not faults.all_preempted({})


def test_a_script_option_is_not_taken_for_a_launcher_option(tmp_path):
    # no abbreviations: the script's --project is not the launcher's --project_dir
    import subprocess
    import sys

    script = tmp_path / "echo.py"
    script.write_text("import sys; print(sys.argv[1:])")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from accel_launch.cli import main; main()",
            "launch",
            "--cpu",
            str(script),
            "--project",
            "x",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['--project', 'x']"
