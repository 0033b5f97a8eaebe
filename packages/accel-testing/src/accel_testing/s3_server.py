"""A real S3-compatible server for tests: moto's server mode in a process of its own.

``S3Server`` starts ``moto_server`` on a free loopback port and waits until it answers HTTP;
:meth:`S3Server.environment` gives the variables that point boto (and so s3fs, and so accel's
``s3://`` checkpoints) at it, for the test process and the jobs it launches. Nothing is mocked:
the clients speak HTTP to a server that stores the objects. Needs ``accel-testing[s3]``.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

#: Credentials the server accepts (any do); never real ones.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "accel-testing",
    "AWS_SECRET_ACCESS_KEY": "accel-testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_command(port: int) -> list[str]:
    script = Path(sys.executable).parent / "moto_server"
    command = [str(script)] if script.exists() else [shutil.which("moto_server") or "moto_server"]
    return [*command, "-H", "127.0.0.1", "-p", str(port)]


class S3Server:
    """``with S3Server() as server:`` a running server; ``server.endpoint`` is its URL."""

    def __init__(self, start_timeout: float = 60.0) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        #: the end of the server's output (its request log), for diagnostics
        self.log = b""

    def environment(self) -> dict[str, str]:
        """The variables that make boto clients use this server (``AWS_ENDPOINT_URL``)."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> S3Server:
        """Start the server; return once it reports that it listens (``RuntimeError`` with its
        output if it exits or stays silent for ``start_timeout`` seconds)."""
        self._process = subprocess.Popen(
            _server_command(self.port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert self._process.stdout is not None
        output = b""
        deadline = time.monotonic() + self.start_timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not selector.select(timeout=deadline - time.monotonic()):
                    break
                # unbuffered: a buffered readline could keep the line back from select()
                chunk = os.read(self._process.stdout.fileno(), 65536)
                output += chunk
                if not chunk:  # the server exited
                    break
                if b"Running on" in output:  # werkzeug prints it once the socket listens
                    self._drain(output)
                    return self
        self.stop()
        raise RuntimeError(
            f"moto_server did not start on {self.endpoint}: {output.decode()[-2000:]}"
        )

    def _drain(self, output: bytes) -> None:
        """Read the server's output for as long as it runs, keeping its last 64 KiB in
        :attr:`log`: werkzeug logs every request, and a pipe nobody reads fills up (64 KiB, a
        few hundred requests) and blocks the server in the middle of a request."""
        assert self._process is not None and self._process.stdout is not None
        stream, self.log = self._process.stdout, output[-65536:]

        def read() -> None:
            while chunk := os.read(stream.fileno(), 65536):
                self.log = (self.log + chunk)[-65536:]

        self._reader = threading.Thread(target=read, name="moto-server-output", daemon=True)
        self._reader.start()

    def stop(self) -> None:
        """Stop the server (its objects are gone)."""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._reader is not None:
                self._reader.join()  # the pipe closed with the server: the reader stops
                self._reader = None
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None

    def filesystem(self) -> object:
        """A fresh s3fs filesystem talking to this server (no cached listings)."""
        import s3fs

        return s3fs.S3FileSystem(
            key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            endpoint_url=self.endpoint,
            skip_instance_cache=True,
        )

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def environment_with(server: S3Server) -> dict[str, str]:
    """``os.environ`` plus the server's variables (for a launched job)."""
    return {**os.environ, **server.environment()}
