"""Start the real reference server on 127.0.0.1, port 0: as a subprocess (`memsync server`), or in a
thread of the test process (``in_process``: the same app, for tests that need no process boundary)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from memsync.server import BackgroundServer

START_DEADLINE_S = 30.0


@dataclass
class ServerProcess:
    db: Path
    token: str = "test-token"
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    base_url: str = ""
    output: list[str] = field(default_factory=list)
    # In a thread of this process (memsync.server.BackgroundServer): no flags, no process to signal.
    in_process: bool = False
    # A seed file (docs/server.md "Seed files"), loaded before the server listens, either way.
    seed_file: Path | None = None
    background: BackgroundServer | None = None

    def start(self) -> ServerProcess:
        if self.in_process:
            if self.extra_args:
                raise ValueError("server flags need the process: in_process=False")
            self.background = BackgroundServer(self.db, [self.token], seed_file=self.seed_file).start()
            self.base_url = self.background.url
            return self
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("MEMSYNC_SERVER_TOKEN", None)
        args = [sys.executable, "-m", "memsync", "server", "--port", "0", "--db", str(self.db)]
        args += ["--token", self.token, *self.extra_args]
        if self.seed_file is not None:
            args += ["--seed", str(self.seed_file)]
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise RuntimeError(f"server did not start in {START_DEADLINE_S}s: {''.join(self.output)}")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"server exited before listening: {''.join(self.output)}")
            if line.startswith("listening on "):
                self.base_url = line.removeprefix("listening on ").strip()
                return self

    def stop(self) -> int | None:
        if self.background is not None:
            self.background.stop()
            self.background = None
            return 0
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code = self.process.returncode
        self.process = None
        return code

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
