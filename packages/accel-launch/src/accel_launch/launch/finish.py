"""End a worker the way the interpreter would, but without the interpreter's finalization.

Why. A C++ thread of torch.distributed that ever held the GIL (gloo's ``pt_gloo_runloop``
threads do, when they release tensors that Python also sees) must take the GIL again when it
exits. If its process group is destroyed during interpreter finalization, because something
still referenced it until then (a ``DistributedDataParallel`` model in a module global, a
subgroup, a device mesh), the thread exits while CPython is finalizing; CPython ends such a thread
with ``pthread_exit``, whose forced unwind through C++ ``noexcept`` frames calls
``std::terminate``: the worker dies by SIGABRT ("terminate called without an active exception")
after its script finished. Measured with torch 2.13 on 4 gloo processes: a DDP script that calls
``destroy_process_group()`` aborts in 5 of 16 runs, the same script through :func:`finish` in 0.

What. :func:`run_and_finish` runs the script with the interpreter's exit-code rules (0, the
``SystemExit`` code, 1 with the traceback for an exception), then :func:`finish` does what
finalization does that a program can observe, and leaves:

1. waits for the non-daemon threads, as the interpreter does;
2. runs the ``atexit`` handlers (accel-ops' teardown destroys the process group there; logging
   flushes its handlers; multiprocessing stops its children; ``weakref.finalize`` callbacks run);
3. flushes every file object still open (no object is deallocated, so nothing else would) and
   ``sys.stdout``/``sys.stderr``;
4. ``os._exit(code)``: no deallocation of the objects still alive, no module teardown, no C++
   static destructors. ``__del__`` methods of objects alive at exit do not run; the interpreter
   does not promise to run them either.

Standard library only: it runs in every worker of ``accel launch`` and of accel-testing.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def system_exit_code(exit_: SystemExit) -> int:
    """The process exit code for ``exit_``, as the interpreter computes it (a message: 1)."""
    code = exit_.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_and_finish(
    target: Callable[[], object], on_exception: Callable[[BaseException], None] | None = None
) -> NoReturn:
    """Run ``target``, then :func:`finish` with the exit code Python would have used.

    An exception is handed to ``on_exception`` (default: ``sys.excepthook``, which prints the
    traceback) and gives exit code 1. ``KeyboardInterrupt`` propagates: the interpreter then
    ends the process by SIGINT, as it always does.
    """
    try:
        target()
        code = 0
    except SystemExit as exit_:
        code = system_exit_code(exit_)
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        if on_exception is None:
            sys.excepthook(type(error), error, error.__traceback__)
        else:
            on_exception(error)
        code = 1
    finish(code)


def finish(code: int) -> NoReturn:
    """Threads, ``atexit`` handlers and file buffers as at a normal exit; then ``os._exit``."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    for candidate in gc.get_objects():
        # type(), not isinstance(): reading __class__ of some objects warns (torch's reduce_op)
        if issubclass(type(candidate), io.IOBase):
            try:
                if not candidate.closed and candidate.writable():
                    candidate.flush()
            except (OSError, ValueError):
                pass
    os._exit(code)
