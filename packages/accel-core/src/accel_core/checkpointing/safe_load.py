"""Reading checkpoint files without running code from them.

Everything goes through ``torch.load(weights_only=True)`` with a short allow-list for what RNG
states contain (numpy arrays and dtypes). A file that needs more is refused with the way to opt
in. Accelerate's pickled ``SeedableRandomSampler`` (``sampler.bin``) is read by a restricted
unpickler that maps that one class to a plain record and every other class to an inert
placeholder, so neither accelerate nor the user's dataset class is imported or run.
"""

from __future__ import annotations

import codecs
import pickle
import re
import types
import zipfile
from pathlib import Path
from typing import Any

import torch

from accel_core.checkpointing.errors import CheckpointError


def _numpy_globals() -> list[Any]:
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    allowed: list[Any] = [core.multiarray._reconstruct, np.ndarray, np.dtype, codecs.encode]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        allowed.append(dtypes.UInt32DType)
    return allowed


def load_object(
    path: Path,
    map_location: Any = "cpu",
    weights_only: bool = True,
    what: str = "checkpoint file",
    mmap: bool = False,
) -> Any:
    """``torch.load`` of ``path`` with the allow-list; an error names the file and the way out.

    ``weights_only=False`` (the caller's explicit choice through ``load_kwargs``) unpickles
    anything: only for files you trust. ``mmap=True`` maps the tensors from the file instead of
    reading them (the caller copies them out before the file can change).
    """
    if not path.is_file():
        raise CheckpointError(f"{what} {path} is missing.")
    try:
        extra = {"mmap": True} if mmap else {}
        if not weights_only:
            return torch.load(path, map_location=map_location, weights_only=False, **extra)
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(path, map_location=map_location, weights_only=True, **extra)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{what} {path} holds an object that loading with weights_only=True refuses "
            f"({_first_line(error)}). If you trust the file, allow that type with "
            "torch.serialization.add_safe_globals([TheType]), or load everything with "
            "accelerator.load_state(..., load_kwargs={'weights_only': False})."
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(
            f"{what} {path} can't be read: it is truncated or corrupt ({_first_line(error)})."
        ) from None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(error: BaseException) -> str:
    text = _ANSI.sub("", str(error)).strip().splitlines()
    return text[0] if text else type(error).__name__


class AccelerateSamplerRecord:
    """What Accelerate's pickled ``SeedableRandomSampler`` holds: its attributes, inert."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state if isinstance(state, dict) else {})


class _Inert:
    """Stands in for any class of the pickle we don't read (the dataset, for one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()


_SAMPLER_CLASSES = {
    ("accelerate.data_loader", "SeedableRandomSampler"),
    ("accel_core.data_loader.samplers", "SeedableRandomSampler"),
}
_TORCH_REBUILD = {
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor"),
    ("torch", "device"),
    ("torch._C", "Generator"),
    ("torch", "Generator"),
    ("collections", "OrderedDict"),
    ("torch.storage", "UntypedStorage"),
}


class _SamplerUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAMPLER_CLASSES:
            return AccelerateSamplerRecord
        if (module, name) in _TORCH_REBUILD:
            return super().find_class(module, name)
        if module == "torch" and name.endswith("Storage"):
            return super().find_class(module, name)
        return _Inert


def load_accelerate_sampler(path: Path) -> AccelerateSamplerRecord:
    """Read a ``sampler.bin`` written by Accelerate: its ``epoch``, ``initial_seed``, ``generator``.

    Only the sampler class, tensors and generators are rebuilt; everything else in the pickle
    (the dataset it references) becomes an inert placeholder.
    """
    module = types.ModuleType("accel_sampler_pickle")
    module.__dict__["Unpickler"] = _SamplerUnpickler
    module.__dict__["load"] = pickle.load
    module.__dict__["UnpicklingError"] = pickle.UnpicklingError
    try:
        record = torch.load(path, map_location="cpu", weights_only=False, pickle_module=module)
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, pickle.UnpicklingError) as error:
        raise CheckpointError(
            f"sampler file {path} can't be read: it is truncated or corrupt ({_first_line(error)})."
        ) from None
    if not isinstance(record, AccelerateSamplerRecord):
        raise CheckpointError(
            f"sampler file {path} holds a {type(record).__name__}, expected a pickled "
            "SeedableRandomSampler."
        )
    return record
