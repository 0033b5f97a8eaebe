"""The cost of accel-kit's ``accelerate`` start-up hook at interpreter start while
``ACCEL_AS_ACCELERATE`` is unset.

Usage: python ecosystem_hook.py <number>. Finds ``accel_kit_as_accelerate.pth`` in this
interpreter's site-packages, removes ``ACCEL_AS_ACCELERATE`` from the environment, and times with
``timeit`` (best of 5 rounds of ``number`` calls, as ``python -m timeit`` reports):
- ``exec`` of the file's ``import`` line, as ``site`` runs it (the string: compile, then run);
- ``site.addpackage`` of the whole file, i.e. everything ``site`` does for it at start-up (open,
  read, and the ``exec`` above).
Prints one JSON line with nanoseconds per call of each, the file's path and the line.
"""

import json
import os
import site
import sys
import sysconfig
import timeit
from pathlib import Path

NAME = "accel_kit_as_accelerate.pth"


def find_pth() -> Path:
    folders = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    for folder in folders:
        candidate = Path(folder) / NAME
        if candidate.exists():
            return candidate
    raise SystemExit(f"{NAME} not found in {folders}")


def main() -> None:
    number = int(sys.argv[1])
    os.environ.pop("ACCEL_AS_ACCELERATE", None)
    path = find_pth()
    lines = [line for line in path.read_text().splitlines() if line.startswith("import")]
    if len(lines) != 1:
        raise SystemExit(f"expected one import line in {path}, found {len(lines)}")
    line = lines[0]
    already = set(sys.modules)

    def exec_line() -> None:
        exec(line)

    def add_package() -> None:
        site.addpackage(str(path.parent), path.name, set())

    exec_ns = min(timeit.repeat(exec_line, number=number, repeat=5)) / number * 1e9
    file_ns = min(timeit.repeat(add_package, number=number, repeat=5)) / number * 1e9
    imported = sorted(set(sys.modules) - already - {"timeit"})
    print(
        json.dumps(
            {
                "exec_ns": exec_ns,
                "file_ns": file_ns,
                "imported": imported,
                "pth": str(path),
                "line": line,
            }
        )
    )


if __name__ == "__main__":
    main()
