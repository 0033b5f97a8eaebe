"""The error raised when a checkpoint can't be written or read as asked."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, corrupt, or doesn't match what is being restored.

    The message names the folder or file, the key, and what was expected.
    """


def failure_text(error: BaseException) -> str:
    """``Type: message`` for ``error``, led by the ``OSError`` underneath it when there is one.

    ``torch.save`` turns a failed write (a full disk, a lost mount) into ``inline_container.cc ...
    unexpected pos``, raised while it closes the archive, with the ``OSError`` only as its
    context; the ``OSError`` is what the user needs to read. A :class:`CheckpointError` names its
    file and cause already and is returned as it is.
    """
    if isinstance(error, CheckpointError):
        return f"{type(error).__name__}: {error}"
    text = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    cause: BaseException | None = error
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause is not error:
            return f"{type(cause).__name__}: {cause} (then {text})"
        cause = cause.__cause__ or cause.__context__
    return text
