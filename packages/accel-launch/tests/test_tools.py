"""``accel merge-weights`` and ``accel estimate-memory`` through the command (``accel test``:
test_selfcheck.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from conftest import SCRIPTS, clean_env, run_accel

from accel_launch import AccelLaunchError
from accel_launch.estimate import estimate, format_table, human


@pytest.mark.multiprocess
@pytest.mark.slow
def test_merge_weights_of_a_two_process_sharded_checkpoint(tmp_path: Path):
    from accel_testing import run_workers

    checkpoint = tmp_path / "ckpt"
    run_workers(2, script=SCRIPTS / "dcp_save.py", env={"OUT": str(checkpoint)}, timeout=120)
    assert (checkpoint / ".metadata").is_file()
    assert len(list(checkpoint.glob("*.distcp"))) == 2
    done = run_accel("merge-weights", str(checkpoint), str(tmp_path / "merged"))
    if importlib.util.find_spec("safetensors") is None:
        assert done.returncode == 2 and "pip install 'accel-launch[merge]'" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    from safetensors.torch import load_file

    merged = load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert sorted(merged) == ["head.scale", "layer.bias", "layer.weight"]
    assert torch.equal(merged["layer.weight"], torch.arange(24, dtype=torch.float32).reshape(6, 4))
    assert torch.equal(merged["layer.bias"], torch.full((4,), 0.5))
    assert merged["head.scale"].dtype == torch.float16
    assert torch.equal(merged["head.scale"], torch.arange(4, dtype=torch.float16))
    # the same merge through Accelerate's functions (accelerate.commands.merge's names)
    from accel_launch.commands.merge_cmd import merge_command, merge_command_parser

    parser = merge_command_parser()
    args = parser.parse_args([str(checkpoint), str(tmp_path / "bin"), "--unsafe_serialization"])
    assert args.func is merge_command
    merge_command(args)
    again = torch.load(tmp_path / "bin" / "pytorch_model.bin", weights_only=True)
    assert sorted(again) == sorted(merged)
    assert all(torch.equal(again[k], merged[k]) for k in merged)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_merge_command_on_every_rank_writes_once_and_everyone_waits(tmp_path: Path):
    # Accelerate's merge_command merges on the main process and every process waits; writing the
    # same file from every rank let one rank read it half-written (a hang in its FSDP script).
    pytest.importorskip("safetensors")
    from accel_testing import run_workers

    script = SCRIPTS / "dcp_merge_on_every_rank.py"
    results = run_workers(3, script=script, env={"OUT": str(tmp_path)}, timeout=120)
    lines = [result.stdout.strip().splitlines()[-1] for result in results]
    writes = [int(line.split()[0].removeprefix("writes=")) for line in lines]
    assert writes == [1, 0, 0], lines
    assert len({line.split()[1] for line in lines}) == 1, lines  # one file, the same inode
    assert all(line.endswith("weight_ok=True") for line in lines), lines
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary


def test_merge_weights_of_a_plain_folder_is_a_clear_error(tmp_path: Path):
    done = run_accel("merge-weights", str(tmp_path), str(tmp_path / "out"))
    assert done.returncode == 2
    assert "not a torch.distributed.checkpoint folder (no .metadata file)" in done.stderr


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.small = torch.nn.Linear(10, 10)  # 110 parameters
        self.big = torch.nn.Linear(100, 50)  # 5050 parameters
        self.register_buffer("steps", torch.zeros(40))


def make_model() -> torch.nn.Module:
    assert next(TwoLayers().parameters()).device.type == "meta"  # built under the meta device
    return TwoLayers()


def test_estimate_counts_every_byte_per_dtype():
    layer, rows = estimate(f"{__name__}:make_model", ["float32", "float16", "int4"])
    assert layer == "big"
    total = 110 + 5050 + 40
    assert [(r.dtype, r.total, r.largest_layer, r.training_adam) for r in rows] == [
        ("float32", total * 4, 5050 * 4, total * 16),
        ("float16", total * 2, 5050 * 2, total * 8),
        ("int4", total * 0.5, 5050 * 0.5, total * 2),
    ]
    assert human(20800) == "20.31 KiB"
    with pytest.raises(AccelLaunchError, match="unknown dtypes"):
        estimate(f"{__name__}:make_model", ["float8"])


def test_estimate_memory_of_a_transformers_config_folder(tmp_path: Path):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=16,
    )
    config.save_pretrained(tmp_path)
    expected = sum(p.numel() for p in transformers.BertModel(config).parameters())
    expected += sum(b.numel() for b in transformers.BertModel(config).buffers())
    layer, rows = estimate(str(tmp_path), ["float32", "float16"])
    assert layer == "encoder.layer.0"  # a BertLayer (a no-split block) counts as one unit
    assert [(r.dtype, r.total) for r in rows] == [
        ("float32", expected * 4),
        ("float16", expected * 2),
    ]
    text = format_table(str(tmp_path), layer, rows)
    sizes = [human(rows[0].largest_layer), human(expected * 4), human(expected * 16)]
    assert f"| float32 | {' | '.join(sizes)} |" in text


def test_estimate_memory_with_timm_if_installed():
    timm = pytest.importorskip("timm")
    layer, rows = estimate("resnet18", ["float32"], "timm")
    expected = sum(p.numel() for p in timm.create_model("resnet18").parameters())
    assert rows[0].total >= expected * 4 and layer


def test_estimate_memory_command_prints_a_table_or_names_what_is_missing():
    done = run_accel(
        "estimate-memory",
        f"{Path(__file__).stem}:make_model",
        "--dtypes",
        "float32",
        env=clean_env(PYTHONPATH=str(Path(__file__).parent)),
    )
    assert done.returncode == 0, done.stderr
    assert "| float32 | 19.73 KiB | 20.31 KiB | 81.25 KiB |" in done.stdout
    done = run_accel("estimate-memory", "no_such_module:thing", "--library_name", "callable")
    assert done.returncode == 2 and "cannot load 'no_such_module:thing'" in done.stderr
    if importlib.util.find_spec("timm") is None:
        done = run_accel("estimate-memory", "resnet18")
        assert done.returncode == 2 and "pip install timm" in done.stderr
