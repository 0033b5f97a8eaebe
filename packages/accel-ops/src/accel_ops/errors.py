"""Errors raised by collectives."""

from __future__ import annotations


class DistributedOperationException(Exception):
    """A collective can't run or did not complete.

    Raised on every rank in debug mode when the ranks pass tensors of different shapes or dtypes
    (the message lists each rank's), and on a failed collective (the message names the operation).
    """


class CollectiveTimeoutError(DistributedOperationException, TimeoutError):
    """A collective did not complete within the process group's timeout.

    Usually one rank never reached the collective (it skipped it, or crashed). The message names
    the operation, this rank and the timeout.
    """
