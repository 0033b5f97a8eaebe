"""Run the self-check as a program: its exit code is 1 when a check failed on any rank, else 0.

``accel test`` launches this file by its path through ``accel launch``; ``python -m
accel_launch.selfcheck`` runs it too. It ends by ``SystemExit``, after the process group was
destroyed: in a worker of a multi-process launch, :func:`accel_launch.launch.finish.finish` then
ends the process without the interpreter's finalization.
"""

from __future__ import annotations

import sys

from accel_launch.selfcheck.run import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
