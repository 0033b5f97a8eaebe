"""Reading and patching environment variables (Accelerate's ``accelerate.utils`` helpers)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from accel_ops.launch_environment import parse_bool

logger = logging.getLogger(__name__)

_FORBIDDEN_IN_ENV_LINE = (";", "\n", "<", ">", " ")


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """``1`` for a true string (``y, yes, t, true, on, 1``), ``0`` for a false one.

    With ``to_bool`` the result is a ``bool``.

    Raises ``ValueError`` naming the value for anything else.
    """
    lowered = str(value).strip().lower()
    if lowered in ("y", "yes", "t", "true", "on", "1"):
        result = 1
    elif lowered in ("n", "no", "f", "false", "off", "0"):
        result = 0
    else:
        raise ValueError(
            f"invalid truth value {value!r}; expected one of y, yes, t, true, on, 1 or "
            "n, no, f, false, off, 0"
        )
    return bool(result) if to_bool else result


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """The boolean value of environment variable ``key`` (``default`` when unset)."""
    value = os.environ.get(key)
    if value is None:
        return default
    try:
        return parse_bool(value)
    except ValueError as error:
        raise ValueError(f"{key}={value!r} is not valid; expected {error}") from None


def parse_choice_from_env(key: str, default: str = "no") -> str:
    """The string value of environment variable ``key`` (``default`` when unset)."""
    return os.environ.get(key, str(default))


def get_int_from_env(env_keys: Iterable[str], default: int) -> int:
    """The first non-negative integer among the variables ``env_keys``, else ``default``."""
    for key in env_keys:
        text = os.environ.get(key)
        if text is None:
            continue
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{key}={text!r} is not valid; expected an integer") from None
        if value >= 0:
            return value
    return default


@contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Set environment variables (names upper-cased, values ``str()``-ed) inside the block.

    Afterwards each variable gets its previous value back, or is removed if it was unset.
    """
    previous: dict[str, str | None] = {}
    for key, value in kwargs.items():
        name = key.upper()
        previous.setdefault(name, os.environ.get(name))
        os.environ[name] = str(value)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def clear_environment() -> Iterator[None]:
    """Empty ``os.environ`` inside the block; restore it exactly afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def convert_dict_to_env_variables(current_env: Mapping[str, str]) -> list[str]:
    """``KEY=VALUE\\n`` lines for an env file.

    Entries with ``; < >``, a space or a newline, or with an empty part, are skipped with a warning.
    """
    lines = []
    for key, value in current_env.items():
        text = f"{key}{value}"
        if key and str(value) and not any(char in text for char in _FORBIDDEN_IN_ENV_LINE):
            lines.append(f"{key}={value}\n")
        else:
            logger.warning(
                "Skipping %s=%s: empty, or contains one of ; < > space newline", key, value
            )
    return lines
