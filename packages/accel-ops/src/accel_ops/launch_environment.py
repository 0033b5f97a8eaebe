"""The launch environment: what a launcher (``accel launch``, ``torchrun``) tells each process.

:class:`LaunchEnvironment` is the one typed reading of those variables;
docs/reference/environment.md lists them. Parsing is strict: a value that can't be read is a
:class:`LaunchEnvironmentError` naming the variable, the value and what was expected.
Hugging Face Accelerate's spelling of a variable (``ACCELERATE_MIXED_PRECISION``,
``ACCELERATE_USE_DEEPSPEED``, ``FSDP_*``, ...) is read when ours is unset; the correspondence is in
:mod:`accel_ops.accelerate_spellings`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, TypeVar

from accel_base.env_values import (
    FALSE_STRINGS,
    MIXED_PRECISION_CHOICES,
    TRUE_STRINGS,
    LaunchEnvironmentError,
    parse_bool,
)
from accel_ops import accelerate_spellings

__all__ = [
    "FALSE_STRINGS",
    "MIXED_PRECISION_CHOICES",
    "TRUE_STRINGS",
    "LaunchEnvironment",
    "LaunchEnvironmentError",
    "parse_bool",
]
_T = TypeVar("_T")

DEFAULT_PROCESS_GROUP_TIMEOUT = 1800.0


@dataclass(frozen=True)
class LaunchEnvironment:
    """The launch variables of this process, parsed and checked.

    Build it with :meth:`from_environ`; the field defaults are what an unset variable means.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    group_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    use_cpu: bool = False
    mixed_precision: str = "no"
    debug: bool = False
    strategy: str | None = None
    strategy_config: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )
    dynamo_backend: str = "no"
    dynamo_mode: str = "default"
    dynamo_use_fullgraph: bool = False
    dynamo_use_dynamic: bool = False
    gradient_accumulation_steps: int = 1
    process_group_timeout: float = DEFAULT_PROCESS_GROUP_TIMEOUT
    num_machines: int = 1
    config_file: str | None = None
    hang_report_dir: str | None = None
    torch_device: str | None = None

    def __reduce__(self) -> tuple[Callable[[dict[str, Any]], LaunchEnvironment], tuple[Any]]:
        # A read-only mapping can't be pickled; a pickled state (``torch.save`` of transformers'
        # ``TrainingArguments`` holds one) carries it as a dict and makes it read-only again.
        values = {item.name: getattr(self, item.name) for item in fields(self)}
        values["strategy_config"] = dict(self.strategy_config)
        return _unpickle_launch_environment, (values,)

    @property
    def is_distributed(self) -> bool:
        """Whether the job has more than one process."""
        return self.world_size > 1

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchEnvironment:
        """Parse ``environ`` (``os.environ`` when omitted).

        An ``ACCEL_*`` variable that is unset is read from its Accelerate spelling, if that is
        set (:func:`accel_ops.accelerate_spellings.resolve`); errors then name that variable.

        Raises :class:`LaunchEnvironmentError` (a ``ValueError``) for a value that can't be
        parsed or that contradicts another one, e.g. ``RANK=3`` with ``WORLD_SIZE=2``.
        """
        env = accelerate_spellings.resolve(os.environ if environ is None else environ)
        world_size = _read(env, "WORLD_SIZE", _int_at_least(1), 1)
        rank = _read(env, "RANK", _int_at_least(0), 0)
        local_world_size = _read(env, "LOCAL_WORLD_SIZE", _int_at_least(1), world_size)
        local_rank = _read(env, "LOCAL_RANK", _int_at_least(0), 0)
        if rank >= world_size:
            raise LaunchEnvironmentError(
                f"RANK={rank} is out of range for WORLD_SIZE={world_size}; expected 0 <= RANK < "
                "WORLD_SIZE. Check the variables your launcher sets."
            )
        if local_rank >= local_world_size:
            raise LaunchEnvironmentError(
                f"LOCAL_RANK={local_rank} is out of range for LOCAL_WORLD_SIZE={local_world_size};"
                " expected 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE."
            )
        backend = _read(env, "ACCEL_DYNAMO_BACKEND", _dynamo_backend, "no")
        return cls(
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            local_world_size=local_world_size,
            group_rank=_read(env, "GROUP_RANK", _int_at_least(0), 0),
            master_addr=_read(env, "MASTER_ADDR", _non_empty, "127.0.0.1"),
            master_port=_read(env, "MASTER_PORT", _port, None),
            use_cpu=_read(env, "ACCEL_USE_CPU", parse_bool, False),
            mixed_precision=_read(env, "ACCEL_MIXED_PRECISION", _mixed_precision, "no"),
            debug=_read(env, "ACCEL_DEBUG_MODE", parse_bool, False),
            strategy=_read(env, "ACCEL_STRATEGY", _optional_name, None),
            strategy_config=_read(env, "ACCEL_STRATEGY_CONFIG", _json_object, MappingProxyType({})),
            dynamo_backend=backend,
            dynamo_mode=_read(env, "ACCEL_DYNAMO_MODE", _dynamo_mode, "default"),
            dynamo_use_fullgraph=_read(env, "ACCEL_DYNAMO_USE_FULLGRAPH", parse_bool, False),
            dynamo_use_dynamic=_read(env, "ACCEL_DYNAMO_USE_DYNAMIC", parse_bool, False),
            gradient_accumulation_steps=_read(
                env, "ACCEL_GRADIENT_ACCUMULATION_STEPS", _int_at_least(1), 1
            ),
            process_group_timeout=_read(
                env, "ACCEL_PROCESS_GROUP_TIMEOUT", _positive_float, DEFAULT_PROCESS_GROUP_TIMEOUT
            ),
            num_machines=_read(env, "ACCEL_NUM_MACHINES", _int_at_least(1), 1),
            config_file=_read(env, "ACCEL_CONFIG_FILE", _optional_name, None),
            hang_report_dir=_read(env, "ACCEL_HANG_REPORT_DIR", _optional_name, None),
            torch_device=_read(env, "ACCEL_TORCH_DEVICE", _torch_device, None),
        )


def _unpickle_launch_environment(values: dict[str, Any]) -> LaunchEnvironment:
    return LaunchEnvironment(
        **{**values, "strategy_config": MappingProxyType(dict(values["strategy_config"]))}
    )


def _read(
    env: accelerate_spellings.SpelledEnvironment,
    name: str,
    parse: Callable[[str], _T],
    default: _T,
) -> _T:
    text = env.values.get(name)
    if text is None:
        return default
    try:
        return parse(text)
    except ValueError as error:
        label = env.sources.get(name, name)
        raise LaunchEnvironmentError(f"{label}={text!r} is not valid; expected {error}") from None


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        expected = f"an integer >= {minimum}"
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(expected) from None
        if value < minimum:
            raise ValueError(expected)
        return value

    return parse


def _port(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise ValueError("a TCP port number between 1 and 65535")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError("a number of seconds > 0, e.g. 1800")
    return value


def _non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError("a host name or address, e.g. 127.0.0.1")
    return text.strip()


def _optional_name(text: str) -> str | None:
    return text.strip() or None


def _mixed_precision(text: str) -> str:
    value = text.strip().lower()
    if value not in MIXED_PRECISION_CHOICES:
        raise ValueError(f"one of {', '.join(MIXED_PRECISION_CHOICES)}")
    return value


def _dynamo_backend(text: str) -> str:
    from accel_ops.enums import DynamoBackend

    value = text.strip().lower()
    choices = [member.value.lower() for member in DynamoBackend]
    if value not in choices:
        raise ValueError(f"a torch.compile backend name, one of {', '.join(choices)}")
    return value


DYNAMO_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _torch_device(text: str) -> str | None:
    value = text.strip()
    if not value:
        return None
    import torch

    try:
        return str(torch.device(value))
    except (RuntimeError, ValueError):
        raise ValueError("a torch device such as 'cpu', 'cuda' or 'cuda:1'") from None


def _dynamo_mode(text: str) -> str:
    value = text.strip().lower()
    if value not in DYNAMO_MODES:
        raise ValueError(f"a torch.compile mode, one of {', '.join(DYNAMO_MODES)}")
    return value


def _json_object(text: str) -> Mapping[str, Any]:
    if not text.strip():
        return MappingProxyType({})
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"a JSON object (parse error: {error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"a JSON object, got a JSON {type(value).__name__}")
    return MappingProxyType(value)
