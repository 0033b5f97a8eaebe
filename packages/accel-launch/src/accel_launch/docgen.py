"""Generate docs/reference/cli.md from the ``accel`` argument parser (no torch needed).

Run ``python -m accel_launch.docgen cli > docs/reference/cli.md`` and ``python -m
accel_launch.docgen config-file > docs/reference/config-file.md``; a test checks the committed
files equal this output.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

HEADER = """# `accel` command reference

Generated from the argument parser by `python -m accel_launch.docgen`; do not edit by hand.
Every option with an underscore also accepts dashes (`--num_processes` = `--num-processes`).
See the [launch guide](../guides/launch.md) and the [config file reference](config-file.md).
"""


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{name}`" for name in action.option_strings)
    if action.nargs == 0:
        return names
    if action.choices is not None:
        return names + " " + "{" + ", ".join(map(str, action.choices)) + "}"
    return names + f" {action.metavar or action.dest.upper()}"


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _section(name: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    """One command: its description and a table of arguments per argument group."""
    out = [f"{'#' * level} `{name}`", ""]
    if parser.description:
        out += [parser.description, ""]
    subcommands = _subparsers(parser)
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._SubParsersAction)
            and not isinstance(a, argparse._HelpAction)
        ]
        if not actions:
            continue
        title = (group.title or "").strip()
        if title in ("options", "optional arguments"):
            title = "Options"
        elif title == "positional arguments":
            title = "Arguments"
        out += [f"**{title}**", "", "| argument | meaning |", "|---|---|"]
        out += [f"| {_cell(_names(a))} | {_cell(a.help)} |" for a in actions]
        out.append("")
    if subcommands:
        out += ["Subcommands: " + ", ".join(f"`{sub}`" for sub in subcommands), ""]
    for sub_name, sub in subcommands.items():
        out += _section(f"{name} {sub_name}", sub, level + 1)
    return out


def generate() -> str:
    """The markdown text of docs/reference/cli.md."""
    from accel_launch.cli import build_parser

    parser = build_parser()
    parser.prog = "accel"
    lines = [HEADER, "Commands:", ""]
    lines += [
        f"- [`accel {name}`](#accel-{name.replace(' ', '-')})" for name in _subparsers(parser)
    ]
    lines.append("")
    for name, sub in _subparsers(parser).items():
        lines += _section(f"accel {name}", sub, 2)
    return "\n".join(lines).rstrip() + "\n"


CONFIG_HEADER = """# Config file reference

Generated from accel-launch's schema by `python -m accel_launch.docgen config-file`; do not edit by
hand.

`accel config` writes this YAML file (JSON too, when the name ends in `.json`); `accel launch` reads
it for every value not given by a flag or an environment variable. The keys are those of Hugging
Face Accelerate's `accelerate config`, so its files work unchanged. The file is read with
`yaml.safe_load`. An unknown key is an error naming the nearest valid key; a value that is not
allowed is an error naming the key, the value and the allowed values. Choices are matched without
regard to case. `accel config update` rewrites an older file with today's keys.

Where the file is looked for: `--config_file`, else `ACCEL_CONFIG_FILE`, else
`$XDG_CONFIG_HOME/accel/default_config.yaml`, else `~/.config/accel/default_config.yaml`.

```yaml
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
mixed_precision: bf16
num_machines: 1
num_processes: 4
gpu_ids: all
use_cpu: false
```
"""

_CONFIG_NOTES = """
`strategy` is accel's own key (Accelerate has none): a strategy by name, `ddp`, `single_device`
or an engine an installed package describes (an `accel.strategies` entry point), as
`accel launch --strategy NAME` takes it. It is chosen over `distributed_type` (which then only says
`MULTI_CPU` or `MULTI_GPU`); a `distributed_type` of another engine is an error.

The sections and `distributed_type` values of the engines come from the engines installed; an
empty section of an engine not installed is accepted,
as Accelerate writes them. The chosen engine's section, merged with the launch flags of the same
names, reaches the processes as the JSON object `ACCEL_STRATEGY_CONFIG` (keys as below), with the
strategy name in `ACCEL_STRATEGY`; see the [launch environment](environment.md).
"""


def _key_table(fields: dict) -> list[str]:
    out = ["| key | type | allowed values | meaning |", "|---|---|---|---|"]
    for key, field in fields.items():
        choices = ", ".join(f"`{c}`" for c in field.choices) if field.choices else ""
        out.append(f"| `{key}` | {field.kind} | {choices} | {_cell(field.help)} |")
    return out


def generate_config_reference() -> str:
    """The markdown text of docs/reference/config-file.md."""
    from accel_launch.config import schema
    from accel_launch.config.defaults import BASE_DEFAULTS

    lines = [CONFIG_HEADER, "## Top-level keys", ""]
    lines += _key_table(schema.top_keys())
    defaults = ", ".join(f"`{k}: {v}`" for k, v in BASE_DEFAULTS.items())
    lines += ["", f"Defaults written by `accel config`: {defaults}.", ""]
    for section, fields in schema.sections().items():
        lines += [f"## `{section}`", ""]
        lines += _key_table(fields)
        lines.append("")
    lines += [_older_spellings(schema.sections()), ""]
    lines += [
        _CONFIG_NOTES.strip(),
        "",
        f"Engines installed where this page was made: {_installed_engines()}.",
    ]
    return "\n".join(lines).rstrip() + "\n"


def _older_spellings(sections: dict) -> str:
    """What older files may write, as the installed engines' descriptions declare it (numbered
    choices, renamed keys) and Accelerate's ``'no'``/``'yes'`` booleans."""
    from accel_launch.launch import engines

    notes = [
        f"`{key}` may be a number (1 = {field.choices[0]} ... {len(field.choices)} = "
        f"{field.choices[-1]})"
        for fields in sections.values()
        for key, field in fields.items()
        if field.numbered and field.choices
    ]
    notes.append("`downcast_bf16` may be `'no'`/`'yes'`")
    notes += [
        f"`{old}` is read as `{new}` (`accel config update` renames it)"
        for description in engines.installed().values()
        for old, new in description.renamed_config_keys.items()
    ]
    listed = ", ".join(notes[:-1]) + f", and {notes[-1]}" if len(notes) > 1 else notes[0]
    return textwrap.fill(f"Older files: {listed}.", width=100)


def _listed(words: list[str]) -> str:
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def _installed_engines() -> str:
    """The installed engines, as the page names them (by package, then title)."""
    from accel_launch.launch import engines

    by_package: dict[str, list[str]] = {}
    for name, description in engines.installed().items():
        if name in engines.BUILT_IN_STRATEGIES:
            continue
        package = description.install.split("[")[0]
        by_package.setdefault(package, []).append(description.title)
    if not by_package:
        return "none"
    return "; ".join(
        f"{_possessive(package)} {_listed(titles)}" for package, titles in by_package.items()
    )


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "cli"
    sys.stdout.write(generate_config_reference() if which == "config-file" else generate())
