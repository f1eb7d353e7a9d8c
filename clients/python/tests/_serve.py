"""Starts a real ``sluice serve`` for the tests (the binary in $SLUICE_BIN,
else one built from this repository with ``go build``) on a free loopback
port, and stops it."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
from typing import List, Optional

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_built: Optional[str] = None
# Every file and directory the tests make lives here, removed at exit.
TMP = tempfile.mkdtemp(prefix="sluice-py-")
atexit.register(shutil.rmtree, TMP, True)


def binary() -> str:
    global _built
    if os.environ.get("SLUICE_BIN"):
        return os.environ["SLUICE_BIN"]
    if _built is None:
        out = os.path.join(TMP, "sluice")
        subprocess.run(["go", "build", "-o", out, "./cmd/sluice"], cwd=ROOT, check=True)
        _built = out
    return _built


class Serve:
    """A running ``sluice serve --config POLICY --http 127.0.0.1:0 ARGS...``
    (with ``envoy=True``, POLICY is an Envoy ratelimit configuration:
    ``--envoy-config`` and ``--grpc 127.0.0.1:0``); ``url`` is where it
    serves HTTP."""

    def __init__(self, policy: str, *args: str, envoy: bool = False) -> None:
        self.dir = tempfile.mkdtemp(dir=TMP)
        path = os.path.join(self.dir, "policy.yaml")
        with open(path, "w") as f:
            f.write(policy)
        config = ["--envoy-config", self.dir, "--grpc", "127.0.0.1:0"] if envoy else ["--config", path]
        self.proc = subprocess.Popen([binary(), "serve", *config, "--http", "127.0.0.1:0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.logs: List[str] = []
        addr = self._wait_addr()
        self.url = "http://" + addr
        threading.Thread(target=self._drain, daemon=True).start()

    @staticmethod
    def file(content: str) -> str:
        """A file holding content (a token for --auth-token-file)."""
        fd, path = tempfile.mkstemp(dir=TMP)
        with os.fdopen(fd, "w") as f:
            f.write(content)
        return path

    def _wait_addr(self) -> str:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.logs.append(line)
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") == "sluice serving":
                return rec["http"]
        raise RuntimeError("sluice serve exited before serving:\n" + "".join(self.logs))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.logs.append(line)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
