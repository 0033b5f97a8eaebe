"""Where the config file lives, and reading and writing it (YAML, or JSON by file suffix)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from accel_launch.atomic_write import write_atomically
from accel_launch.config.schema import validate
from accel_launch.errors import ConfigError

#: Order in which the keys are written, the way ``accelerate config`` orders them.
_KEY_ORDER = (
    "compute_environment",
    "debug",
    "distributed_type",
    "downcast_bf16",
    "enable_cpu_affinity",
    "gpu_ids",
    "machine_rank",
    "main_process_ip",
    "main_process_port",
    "main_training_function",
    "mixed_precision",
    "num_machines",
    "num_processes",
    "rdzv_backend",
    "same_network",
    "tpu_env",
    "tpu_use_cluster",
    "tpu_use_sudo",
    "use_cpu",
)


def config_home() -> Path:
    """The folder holding accel's config folder: ``$XDG_CONFIG_HOME``, else ``~/.config``."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config"))


def config_dir() -> Path:
    """accel's config folder, where ``accel config`` writes by default: ``config_home()/accel``."""
    return config_home() / "accel"


def default_config_file() -> Path:
    """The config file used when none is named.

    ``ACCEL_CONFIG_FILE`` if set, else ``$XDG_CONFIG_HOME/accel/default_config.yaml``, else
    ``~/.config/accel/default_config.yaml``.
    """
    explicit = os.environ.get("ACCEL_CONFIG_FILE")
    if explicit:
        return Path(explicit).expanduser()
    return config_dir() / "default_config.yaml"


def read_config_data(path: str | os.PathLike[str]) -> Any:
    """The data of a config file as written (YAML, or JSON by suffix), not checked.

    Raises :class:`~accel_launch.errors.ConfigError` for a missing file or bad YAML/JSON.
    """
    import yaml

    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"config file {str(file)!r} does not exist; create one with `accel config` or "
            f"`accel config default --config_file {file}`"
        )
    text = file.read_text(encoding="utf-8")
    try:
        return json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as error:
        raise ConfigError(f"config file {str(file)!r} is not valid YAML/JSON: {error}") from None


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a config file; returns its keys in canonical form.

    Files written by Hugging Face Accelerate's ``accelerate config`` load as they are. Raises
    :class:`~accel_launch.errors.ConfigError` for a missing file, bad YAML, an unknown key (naming
    the nearest valid one) or a value that is not allowed.
    """
    return validate(read_config_data(path), where=str(Path(path)))


def _ordered(config: dict[str, Any]) -> dict[str, Any]:
    first = {key: config[key] for key in _KEY_ORDER if key in config}
    rest = {key: config[key] for key in sorted(config) if key not in first}
    return {**first, **rest}


def save_config(config: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Check ``config`` and write it to ``path`` (JSON if it ends in ``.json``, else YAML)."""
    import yaml

    checked = _ordered(validate(config, where="config to save"))
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    if file.suffix == ".json":
        text = json.dumps(checked, indent=2) + "\n"
    else:
        text = yaml.safe_dump(checked, sort_keys=False, default_flow_style=False)
    write_atomically(file, lambda temporary: Path(temporary).write_text(text, encoding="utf-8"))
    return file


def _rename_old_keys(config: dict[str, Any]) -> dict[str, Any]:
    """Give today's names to the older keys the installed engines renamed (each description's
    ``renamed_config_keys``, in its ``config_section``, else at the top level); in place, and
    returned. A newer key the file already holds wins over the older one, which is dropped."""
    from accel_launch.launch.engines import installed

    for description in installed().values():
        if not description.renamed_config_keys:
            continue
        where = description.config_section
        section = config.get(where) if where else config
        if not isinstance(section, dict):
            continue
        for old, new in description.renamed_config_keys.items():
            if old in section:
                section.setdefault(new, section.pop(old))
    return config


def update_config(path: str | os.PathLike[str]) -> Path:
    """Bring an older file up to date: rename old keys (:func:`_rename_old_keys`), fill missing
    ones with their defaults."""
    from accel_launch.config.defaults import complete

    config = _rename_old_keys(load_config(path))
    return save_config(complete(config), path)
