"""save_model asks a module's hook for an offloaded model's weights (``OffloadingHook``), and
accel-core imports accel-bigmodel nowhere (DESIGN.md: accel-bigmodel is not one of its
dependencies)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import accel_core
from accel_core import Accelerator
from accel_core.offloaded_weights import OffloadingHook, offloaded_state_dict

SOURCES = Path(accel_core.__file__).parent


class OffloadingStub:
    """A hook that says it offloads, and answers with fixed weights (as accel-bigmodel's would
    answer with the weights it reads back)."""

    def __init__(self, offloads: bool) -> None:
        self.offloads = offloads
        self.asked_for: list[torch.nn.Module] = []

    def offloads_weights(self) -> bool:
        return self.offloads

    def offloaded_model_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        self.asked_for.append(model)
        return {"0.weight": torch.full((2, 2), 7.0), "1.weight": torch.full((2, 2), 8.0)}


class OtherLibraryHook:
    """A hook of another library: no OffloadingHook methods."""

    def pre_forward(self, module: torch.nn.Module, *args: object) -> None:
        raise AssertionError("not called by save_model")


def on_meta() -> torch.nn.Sequential:
    """A model whose weights live elsewhere, as after offloading: meta tensors only."""
    with torch.device("meta"):
        return torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2))


def test_the_first_offloading_hook_is_asked_with_the_whole_model():
    model = on_meta()
    quiet, asked = OffloadingStub(offloads=False), OffloadingStub(offloads=True)
    model[0]._hf_hook = quiet
    model[1]._hf_hook = asked
    state = offloaded_state_dict(model)
    assert state is not None and torch.equal(state["1.weight"], torch.full((2, 2), 8.0))
    assert asked.asked_for == [model] and quiet.asked_for == []
    assert isinstance(asked, OffloadingHook) and not isinstance(OtherLibraryHook(), OffloadingHook)


def test_a_model_whose_hooks_offload_nothing_has_no_offloaded_state():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert offloaded_state_dict(model) is None
    model[0]._hf_hook = OtherLibraryHook()
    assert offloaded_state_dict(model) is None
    model[0]._hf_hook = OffloadingStub(offloads=False)
    assert offloaded_state_dict(model) is None


def test_save_model_writes_what_the_offloading_hook_reads(tmp_path):
    model = on_meta()
    model[1]._hf_hook = OffloadingStub(offloads=True)
    Accelerator(cpu=True).save_model(model, tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert sorted(saved) == ["0.weight", "1.weight"]
    assert torch.equal(saved["0.weight"], torch.full((2, 2), 7.0))


def test_save_model_refuses_meta_tensors_behind_another_librarys_hook(tmp_path):
    model = on_meta()
    model[1]._hf_hook = OtherLibraryHook()
    with pytest.raises(RuntimeError, match="tensors are on the meta device"):
        Accelerator(cpu=True).save_model(model, tmp_path)


def _bigmodel_references(path: Path) -> list[str]:
    """Imports of accel_bigmodel in ``path``, and strings naming it (``importlib.import_module``,
    ``find_spec``, ``__import__``), with their lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        else:
            continue
        found += [
            f"{path.relative_to(SOURCES)}:{node.lineno}: {name}"
            for name in names
            if name.split(".")[0] == "accel_bigmodel"
        ]
    return found


def test_accel_core_imports_no_accel_bigmodel():
    sources = sorted(SOURCES.rglob("*.py"))
    assert len(sources) > 50  # the package's own files, not an empty folder
    found = [reference for path in sources for reference in _bigmodel_references(path)]
    assert found == []
