"""Generate docs/reference/cli.md from the ``accel`` argument parser (no torch needed).

Run ``python -m accel_launch.docgen > docs/reference/cli.md``; a test checks the committed file
equals this output.
"""

from __future__ import annotations

import argparse
import sys

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


if __name__ == "__main__":
    sys.stdout.write(generate())
