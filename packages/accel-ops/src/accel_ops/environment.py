"""Reading and patching environment variables (Accelerate's ``accelerate.utils`` helpers)."""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar, cast

from accel_base.env_values import parse_bool

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")

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


_PURGED_PREFIXES = ("ACCELERATE_", "ACCEL_")
_PURGE_MARK = "_accel_purges_environment"


def _launch_variables() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key.startswith(_PURGED_PREFIXES)}


def _restore_launch_variables(saved: Mapping[str, str]) -> None:
    for key in [key for key in os.environ if key.startswith(_PURGED_PREFIXES)]:
        if key not in saved:
            del os.environ[key]
    os.environ.update(saved)


def _purging(function: Callable[_P, _R]) -> Callable[_P, _R]:
    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        saved = _launch_variables()
        try:
            return function(*args, **kwargs)
        finally:
            _restore_launch_variables(saved)

    setattr(wrapper, _PURGE_MARK, True)
    return wrapper


def _purge_test_methods(cls: type) -> None:
    for name in dir(cls):
        if not name.startswith("test"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, (staticmethod, classmethod)):
            if not getattr(raw.__func__, _PURGE_MARK, False):
                setattr(cls, name, type(raw)(_purging(raw.__func__)))
        elif inspect.isfunction(raw) and not getattr(raw, _PURGE_MARK, False):
            setattr(cls, name, _purging(raw))


def purge_accelerate_environment(func_or_cls: _T) -> _T:
    """Undo, after each call, what the call did to ``ACCELERATE_*`` and ``ACCEL_*`` variables.

    Decorate a function, or a class: then every method whose name starts with ``test`` is
    wrapped, in the class, in the classes it inherits from that are seen through it, and in its
    subclasses (unittest and pytest classes alike). Variables the call added are removed, ones it
    changed or removed get their previous value back; other variables are left alone. Typical
    use: tests that build ``TrainingArguments(fp16=True)`` or an ``Accelerator``, which set
    ``ACCELERATE_MIXED_PRECISION`` and would otherwise leak into the next test. (Accelerate's
    decorator does not bring back a variable the call deleted; this one does.)
    """
    if not isinstance(func_or_cls, type):
        if not callable(func_or_cls):
            raise TypeError(
                "purge_accelerate_environment decorates a function or a class, got "
                f"{type(func_or_cls).__name__}"
            )
        return cast(_T, _purging(func_or_cls))
    cls = func_or_cls
    _purge_test_methods(cls)
    own_hook = cls.__dict__.get("__init_subclass__")

    def __init_subclass__(subclass: type, **kwargs: Any) -> None:
        if own_hook is not None:
            own_hook.__func__(subclass, **kwargs)
        else:
            super(cls, subclass).__init_subclass__(**kwargs)
        _purge_test_methods(subclass)

    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
    return func_or_cls
