import importlib.metadata
from pathlib import Path

import tomllib

import accel_backends


def test_installs_with_its_declared_version():
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    declared = pyproject["project"]["version"]
    assert accel_backends.__version__ == importlib.metadata.version("accel-backends") == declared


def test_registers_the_fsdp_deepspeed_and_xla_strategies():
    assert accel_backends.PROVIDED_STRATEGIES == ("fsdp", "deepspeed", "xla")
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    section = pyproject.split('[project.entry-points."accel.strategies"]\n')[1].split("\n\n")[0]
    declared = {
        "fsdp": "accel_backends.fsdp.description:DESCRIPTION",
        "deepspeed": "accel_backends.deepspeed.description:DESCRIPTION",
        "xla": "accel_backends.xla.description:DESCRIPTION",
    }
    assert section == "\n".join(f'{name} = "{target}"' for name, target in declared.items())
    # Installed metadata (older until the package is reinstalled) never names another one.
    group = importlib.metadata.entry_points(group="accel.strategies")
    ours = {ep.name: ep.value for ep in group if ep.value.startswith("accel_backends")}
    assert ours.items() <= declared.items()
