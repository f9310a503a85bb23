"""Processes the kit starts on loopback: a free port to bind, and a clean stop."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def terminate(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if the process has not ended within 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
