"""Starts `tokpos serve --port 0` as a child process and stops it again.

The server prints the URL it listens on; ServeProcess reads it from the
merged stdout/stderr, keeps everything the server prints (for failure
reports) and stops the process with SIGTERM, then SIGKILL if it lingers.
"""

import os
import queue
import re
import signal
import subprocess
import threading
import time

URL_RE = re.compile(r"https?://[^\s\"'<>]+")


class ServeProcess:
    def __init__(self, cli, args=("serve", "--port", "0"), start_timeout=20.0):
        self.cli = cli
        self.args = list(args)
        self.start_timeout = start_timeout
        self.proc = None
        self.url = None
        self.output = []
        self._lines = queue.Queue()

    def _pump(self):
        for line in self.proc.stdout:
            self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def start(self):
        if not os.access(self.cli, os.X_OK):
            raise RuntimeError(f"tokpos is not built at {self.cli} (run `make build`, or set TOKPOS_CLI)")
        self.proc = subprocess.Popen(
            [self.cli, *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while self.url is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise RuntimeError(f"`{self.cli} serve` printed no URL within {self.start_timeout:.0f} s:\n{self.log()}")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                code = self.proc.wait()
                raise RuntimeError(f"`{self.cli} serve` exited with status {code} before printing its URL:\n{self.log()}")
            match = URL_RE.search(line)
            if match:
                self.url = match.group(0).rstrip(".,;")
                if not self.url.endswith("/"):
                    self.url += "/"
        return self.url

    def stop(self):
        """SIGTERM, then SIGKILL after 5 s; returns the exit status (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self):
        return "".join(self.output) or "(no output)"

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
