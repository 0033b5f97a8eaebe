"""``accel launch --use_deepspeed``: the DeepSpeed settings with their sources, conflicts refused.

The real command runs in a subprocess; a conflict is one error naming both sources and values, with
a non-zero exit code, before anything starts.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import clean_env, run_accel

DS_JSON = {
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
}


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "ds.json").write_text(json.dumps(DS_JSON))
    (tmp_path / "script.py").write_text("print('the script ran')\n")
    (tmp_path / "cfg.yaml").write_text(
        "distributed_type: DEEPSPEED\nnum_processes: 1\ndeepspeed_config:\n"
        "  zero_stage: 3\n  gradient_accumulation_steps: 4\n  offload_param_device: cpu\n"
    )
    return tmp_path


def _run(job: Path, *args: str):
    return run_accel("launch", *args, env=clean_env(XDG_CONFIG_HOME=str(job / "xdg")), cwd=job)


def _section(out: str) -> list[list[str]]:
    lines = out.split("DeepSpeed settings (key, value, source):\n", 1)[1].splitlines()
    rows = []
    for line in lines:
        if not line.startswith("  ") or line.startswith("  (keys not listed"):
            break
        rows.append(line.split(maxsplit=2))
    return rows


def test_flags_alone(job: Path):
    done = _run(job, "--use_deepspeed", "--zero_stage", "2", "--dry-run", "script.py")
    assert done.returncode == 0, done.stderr
    assert _section(done.stdout) == [["zero_optimization.stage", "2", "--zero_stage"]]
    assert "the script ran" not in done.stdout
    assert '  ACCEL_STRATEGY_CONFIG_SOURCES={"zero_stage": "--zero_stage"}' in done.stdout


def test_json_file_with_a_flag_filling_its_auto(job: Path):
    done = _run(
        job,
        "--use_deepspeed",
        "--deepspeed_config_file",
        "ds.json",
        "--gradient_accumulation_steps",
        "8",
        "--zero_stage",
        "2",
        "--dry-run",
        "script.py",
    )
    assert done.returncode == 0, done.stderr
    pending = (
        "auto: filled in each process by the Accelerator (DeepSpeedPlugin.describe() says how)"
    )
    assert _section(done.stdout) == [
        ["zero_optimization.stage", "2", "ds.json: zero_optimization.stage; same in --zero_stage"],
        [
            "zero_optimization.offload_optimizer.device",
            "cpu",
            "ds.json: zero_optimization.offload_optimizer.device",
        ],
        ["train_micro_batch_size_per_gpu", "auto", f"(pending)  {pending}"],
        [
            "gradient_accumulation_steps",
            "8",
            "--gradient_accumulation_steps (fills 'auto' of ds.json)",
        ],
        ["optimizer.type", "AdamW", "ds.json: optimizer.type"],
        ["optimizer.params.lr", "auto", f"(pending)  {pending}"],
    ]


def test_accelerate_yaml_config_file(job: Path):
    done = _run(job, "--config_file", "cfg.yaml", "--dry-run", "script.py")
    assert done.returncode == 0, done.stderr
    assert _section(done.stdout) == [
        ["zero_optimization.stage", "3", "config file cfg.yaml: deepspeed_config.zero_stage"],
        [
            "gradient_accumulation_steps",
            "4",
            "config file cfg.yaml: deepspeed_config.gradient_accumulation_steps",
        ],
        [
            "zero_optimization.offload_param.device",
            "cpu",
            "config file cfg.yaml: deepspeed_config.offload_param_device",
        ],
    ]
    # A flag overrides the config file's value (the launcher's order), and says so.
    done = _run(job, "--config_file", "cfg.yaml", "--zero_stage", "1", "--dry-run", "script.py")
    assert _section(done.stdout)[0] == ["zero_optimization.stage", "1", "--zero_stage"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_flag_against_the_json_file_is_one_error(job: Path, dry_run: bool):
    args = ["--use_deepspeed", "--zero_stage", "3", "--deepspeed_config_file", "ds.json"]
    done = _run(job, *args, *(["--dry-run"] if dry_run else []), "script.py")
    assert done.returncode == 2
    assert done.stderr == (
        "accel launch: error: DeepSpeed setting zero_optimization.stage is given twice with "
        "different values: 2 from ds.json: zero_optimization.stage, and 3 from --zero_stage. Keep "
        "one of them, or make them equal.\n"
    )
    assert done.stdout == ""  # nothing started, nothing printed


def test_yaml_against_the_json_file_lists_every_disagreement(job: Path):
    text = (job / "cfg.yaml").read_text() + "  deepspeed_config_file: ds.json\n"
    (job / "cfg.yaml").write_text(text.replace("offload_param_device: cpu", "gradient_clipping: 1"))
    (job / "ds.json").write_text(json.dumps({**DS_JSON, "gradient_clipping": 0.5}))
    done = _run(job, "--config_file", "cfg.yaml", "--dry-run", "script.py")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "accel launch: error: 2 DeepSpeed settings are given twice with different values:",
        "- zero_optimization.stage: 2 from ds.json: zero_optimization.stage, and 3 from config "
        "file cfg.yaml: deepspeed_config.zero_stage",
        "- gradient_clipping: 0.5 from ds.json: gradient_clipping, and 1.0 from config file "
        "cfg.yaml: deepspeed_config.gradient_clipping",
        "Keep one source for each, or make them equal.",
    ]


def test_missing_json_file_is_refused_before_start(job: Path):
    done = _run(job, "--use_deepspeed", "--deepspeed_config_file", "nope.json", "script.py")
    assert done.returncode == 2
    assert "deepspeed_config_file 'nope.json' (--deepspeed_config_file) does not exist" in (
        done.stderr
    )


@pytest.mark.skipif(
    importlib.util.find_spec("accel_backends") is None, reason="needs accel-backends installed"
)
def test_the_process_sees_the_launchers_sources(job: Path):
    # The launched script builds DeepSpeedPlugin (accel-backends) and prints its table.
    (job / "script.py").write_text(
        "from accel_backends import DeepSpeedPlugin\n"
        "print(DeepSpeedPlugin(gradient_clipping=0.5).describe())\n"
    )
    done = _run(job, "--config_file", "cfg.yaml", "--zero_stage", "2", "script.py")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split(maxsplit=2)[1:] for line in done.stdout.splitlines()[2:]}
    assert rows["zero_optimization.stage"] == ["2", "--zero_stage (accel launch)"]
    assert rows["gradient_accumulation_steps"] == [
        "4",
        "config file cfg.yaml: deepspeed_config.gradient_accumulation_steps (accel launch)",
    ]
    assert rows["gradient_clipping"] == ["0.5", "DeepSpeedPlugin(gradient_clipping=0.5)"]
