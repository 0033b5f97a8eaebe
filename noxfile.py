"""Sessions for the accel monorepo.

Every session builds its own virtual environment with ``torch==2.13.0`` in it first (a CPU wheel
on local disk; any other version would download gigabytes), except ``backend-xla``, whose engine
needs torch 2.9. torch is unpacked once, into ``.nox/_shared/`` (``pip install --target``), and
each venv that needs it gets a ``.pth`` line pointing there: pip sees torch installed, as if it
had unpacked its 900 MB again (about 30 s a venv, 20 venvs a run). Packages are discovered from
``packages/*/pyproject.toml`` and installed from their local paths, siblings included, so a
``tests-<package>`` session proves that the package installs and passes its tests with only what
it declares.

Default sessions (what CI runs): every ``tests-<package>``, ``backend-deepspeed``,
``backend-nd``, ``backend-xla``, ``integration``, ``conformance``, ``ecosystem``, ``stress``,
``faults``, ``profiles``, ``lint`` and ``docs``. On demand: ``bench``, ``demo``, and
``backend-fsdp`` / ``backend-ddp`` (one backend's tests alone; the package sessions run them).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).parent
PACKAGES = ROOT / "packages"
TORCH = "torch==2.13.0"
TEST_TOOLS = ("pytest>=8", "pytest-timeout>=2")
ACCELERATE = "accelerate==1.15.0"
#: What the ``ecosystem`` session runs on accel (and on Accelerate, to compare).
TRANSFORMERS = "transformers==5.23.0"
#: Lightning Fabric, a peer in the start-up benchmark (its own venv, torch pinned).
LIGHTNING = "lightning==2.6.6"
ECOSYSTEM = (TRANSFORMERS, "peft==0.21.2", "trl==1.16.0", "datasets==5.2.0")

nox.options.error_on_missing_interpreters = True
nox.options.reuse_existing_virtualenvs = False

#: Each session's venv is deleted once the session passed, so a full run never holds all of them
#: (about 25 GB together, the XLA one 7 GB) on a shared disk at once; sessions recreate their venv
#: on every run anyway. ``ACCEL_NOX_KEEP_VENVS=1`` keeps them (to inspect one, or with ``-r``).
DISCARD_VENVS = os.environ.get("ACCEL_NOX_KEEP_VENVS") != "1"


def _discarding(function: Callable[..., None]) -> Callable[..., None]:
    """The session ``function``, followed by deleting its venv when :data:`DISCARD_VENVS`."""

    @functools.wraps(function)
    def run(session: nox.Session, *args: object, **kwargs: object) -> None:
        function(session, *args, **kwargs)
        location = getattr(session.virtualenv, "location", None)
        if DISCARD_VENVS and location:
            shutil.rmtree(location, ignore_errors=True)

    return run


#: Where torch 2.13.0 and its dependencies are unpacked once for every venv of a run.
TORCH_LAYER = ROOT / ".nox" / "_shared" / TORCH.replace("==", "-")


def _add_torch(session: nox.Session, python: str = "python") -> None:
    """Put :data:`TORCH` on the path of ``python`` (the session's, or another venv's): unpack it
    into :data:`TORCH_LAYER` the first time, then write one ``.pth`` line into the venv's
    site-packages. pip reads ``.pth`` paths as installed: ``pip install torch==2.13.0`` and every
    package that requires torch find it there, and a package that needs another version of one of
    torch's dependencies installs it in its venv, ahead of the shared one on ``sys.path``.
    torch's console scripts (``torchrun``) are written into the venv's ``bin``."""
    complete = TORCH_LAYER / ".complete"
    if not complete.exists():
        shutil.rmtree(TORCH_LAYER, ignore_errors=True)
        session.run(
            python, "-m", "pip", "install", "-q", "--target", str(TORCH_LAYER), TORCH,
            external=True,
        )  # fmt: skip
        complete.touch()
    paths = session.run(
        python, "-c", "import sys, sysconfig; paths = sysconfig.get_paths(); "
        "print(paths['purelib'], paths['scripts'], sys.executable)",
        silent=True, external=True,
    )  # fmt: skip
    site, scripts, interpreter = str(paths).split()
    Path(site, "_accel_shared_torch.pth").write_text(f"{TORCH_LAYER}\n")
    # torch's console scripts (torchrun...) next to the venv's python, as pip would write them
    for script in (TORCH_LAYER / "bin").iterdir():
        lines = script.read_text().splitlines(keepends=True)
        target = Path(scripts, script.name)
        target.write_text(f"#!{interpreter}\n" + "".join(lines[1:]))
        target.chmod(0o755)


#: The local packages' wheels, built once per nox run by the first session that installs one of
#: them (all at once) and installed by every session from there: pip builds a source folder in an
#: isolated environment of its own, about 5 s a package, and a run installs about 80.
WHEEL_DIR = ROOT / ".nox" / "_shared" / "wheels"
_WHEELS: dict[str, Path] = {}


def _local_target(session: nox.Session, name: str, extras: str = "") -> str:
    """What ``pip install`` takes for the local distribution ``name`` (``extras`` applied): its
    wheel, built with the others the first time in this run."""
    if not _WHEELS:
        shutil.rmtree(WHEEL_DIR, ignore_errors=True)
        WHEEL_DIR.mkdir(parents=True)
        folders = [str(folder) for folder in LOCAL.values()]
        session.run(
            "python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(WHEEL_DIR), *folders
        )
        by_project = {dist.replace("-", "_"): dist for dist in LOCAL}
        for wheel in WHEEL_DIR.glob("*.whl"):
            _WHEELS[by_project[wheel.name.split("-", 1)[0]]] = wheel
    wheel = str(_WHEELS[name])
    return f"{wheel}[{extras}]" if extras else wheel


def _read_pyproject(directory: Path) -> dict:
    with open(directory / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)


def _discover() -> dict[str, Path]:
    """Distribution name -> package folder, for every package under packages/."""
    found = {}
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        found[_read_pyproject(pyproject.parent)["project"]["name"]] = pyproject.parent
    return found


LOCAL = _discover()


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def _local_closure(names: list[str], extras: str = "") -> list[str]:
    """The given local distributions plus every local distribution they depend on, also through
    their extra ``extras`` (not the extras of their dependencies, as :func:`_install_local`)."""
    seen: list[str] = []
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.append(name)
        project = _read_pyproject(LOCAL[name])["project"]
        requirements = list(project.get("dependencies", []))
        if extras and name in names:
            requirements += project.get("optional-dependencies", {}).get(extras, [])
        for requirement in requirements:
            dependency = _requirement_name(requirement)
            if dependency in LOCAL:
                todo.append(dependency)
    return seen


def _install_local(
    session: nox.Session,
    names: list[str],
    extras: str = "",
    env: dict[str, str] | None = None,
    torch: tuple[str, ...] = (TORCH,),
    also: tuple[str, ...] = (),
) -> None:
    """Install torch (:func:`_add_torch` for :data:`TORCH`), then the named local packages, their
    local dependencies and ``also`` (test tools, third-party packages a session needs) in one pip
    command: each pip run costs a few seconds of start-up and resolution before it installs
    anything.

    ``extras`` is applied to the named packages that declare it, not to their dependencies;
    ``env`` is given to the install (a build setting such as ``DS_BUILD_OPS``); ``torch`` is
    what is installed first (another torch, for an engine that needs one).
    """
    if torch == (TORCH,):
        _add_torch(session)
    else:
        session.install(*torch)
    targets = []
    for name in _local_closure(names, extras):
        wants_extra = extras and name in names and _has_extra(name, extras)
        targets.append(_local_target(session, name, extras if wants_extra else ""))
    session.install(*targets, *also, env=env)


def _has_extra(name: str, extra: str) -> bool:
    return extra in _read_pyproject(LOCAL[name])["project"].get("optional-dependencies", {})


def _pytest(session: nox.Session, *paths: str, env: dict[str, str] | None = None) -> None:
    env = {"PYTHONHASHSEED": "0", **(env or {})}
    session.run("python", "-m", "pytest", *paths, *session.posargs, env=env)


BACKEND_TESTS = LOCAL["accel-backends"] / "tests"
#: Test folders a session of their own runs (with what they need beyond the package).
SEPARATE_TESTS = {"accel-backends": (BACKEND_TESTS / "nd",)}

for _dist in LOCAL:

    @nox.session(name=f"tests-{_dist}")
    @_discarding
    def _package_tests(session: nox.Session, dist: str = _dist) -> None:
        """Install one package alone (with what it declares) and run its tests (but those of
        ``SEPARATE_TESTS``)."""
        _install_local(session, [dist, "accel-testing"], extras="test", also=TEST_TOOLS)
        session.run("pip", "check")
        ignored = [f"--ignore={path}" for path in SEPARATE_TESTS.get(dist, ())]
        _pytest(session, str(LOCAL[dist] / "tests"), *ignored)


@nox.session(name="backend-deepspeed")
@_discarding
def backend_deepspeed(session: nox.Session) -> None:
    """The DeepSpeed strategy with DeepSpeed 0.19 installed, on 2 CPU processes (gloo).

    DeepSpeed is built without its C++ ops (``DS_BUILD_OPS=0``) and the tests use torch's AdamW,
    so nothing is compiled at run time. ``tests-accel-backends`` runs without the engine, where
    these tests skip.
    """
    # DeepSpeed's checkpoints into a real S3 server (test_deepspeed_object_storage.py): the "s3"
    # extras of accel-core (s3fs) and accel-testing (moto's server), in the same pip command
    s3 = (_local_target(session, "accel-core", "s3"), _local_target(session, "accel-testing", "s3"))
    _install_local(
        session,
        ["accel-backends", "accel-testing"],
        extras="deepspeed",
        env={"DS_BUILD_OPS": "0"},
        also=(*TEST_TOOLS, *s3),
    )
    session.run("pip", "check")
    tests = sorted(str(path) for path in BACKEND_TESTS.glob("test_deepspeed_*.py"))
    _pytest(session, *tests, env={"DS_ACCELERATOR": "cpu"})


@nox.session(name="backend-nd")
@_discarding
def backend_nd(session: nox.Session) -> None:
    """Tensor, pipeline and expert parallelism with FSDP2 (ND parallelism: dp_shard x tp,
    dp_replicate x tp, tp, pp x dp_shard, ep x dp_shard / tp / dp_replicate) on 2 and 4 CPU
    processes (gloo): plain models and tiny transformers models (a Llama split by a plan, by
    transformers in Accelerate's recipe through ``accel launch`` and into pipeline stages; a
    Qwen3-MoE split over its experts by accel and by transformers), each compared with one process
    of plain PyTorch; checkpoints across meshes and kill-and-resume."""
    # accel-kit: transformers splits a model while loading only when ``accelerate`` imports,
    # which accel's alias answers (no Hugging Face Accelerate in this venv)
    names = ["accel-backends", "accel-launch", "accel-kit", "accel-testing"]
    _install_local(session, names, also=(*TEST_TOOLS, TORCH, TRANSFORMERS))
    session.run("pip", "check")
    _pytest(session, str(BACKEND_TESTS / "nd"))


#: torch_xla 2.9 runs only on torch 2.9 (PyPI's build of it for x86_64 is CUDA's: about 7 GB).
XLA_TORCH = ("torch==2.9.1", "torch_xla==2.9.0")


@nox.session(name="backend-xla")
@_discarding
def backend_xla(session: nox.Session) -> None:
    """The XLA strategy on XLA's CPU device (``PJRT_DEVICE=CPU``), in a venv of its own with
    torch 2.9.1 and torch_xla 2.9.0; the tests set ``CPU_NUM_DEVICES`` where they need two
    devices (SPMD). ``tests-accel-backends`` runs without torch_xla, where these tests skip."""
    names = ["accel-backends", "accel-testing"]
    _install_local(session, names, extras="xla", torch=XLA_TORCH, also=TEST_TOOLS)
    session.run("pip", "check")
    tests = sorted(str(path) for path in BACKEND_TESTS.glob("test_xla_*.py"))
    _pytest(session, *tests, env={"PJRT_DEVICE": "CPU"})


@nox.session(name="backend-fsdp", default=False)
@_discarding
def backend_fsdp(session: nox.Session) -> None:
    """The FSDP strategy's tests alone, FSDP2 and FSDP1 (torch's own; ``tests-accel-backends`` runs
    them too)."""
    _install_local(session, ["accel-backends", "accel-testing"], also=TEST_TOOLS)
    tests = sorted(str(path) for path in BACKEND_TESTS.glob("test_*fsdp*.py"))
    _pytest(session, *tests)


@nox.session(name="backend-ddp", default=False)
@_discarding
def backend_ddp(session: nox.Session) -> None:
    """The built-in single-device and DDP strategies against the strategy contract, and the
    distributed training tests (``tests-accel-core`` runs them too)."""
    _install_local(session, ["accel-core", "accel-testing"], extras="test", also=TEST_TOOLS)
    tests = LOCAL["accel-core"] / "tests"
    _pytest(session, str(tests / "test_strategy_contract.py"), str(tests / "test_distributed.py"))


@nox.session
@_discarding
def integration(session: nox.Session) -> None:
    """Everything installed together; runs the tests that cross packages and processes.

    A separate venv with Hugging Face Accelerate (torch + accelerate only) lets
    ``test_accelerate_checkpoints.py`` move checkpoints between the two libraries, and
    ``test_accelerate_names.py`` list Accelerate's public names.
    """
    # every package with its test extra (transformers, for the module-path and bigmodel tests)
    # but accel-core, whose test extra is its own tests' trackers and data libraries (a minute of
    # installing, aim built from source): it comes in as a dependency, without it
    names = [name for name in LOCAL if name != "accel-core"]
    _install_local(session, names, extras="test", also=TEST_TOOLS)
    env = {"ACCEL_TEST_HF_PYTHON": _accelerate_python(session, with_transformers=False)}
    ignored = [
        "--ignore=integration-tests/stress",
        "--ignore=integration-tests/conformance",
        "--ignore=integration-tests/ecosystem",
        "--ignore=integration-tests/faults",
        "--ignore=integration-tests/storage",
    ]
    _pytest(session, "integration-tests", *ignored, env=env)


@nox.session
@_discarding
def conformance(session: nox.Session) -> None:
    """Accelerate 1.15's own distributed check scripts (``accelerate/test_utils/scripts/``), copied
    out of its wheel at run time with imports rewritten to accel, on 2 and 3 CPU processes through
    ``accel launch``. Accelerate goes into its own venv, only so its files can be read: this
    session's venv doesn't have it, so our processes can't import it."""
    _install_local(session, list(LOCAL), also=TEST_TOOLS)
    env = {"ACCEL_TEST_HF_PYTHON": _accelerate_python(session, with_transformers=False)}
    _pytest(session, "integration-tests/conformance", env=env)


@nox.session
@_discarding
def ecosystem(session: nox.Session) -> None:
    """transformers' ``Trainer``, peft, trl (``SFTTrainer``, ``trl sft``, ``trl env``) and
    ``from_pretrained(device_map=...)`` on accel through its ``accelerate`` alias, compared exactly
    with the same jobs on Hugging Face Accelerate 1.15 (a separate venv with the same pins).

    peft and trl bring a real ``accelerate`` into this venv as a dependency; the alias shadows it.
    torch is pinned in the same pip command as the pins (pip would otherwise pull another torch).
    """
    _install_local(session, list(LOCAL), also=(*TEST_TOOLS, TORCH, *ECOSYSTEM))
    session.run("pip", "check")
    hf_python = _accelerate_python(session, with_transformers=False, packages=ECOSYSTEM)
    _pytest(session, "integration-tests/ecosystem", env={"ACCEL_TEST_HF_PYTHON": hf_python})


@nox.session
@_discarding
def stress(session: nox.Session) -> None:
    """Short jobs launched again and again: every exit code right, no SIGABRT, no orphan."""
    _install_local(session, ["accel-core", "accel-launch"], also=(*TEST_TOOLS, "psutil"))
    _pytest(session, "integration-tests/stress")


@nox.session
@_discarding
def faults(session: nox.Session) -> None:
    """Jobs that meet faults, for real: a worker killed and the group restarted (static and c10d
    rendezvous), a group that can't form, SIGTERM/SIGUSR1 preemption and resume, a second signal
    during the save, a lost machine (two launchers on loopback) replaced or left behind, and
    auto-resume; each compared bit for bit with the same job run without a fault.

    Then checkpoints in object storage (``integration-tests/storage``): a moto S3 server in a
    process of its own and jobs on 2 CPU processes saving to ``s3://`` (rotation, SIGKILL during
    an upload and resume, FSDP2 shards saved in the background, ``save_model`` read back with
    safetensors, ``storage_options``). One venv for both: the same packages, plus s3fs and moto.
    """
    # extras "s3": accel-core's (s3fs) and accel-testing's (moto's server)
    names = ["accel-core", "accel-backends", "accel-launch", "accel-testing"]
    _install_local(session, names, extras="s3", also=TEST_TOOLS)
    session.run("pip", "check")
    _pytest(session, "integration-tests/faults", "integration-tests/storage")


@nox.session
@nox.parametrize("profile", ["inference", "launcher", "full"])
@_discarding
def profiles(session: nox.Session, profile: str) -> None:
    """Install one profile in its own venv and check what is and is not importable."""
    wanted = {"inference": ["accel-bigmodel"], "launcher": ["accel-launch"], "full": ["accel-kit"]}
    if profile != "launcher":
        _add_torch(session)
    session.install(*[_local_target(session, name) for name in _local_closure(wanted[profile])])
    session.run("python", "integration-tests/profiles/check_profile.py", profile)


@nox.session
@_discarding
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
@_discarding
def docs(session: nox.Session) -> None:
    """Build the mkdocs site with --strict (warnings are errors).

    The API reference is read statically from packages/*/src by mkdocstrings (griffe): nothing of
    accel, and no torch, is installed. ruff formats the signatures.
    """
    session.install(
        "mkdocs==1.6.1",
        "mkdocs-material==9.8.2",
        "mkdocstrings==1.0.8",
        "mkdocstrings-python==2.0.11",
        "mkdocs-autorefs==1.4.5",
        "griffe==2.4.1",
        "ruff==0.17.6",
    )
    site = str(Path(session.create_tmp()) / "site")
    session.run("mkdocs", "build", "--strict", "--site-dir", site, env={"NO_MKDOCS_2_WARNING": "1"})


#: DeepSpeed for the benchmarks, built without its C++ ops (``DS_BUILD_OPS=0``).
DEEPSPEED = "deepspeed==0.19.8"


#: The Hugging Face Accelerate venvs made in this run, by what they hold.
_ACCELERATE_VENVS: dict[tuple[str, ...], str] = {}


def _accelerate_python(
    session: nox.Session, with_transformers: bool = True, packages: tuple[str, ...] = ()
) -> str:
    """A separate venv with Hugging Face Accelerate (and, for the benchmarks, transformers and
    DeepSpeed, which Accelerate's DeepSpeed integration needs), plus ``packages`` (installed with
    torch pinned in the same command); returns its interpreter. Sessions of one run that ask for
    the same share it (``.nox/_shared/``); it is made afresh in each run."""
    extra = ["transformers", DEEPSPEED] if with_transformers else []
    extra += [TORCH, *packages] if packages else []
    key = (ACCELERATE, *extra)
    if key in _ACCELERATE_VENVS:
        return _ACCELERATE_VENVS[key]
    venv = ROOT / ".nox" / "_shared" / f"hf-accelerate-{len(_ACCELERATE_VENVS)}"
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    session.run("python", "-m", "venv", str(venv), external=True)
    _add_torch(session, str(python))
    session.run(
        str(python),
        "-m",
        "pip",
        "install",
        "-q",
        ACCELERATE,
        *extra,
        external=True,
        env={"DS_BUILD_OPS": "0"},
    )
    _ACCELERATE_VENVS[key] = str(python)
    return str(python)


@nox.session(default=False)
@_discarding
def bench(session: nox.Session) -> None:
    """Benchmarks against Hugging Face Accelerate and raw PyTorch; writes benchmarks/RESULTS.md."""
    _install_local(session, list(LOCAL), extras="bench")
    session.install(TORCH, TRANSFORMERS, DEEPSPEED, env={"DS_BUILD_OPS": "0"})
    env = {
        "ACCEL_BENCH_HF_PYTHON": _accelerate_python(session, packages=(TRANSFORMERS,)),
        "ACCEL_BENCH_FABRIC_PYTHON": _fabric_python(session),
    }
    session.run("python", "benchmarks/run.py", *session.posargs, env=env)


def _fabric_python(session: nox.Session) -> str:
    """A separate venv with Lightning Fabric (``lightning``, torch pinned in the same command),
    for bench_first_step; returns its interpreter."""
    venv = ROOT / ".nox" / "_shared" / "lightning-fabric"
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    session.run("python", "-m", "venv", str(venv), external=True)
    _add_torch(session, str(python))
    session.run(str(python), "-m", "pip", "install", "-q", LIGHTNING, TORCH, external=True)
    return str(python)


@nox.session(default=False)
@_discarding
def demo(session: nox.Session) -> None:
    """The main job: the examples that show accel end to end, on CPU."""
    _install_local(session, list(LOCAL), extras="examples")
    session.run("python", "examples/demo.py", *session.posargs, env={"OMP_NUM_THREADS": "1"})


# Keep the loop variable out of the module namespace.
del _dist
