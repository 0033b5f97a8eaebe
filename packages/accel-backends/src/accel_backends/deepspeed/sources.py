"""A resolved DeepSpeed configuration in which every value says where it came from.

:class:`ResolvedDeepSpeedConfig` is what :mod:`accel_backends.deepspeed.resolution` builds from the
places a DeepSpeed setting can come from (``DeepSpeedPlugin`` arguments, the DeepSpeed JSON config,
``accel launch``, Accelerate's variables, defaults). Values the Accelerator supplies later
(``"auto"``) are *pending*: they carry the source they will be filled from. Two sources that
disagree are one :class:`DeepSpeedConfigConflict` naming both sources and both values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from accel_backends.deepspeed.config import DeepSpeedConfigDict

#: A leaf value of a DeepSpeed configuration, as JSON holds it.
ConfigValue = str | int | float | bool | list[object] | None

EDITED_SOURCE = "set on deepspeed_config after construction"


@dataclass(frozen=True)
class Sourced:
    """A DeepSpeed setting's value and where it came from.

    Attributes:
        value: the value (``"auto"`` while pending).
        source: where it came from, e.g. ``"--zero_stage (accel launch)"``,
            ``"ds_config.json: zero_optimization.stage"``, or for a pending value where it will
            come from, e.g. ``"auto: from the data loader's batch size"``.
        agreeing: other sources that gave the same value.
        pending: whether the Accelerator fills the value later.
    """

    value: ConfigValue
    source: str
    agreeing: tuple[str, ...] = ()
    pending: bool = False

    @property
    def sources(self) -> tuple[str, ...]:
        """Every source of the value, the deciding one first."""
        return (self.source, *self.agreeing)


@dataclass(frozen=True)
class Disagreement:
    """One DeepSpeed key given two different values."""

    key: str
    first: Sourced
    second: Sourced

    def __str__(self) -> str:
        return (
            f"{self.key}: {self.first.value!r} from {self.first.source} and "
            f"{self.second.value!r} from {self.second.source}"
        )


class DeepSpeedConfigConflict(ValueError):
    """A DeepSpeed setting given twice with different values (each disagreement is listed).

    Raised while the configuration is resolved, before any process group exists.
    """

    def __init__(self, disagreements: list[Disagreement]) -> None:
        self.disagreements = disagreements
        if len(disagreements) == 1:
            only = disagreements[0]
            text = (
                f"DeepSpeed setting {only.key} is given twice with different values: "
                f"{only.first.value!r} from {only.first.source}, and {only.second.value!r} from "
                f"{only.second.source}. Keep one of them, or make them equal."
            )
        else:
            listed = "\n".join(f"- {item}" for item in disagreements)
            text = (
                f"{len(disagreements)} DeepSpeed settings are given twice with different values:"
                f"\n{listed}\nKeep one source for each, or make them equal."
            )
        super().__init__(text)


def same_value(first: ConfigValue, second: ConfigValue) -> bool:
    """Whether two settings agree: numbers by value (``2 == 2.0``), booleans only with booleans."""
    numbers = (int, float)
    if isinstance(first, bool) or isinstance(second, bool):
        return isinstance(first, bool) and isinstance(second, bool) and first == second
    if isinstance(first, numbers) and isinstance(second, numbers):
        return float(first) == float(second)
    return first == second


def leaves(config: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, ConfigValue]]:
    """Every ``(dotted key, value)`` of ``config`` that is not a section, in order."""
    for key, value in config.items():
        if isinstance(value, Mapping):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value  # type: ignore[misc]


class ResolvedDeepSpeedConfig:
    """A DeepSpeed configuration and the source of each of its values.

    Args:
        config: the configuration dictionary (shared, not copied: the plugin's
            ``deepspeed_config``).
        values: dotted key -> its value and source.
    """

    def __init__(self, config: DeepSpeedConfigDict, values: dict[str, Sourced]) -> None:
        self.config = config
        self.values = values

    def pending(self) -> dict[str, Sourced]:
        """The values the Accelerator still has to fill, with where each comes from."""
        return {key: found for key, found in self.current().items() if found.pending}

    def current(self) -> dict[str, Sourced]:
        """The sourced values of the configuration as it is now (edits after resolution are
        labelled as such; pending rows for keys not in the config yet stay listed)."""
        result: dict[str, Sourced] = {}
        for key, value in leaves(self.config):
            if value is None:
                continue
            known = self.values.get(key)
            if known is not None and same_value(known.value, value):
                result[key] = known
            else:
                result[key] = Sourced(value, EDITED_SOURCE)
        for key, known in self.values.items():
            if key not in result and known.pending:
                result[key] = known
        return result

    def note_filled(self, key: str, value: ConfigValue) -> None:
        """Record that the Accelerator filled pending ``key`` with ``value`` (same source)."""
        known = self.values.get(key)
        if known is not None and known.pending:
            self.values[key] = replace(known, value=value, pending=False)

    def fill(self, found: Mapping[str, Sourced]) -> None:
        """Fill pending keys from ``found`` (the Accelerator's values, with their sources), and
        check the keys that are set: a different value is a :class:`DeepSpeedConfigConflict`
        listing every disagreement; nothing is changed then."""
        disagreements = []
        for key, given in found.items():
            known = self.current().get(key)
            if known is not None and not known.pending and not same_value(known.value, given.value):
                disagreements.append(Disagreement(key, known, given))
        if disagreements:
            raise DeepSpeedConfigConflict(disagreements)
        for key, given in found.items():
            known = self.current().get(key)
            if known is None or known.pending:
                self.values[key] = replace(given, pending=False)
                set_value(self.config, key, given.value)
            else:
                self.values[key] = replace(known, agreeing=(*known.agreeing, given.source))

    def describe(self) -> str:
        """The table of the configuration: key, value, source (pending values say from where)."""
        rows = [
            (key, "auto (pending)" if found.pending else repr(found.value), _source(found))
            for key, found in self.current().items()
        ]
        key_width = max((len(key) for key, _, _ in rows), default=3)
        value_width = max((len(value) for _, value, _ in rows), default=5)
        lines = [f"  {'key':<{key_width}}  {'value':<{value_width}}  source"]
        lines += [f"  {k:<{key_width}}  {v:<{value_width}}  {s}" for k, v, s in rows]
        return "DeepSpeed config (key, value, source):\n" + "\n".join(lines)


def _source(found: Sourced) -> str:
    if not found.agreeing:
        return found.source
    return f"{found.source}; same in " + ", ".join(found.agreeing)


def set_value(config: DeepSpeedConfigDict, key: str, value: ConfigValue) -> None:
    """Write ``value`` at dotted ``key``, creating missing sections."""
    *parents, last = key.split(".")
    node = config
    for parent in parents:
        child = node.get(parent)
        if not isinstance(child, dict):
            child = node[parent] = {}
        node = child
    node[last] = value
