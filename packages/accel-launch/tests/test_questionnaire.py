"""``accel config`` driven through a real pseudo-terminal, keys as a user types them."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest
import yaml
from conftest import accel_command, clean_env

from accel_launch import load_config

DOWN, ENTER, BACKSPACE = "\x1b[B", "\r", "\x7f"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[=>]")


def drive(
    args: list[str], steps: list[tuple[str, list[str]]], env: dict[str, str], timeout: float = 30
) -> tuple[int, str]:
    """Run ``accel ARGS`` in a pty; for each (prompt, keys) wait for the prompt, type the keys."""
    command = accel_command() + args
    pid, fd = pty.fork()
    if pid == 0:  # child
        os.execve(command[0], command, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    seen, pending = "", ""
    deadline = time.monotonic() + timeout

    def read_some() -> bool:
        nonlocal seen, pending
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            return True
        try:
            chunk = os.read(fd, 65536).decode(errors="replace")
        except OSError:
            return False
        if not chunk:
            return False
        seen += chunk
        pending += _ANSI.sub("", chunk)
        return True

    try:
        for prompt, keys in steps:
            while prompt not in pending:
                if time.monotonic() > deadline or not read_some():
                    raise AssertionError(
                        f"prompt {prompt!r} never came; screen:\n{_ANSI.sub('', seen)[-2000:]}"
                    )
            pending = pending[pending.index(prompt) + len(prompt) :]
            time.sleep(0.15)
            for key in keys:
                os.write(fd, key.encode())
                time.sleep(0.05)
        while time.monotonic() < deadline and read_some():
            pass
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), _ANSI.sub("", seen)


@pytest.fixture
def tty_env(tmp_path: Path) -> dict[str, str]:
    return clean_env(
        TERM="xterm",
        PROMPT_TOOLKIT_NO_CPR="1",
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        CUDA_VISIBLE_DEVICES="",
    )


@pytest.mark.slow
def test_multi_cpu_with_compile_and_bf16(tmp_path: Path, tty_env: dict[str, str]):
    target = tmp_path / "answers.yaml"
    code, screen = drive(
        ["config", "--config_file", str(target)],
        [
            ("Where will the job run?", [ENTER]),
            ("Which kind of distributed training?", [DOWN, ENTER]),
            ("Do you want to use ParallelismConfig?", ["n"]),
            ("How many processes in total", [BACKSPACE, "3", ENTER]),
            ("debug mode", ["n"]),
            ("Compile the model with torch.compile?", ["y"]),
            ("Which torch.compile backend?", [DOWN, ENTER]),
            ("Mixed precision?", [DOWN, DOWN, ENTER]),
        ],
        tty_env,
    )
    assert code == 0, screen
    assert f"saved at {target}" in screen
    config = load_config(target)
    assert config["distributed_type"] == "MULTI_CPU"
    assert config["num_processes"] == 3
    assert config["use_cpu"] is True
    assert config["debug"] is False
    assert config["dynamo_config"] == {"dynamo_backend": "EAGER"}
    assert config["mixed_precision"] == "bf16"
    assert "parallelism_config" not in config


@pytest.mark.slow
def test_cluster_fsdp_to_the_default_location(tmp_path: Path, tty_env: dict[str, str]):
    code, screen = drive(
        ["config"],
        [
            ("Where will the job run?", [DOWN, ENTER]),
            ("How many machines", [BACKSPACE, "2", ENTER]),
            ("rank of this machine", [BACKSPACE, "1", ENTER]),
            ("IP address of the main machine", [BACKSPACE * 9, "10.1.2.3", ENTER]),
            ("What port", [ENTER]),
            ("Which rendezvous backend?", [ENTER]),
            ("same local network?", ["y"]),
            ("Which kind of distributed training?", [DOWN] * 4 + [ENTER]),
            ("Which FSDP version?", [ENTER]),
            ("reshard_after_forward", ["y"]),
            ("Offload parameters and gradients to CPU?", ["y"]),
            ("How should modules be wrapped?", [ENTER]),
            ("Layer class names to wrap", ["BertLayer", ENTER]),
            ("Checkpoint layout?", [DOWN, ENTER]),
            ("Load weights on rank 0 only?", ["n"]),
            ("activation checkpointing?", ["n"]),
            ("Do you want to use ParallelismConfig?", ["n"]),
            ("How many processes in total", [BACKSPACE, "4", ENTER]),
            ("debug mode", ["y"]),
            ("Which GPUs", [ENTER]),
            ("torch.compile?", ["n"]),
            ("Mixed precision?", [ENTER]),
        ],
        tty_env,
    )
    assert code == 0, screen
    path = Path(tty_env["XDG_CONFIG_HOME"]) / "accel" / "default_config.yaml"
    config = yaml.safe_load(path.read_text())
    assert config["num_machines"] == 2 and config["machine_rank"] == 1
    assert config["main_process_ip"] == "10.1.2.3" and config["main_process_port"] == 29500
    assert config["distributed_type"] == "FSDP" and config["num_processes"] == 4
    assert config["fsdp_config"] == {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": True,
        "fsdp_offload_params": True,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
        "fsdp_state_dict_type": "FULL_STATE_DICT",
        "fsdp_cpu_ram_efficient_loading": False,
        "fsdp_activation_checkpointing": False,
    }
    assert config["debug"] is True and config["gpu_ids"] == "all"


@pytest.mark.slow
def test_parallelism_config_sizes_are_asked_for_ddp(tmp_path: Path, tty_env: dict[str, str]):
    target = tmp_path / "parallel.yaml"
    code, screen = drive(
        ["config", "--config_file", str(target)],
        [
            ("Where will the job run?", [ENTER]),
            ("Which kind of distributed training?", [DOWN, ENTER]),
            ("Do you want to use ParallelismConfig?", ["y"]),
            ("data parallelism replicate size?", [BACKSPACE, "2", ENTER]),
            ("FSDP shard size?", [BACKSPACE, "0", ENTER, BACKSPACE, "3", ENTER]),
            ("tensor parallelism size?", [ENTER]),
            ("context parallelism size?", [BACKSPACE, "2", ENTER]),
            ("communication strategy?", [DOWN, ENTER]),
            ("How many processes in total", [BACKSPACE, "2", ENTER]),
            ("debug mode", ["n"]),
            ("torch.compile?", ["n"]),
            ("Mixed precision?", [ENTER]),
        ],
        tty_env,
    )
    assert code == 0, screen
    assert "enter an integer >= 1" in screen  # the 0 was refused, then 3 taken
    config = load_config(target)
    assert config["distributed_type"] == "MULTI_CPU"
    assert config["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 2,
        "parallelism_config_dp_shard_size": 3,
        "parallelism_config_tp_size": 1,
        "parallelism_config_cp_size": 2,
        "parallelism_config_cp_comm_strategy": "alltoall",
    }


def test_without_a_terminal_it_says_what_to_do_instead(tmp_path: Path):
    target = tmp_path / "never.yaml"
    done = subprocess.run(
        [*accel_command(), "config", "--config_file", str(target)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=False,
    )
    assert done.returncode == 2
    assert "needs a terminal" in done.stderr and "accel config default" in done.stderr
    assert not target.exists()


@pytest.mark.slow
def test_ctrl_c_writes_nothing(tmp_path: Path, tty_env: dict[str, str]):
    target = tmp_path / "never.yaml"
    code, screen = drive(
        ["config", "--config_file", str(target)], [("Where will the job run?", ["\x03"])], tty_env
    )
    assert code != 0
    assert "nothing was written" in screen
    assert not target.exists()
