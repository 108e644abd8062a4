"""Debian packages the test set-up installs where it can, as `.ci/run` does.

On a fresh machine the README's test command needs Chromium (browser test), PostgreSQL
(worker tests) and node/npm (AI SDK parser). As root with apt-get, a missing one is
installed once, under a lock (several workers may ask at once); elsewhere, or with
`LGV_NO_INSTALL=1`, nothing is installed and the test fails with the one line to run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["install_debian_packages"]

_LOCK = Path("/tmp/lg_visibility_test_apt.lock")
_TIMEOUT = 900


def install_debian_packages(*packages: str) -> str | None:
    """Install `packages` with apt-get; None when done, else why not (one line)."""
    command = f"apt-get install -y {' '.join(packages)}"
    if os.environ.get("LGV_NO_INSTALL"):
        return f"not installing (LGV_NO_INSTALL is set): run {command}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"run {command} (as root)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with _LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
            done = subprocess.run(
                step, env=env, capture_output=True, text=True, timeout=_TIMEOUT, check=False
            )
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
                return f"{' '.join(step)} failed ({tail[0][:200]}): run {command}"
    return None
