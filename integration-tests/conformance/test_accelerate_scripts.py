"""Accelerate 1.15's own distributed check scripts pass under accel, on 2 and 3 CPU processes.

The scripts ship inside the accelerate wheel (``accelerate/test_utils/scripts/``). They are not
committed here: at run time ``rewrite_accelerate.py`` copies ``accelerate/test_utils`` out of the
wheel that ``ACCEL_TEST_HF_PYTHON`` has installed (``nox -s conformance`` builds that venv and sets
it) into a temporary folder, with every import of ``accelerate`` rewritten to ``accel``, and each
script runs through ``accel launch --cpu --num_processes N``. Without ``ACCEL_TEST_HF_PYTHON`` the
tests skip.

Our processes never import accelerate: the interpreter running these tests (and so ``accel
launch`` and its workers) must not have it installed, and ``worker_sitecustomize.py``, copied as
``sitecustomize.py`` into the temporary folder, makes each worker record its rank and whether
``accelerate`` got imported, so a pass also proves that all N workers ran to the end.

Which scripts run: those that pass under Accelerate itself on CPU, measured on this machine with
``ACCELERATE_USE_CPU=1 torchrun --nproc_per_node N script`` (Accelerate's ``launch --cpu`` runs a
single process; its multi-CPU launch needs mpirun), with pytest importable as it is here (with
it, ``test_script`` also runs ``test_reinstantiated_state``), plus ``test_merge_weights``, which
fails under Accelerate on CPU and passes under accel (see :data:`SCRIPTS`). The others are listed
in :data:`EXCLUDED` with the reason, and show up as skipped. ``scripts/external_deps/`` needs
transformers, datasets and the network, and isn't run.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from rewrite_accelerate import (
    PACKAGE,
    accelerate_folder,
    imports_of_accelerate,
    rewrite_source,
    rewrite_test_utils,
)

from accel_testing import free_port

HF_PYTHON = "ACCEL_TEST_HF_PYTHON"
PROCESSES = [2, 3]
#: Per run; the slowest script takes about 10 s under Accelerate on 2 cores.
RUN_TIMEOUT = 240
#: A launcher's variables, kept out of a run's environment (``accel launch`` sets its own).
_LAUNCH_VARIABLES = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT",
}  # fmt: skip


@dataclass(frozen=True)
class Script:
    """One of the wheel's scripts; ``marker`` is a line it prints only once it got far."""

    name: str
    marker: str


#: What runs, on every count in PROCESSES unless EXCLUDED says otherwise.
SCRIPTS = [
    Script("test_cli", "Successfully ran on 0 GPUs"),
    Script("test_ops", "testing sending tensors across devices"),
    Script("test_sync", "gradient accumulation with optimizer and scheduler"),
    Script("test_script", "**Breakpoint trigger test**"),
    # FSDP version 1 (the plugin's default) trains, save_fsdp_model writes a sharded checkpoint,
    # merge_fsdp_weights and accelerate.commands.merge merge it. It prints nothing of its own.
    # The one script that runs although it fails under Accelerate 1.15 on CPU: there
    # save_fsdp_model stops inside torch's FSDP.state_dict_type with KeyError: None.
    Script("test_merge_weights", ""),
]

#: (script, processes) -> why it doesn't run: each fails under Accelerate 1.15 itself on CPU here.
EXCLUDED = {
    # It splits a 2-row tensor and expects rank 1 *and every later rank* to get row 1; under
    # Accelerate rank 2 gets an empty tensor (AssertionError: torch.Size([0, 4]) != [1, 4], in
    # test_split_between_processes_tensor): the script assumes 2 processes.
    ("test_script", 3): "assumes 2 processes (test_split_between_processes_tensor)",
    # Its reference model is torch's DDP with device_ids=[rank], which torch rejects for a CPU
    # module ("device_ids and output_device arguments only work with single-device/multiple-device
    # GPU modules or CPU modules"): the script needs GPUs.
    ("test_ddp_comm_hook", 2): "needs GPUs: its reference DDP passes device_ids",
    ("test_ddp_comm_hook", 3): "needs GPUs: its reference DDP passes device_ids",
    # Hangs in test_can_join_uneven_inputs: Accelerate's join_uneven_inputs applies torch's Join
    # only for GPU-like types and just warns on MULTI_CPU, so DDP waits forever for the rank that
    # ran out of batches.
    ("test_distributed_data_loop", 2): "hangs on CPU under Accelerate (no Join on MULTI_CPU)",
    # Stops at once on `assert accelerator.num_processes == 2`.
    ("test_distributed_data_loop", 3): "asserts exactly 2 processes",
    # Its own launcher (notebook_launcher, N from ACCELERATE_NUM_PROCESSES): on CPU Accelerate's
    # children each come up as DistributedType.NO with 1 process, and test_fault_tolerant hangs
    # past 300 s.
    ("test_notebook", 2): "notebook_launcher on CPU: no process group, hangs under Accelerate",
    ("test_notebook", 3): "notebook_launcher on CPU: no process group, hangs under Accelerate",
}

#: script -> [(text, replacement, why)]: where accel differs from Accelerate on purpose (one line
#: each in docs/differences.md), the script is changed to ask for what Accelerate actually does.
#: Each text must occur exactly once, so a changed wheel fails loudly instead of running unpatched.
DELIBERATE_DIFFERENCES: dict[str, list[tuple[str, str, str]]] = {
    # (none left: test_script's fp16 on CPU now runs as in Accelerate, in fp32 with a warning)
}


SITECUSTOMIZE = Path(__file__).parent / "worker_sitecustomize.py"


def test_accelerate_is_not_installed_here() -> None:
    """The scripts must exercise accel: our interpreter can't even find accelerate."""
    assert importlib.util.find_spec("accelerate") is None, (
        "accelerate is importable in the interpreter that runs accel; run these tests from a venv "
        "without it (nox -s conformance)"
    )


def test_rewrite_source() -> None:
    """Each import form the wheel's files use is rewritten; strings and in-package imports stay."""
    source = (
        "import accelerate\n"
        "from accelerate import Accelerator\n"
        "from accelerate.test_utils.training import RegressionModel\n"
        "from ..utils import gather\n"
        "from .testing import torch_device\n"
        "def f():\n"
        "    from accelerate.utils import set_seed\n"
        "command = ['accelerate', 'launch']\n"
    )
    assert rewrite_source(source, depth=1) == (
        "import accel as accelerate\n"
        "from accel import Accelerator\n"
        "from accel_conformance_utils.training import RegressionModel\n"
        "from accel.utils import gather\n"
        "from .testing import torch_device\n"
        "def f():\n"
        "    from accel.utils import set_seed\n"
        "command = ['accelerate', 'launch']\n"
    )
    # scripts/*.py sit one package deeper: ``...`` is the accelerate package, ``..`` test_utils.
    assert rewrite_source("from ...state import PartialState\nfrom ..training import A\n", 2) == (
        "from accel.state import PartialState\nfrom ..training import A\n"
    )
    assert imports_of_accelerate("import accelerate.utils as u\n") == ["accelerate.utils"]


@pytest.fixture(scope="module")
def scripts_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the rewritten ``accel_conformance_utils`` package and the sitecustomize."""
    python = os.environ.get(HF_PYTHON)
    if not python:
        pytest.skip(
            f"{HF_PYTHON} is not set: point it at a Python with accelerate==1.15.0 installed "
            "(only its files are read), or run `nox -s conformance`"
        )
    root = tmp_path_factory.mktemp("conformance")
    rewrite_test_utils(accelerate_folder(python), root)
    for name, changes in DELIBERATE_DIFFERENCES.items():
        path = root / PACKAGE / "scripts" / f"{name}.py"
        source = path.read_text(encoding="utf-8")
        for text, replacement, why in changes:
            count = source.count(text)
            assert count == 1, f"{name}.py has {count} copies of the line patched because {why}"
            source = source.replace(text, replacement)
        path.write_text(source, encoding="utf-8")
    shutil.copy(SITECUSTOMIZE, root / "sitecustomize.py")
    return root


def accel_command() -> list[str]:
    found = shutil.which("accel", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "accel_launch"]


_ERROR = re.compile(r"^(?:\[rank\d+\]:\s*)?(?:[\w.]+(?:Error|Exception|Interrupt)\b.*)$", re.M)


def first_error(output: str) -> str:
    """The first ``SomethingError: ...`` line of a run's output, or ``""``."""
    found = _ERROR.search(output)
    return found[0] if found else ""


#: The files whose ``accel`` imports must all resolve: the helper package and the scripts run.
IMPORTING_FILES = ["testing.py", "training.py"] + [
    f"scripts/{script.name}.py" for script in SCRIPTS
]


def accel_imports(source: str) -> list[tuple[str, str]]:
    """``(module, name)`` for every ``from accel... import name`` in ``source``, also those
    inside functions; ``(module, "")`` for a plain ``import accel...``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "accel" or node.module.startswith("accel."):
                found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [
                (alias.name, "")
                for alias in node.names
                if alias.name == "accel" or alias.name.startswith("accel.")
            ]
    return found


@pytest.mark.parametrize("relative", IMPORTING_FILES)
def test_imports_resolve(scripts_root: Path, relative: str) -> None:
    """Every name the rewritten file imports from accel exists: all of them listed at once, where
    running the script stops at the first."""
    source = (scripts_root / PACKAGE / relative).read_text(encoding="utf-8")
    imports = accel_imports(source)
    assert imports, f"{relative} imports nothing from accel: the rewrite didn't happen"
    missing = []
    for module_name, name in imports:
        try:
            module = importlib.import_module(module_name)
            if name:
                getattr(module, name)
        except Exception as error:  # absent, or an _UNSUPPORTED entry that raises when read
            missing.append(f"{module_name}.{name}" if name else f"{module_name} ({error})")
    assert not missing, f"{relative}: {len(missing)} imports don't resolve: {', '.join(missing)}"


def _case(name: str, marker: str, processes: int) -> pytest.ParameterSet:
    why = EXCLUDED.get((name, processes))
    marks = [pytest.mark.skip(reason=f"fails under Accelerate too: {why}")] if why else []
    return pytest.param(Script(name, marker), processes, id=f"{name}-{processes}", marks=marks)


_RUN = {script.name for script in SCRIPTS}
CASES = [_case(s.name, s.marker, n) for s in SCRIPTS for n in PROCESSES] + [
    _case(name, "", n) for name, n in EXCLUDED if name not in _RUN
]


@pytest.mark.multiprocess
@pytest.mark.parametrize(("script", "processes"), CASES)
def test_script_passes(scripts_root: Path, tmp_path: Path, script: Script, processes: int) -> None:
    path = scripts_root / PACKAGE / "scripts" / f"{script.name}.py"
    records = tmp_path / "records"
    records.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(scripts_root), env.get("PYTHONPATH")])),
        ACCEL_CONFORMANCE_RECORDS=str(records),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
    )
    command = [
        *accel_command(), "launch", "--cpu", "--num_processes", str(processes),
        "--main_process_port", str(free_port()), str(path),
    ]  # fmt: skip
    # The scripts write scratch files into the working directory.
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, (
        f"{script.name} on {processes} processes exited {done.returncode}; first error: "
        f"{first_error(output) or '(none found)'}\n{output[-6000:]}"
    )
    assert script.marker in output, f"no {script.marker!r} in the output:\n{output[-3000:]}"
    found = [json.loads(record.read_text()) for record in records.glob("rank-*.json")]
    found.sort(key=lambda record: record["rank"])
    ranks = [(record["rank"], record["world_size"]) for record in found]
    assert ranks == [(rank, processes) for rank in range(processes)], f"workers that ran: {ranks}"
    assert all(not record["accelerate_imported"] for record in found), found
