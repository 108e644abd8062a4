"""A throwaway PostgreSQL server for tests, from Debian's `postgresql` package.

`postgres_server()` runs initdb in a fresh temp dir, starts `postgres` on a free 127.0.0.1
port, yields its URL, then stops the server and deletes the dir. `postgres_url` is the
session-scoped fixture around it and `fresh_database(url)` makes an empty database on it.

As root the server runs as the unprivileged `postgres` user that the Debian package creates
(or $LGV_PG_USER), since postgres refuses to run as root. If the binaries are missing the
fixture fails, with one line naming the package; it never skips.
Binaries: $LGV_PG_BINDIR, else the newest /usr/lib/postgresql/*/bin, else `initdb` on PATH.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["PostgresUnavailable", "fresh_database", "postgres_server", "postgres_url"]

INSTALL_HINT = "apt-get install -y postgresql"
START_TIMEOUT = 30.0
INITDB_OPTIONS = ("-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")


class PostgresUnavailable(RuntimeError):
    """The server cannot be started here (binaries or user missing, failed start)."""


def _version_key(path: str) -> tuple[int, ...]:
    name = Path(path).parent.name  # /usr/lib/postgresql/<version>/bin
    return tuple(int(p) for p in name.split(".") if p.isdigit()) or (0,)


def find_pg_bindir() -> Path:
    """The directory holding `initdb`, `postgres` and `pg_isready`."""
    candidates: list[str] = []
    if os.environ.get("LGV_PG_BINDIR"):
        candidates.append(os.environ["LGV_PG_BINDIR"])
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        directory = Path(candidate)
        if all(os.access(directory / b, os.X_OK) for b in ("initdb", "postgres", "pg_isready")):
            return directory
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, postgres, pg_isready) not found in "
        f"/usr/lib/postgresql/*/bin, $LGV_PG_BINDIR or PATH; install them: {INSTALL_HINT}"
    )


def _run_as() -> tuple[int | None, int | None, str]:
    """(uid, gid, name) to run the server as; uid None means as ourselves."""
    if os.geteuid() != 0:
        return None, None, pwd.getpwuid(os.geteuid()).pw_name
    name = os.environ.get("LGV_PG_USER", "postgres")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise PostgresUnavailable(
            f"running as root but user {name!r} does not exist (postgres refuses root); "
            f"{INSTALL_HINT} creates it, or set LGV_PG_USER"
        ) from None
    return entry.pw_uid, entry.pw_gid, name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "<no log>"


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Run a fresh PostgreSQL server; yield `postgresql://USER@127.0.0.1:PORT/postgres`."""
    bindir = find_pg_bindir()
    uid, gid, user = _run_as()
    as_user: dict[str, Any] = {} if uid is None else {"user": uid, "group": gid, "extra_groups": []}
    # Under root, $TMPDIR may sit below /root (mode 700), out of the postgres user's reach.
    base = os.environ.get("LGV_PG_TMPDIR") or ("/tmp" if uid is not None else None)
    root = Path(tempfile.mkdtemp(prefix="lgv-pg-", dir=base))
    proc: subprocess.Popen[bytes] | None = None
    log: Any = None
    try:
        if uid is not None and gid is not None:
            os.chown(root, uid, gid)
        os.chmod(root, 0o700)
        data, logfile = root / "data", root / "postgres.log"
        env = {**os.environ, "LC_ALL": "C", "LANG": "C", "TZ": "UTC"}
        env.pop("PGDATA", None)
        init = subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", user, "--auth=trust", *INITDB_OPTIONS],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            **as_user,
        )
        if init.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-500:]}")
        conf = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(root),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "60",
            "shared_buffers": "32MB",
        }
        for attempt in range(3):  # the free port can be taken between probe and bind
            port = _free_port()
            args = [str(bindir / "postgres"), "-D", str(data), "-p", str(port)]
            for key, value in conf.items():
                args += ["-c", f"{key}={value}"]
            log = open(logfile, "ab")  # closed in finally
            proc = subprocess.Popen(
                args,
                cwd=root,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                **as_user,
            )
            if _wait_ready(proc, bindir, port, user):
                break
            _stop(proc)
            proc = None
            log.close()
            if attempt == 2 or "could not bind" not in _tail(logfile, 5):
                raise PostgresUnavailable(f"postgres did not start:\n{_tail(logfile)}")
        yield f"postgresql://{user}@127.0.0.1:{port}/postgres"
    finally:
        if proc is not None:
            _stop(proc)
        if log is not None:
            log.close()
        shutil.rmtree(root, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen[bytes], bindir: Path, port: int, user: str) -> bool:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        ready = subprocess.run(
            [
                str(bindir / "pg_isready"),
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                user,
                "-t",
                "2",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        if ready.returncode == 0:
            return True
        time.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)  # fast shutdown: disconnect clients, exit cleanly
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def fresh_database(url: str) -> str:
    """Create an empty database on the server at `url`; return its URL."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a PostgreSQL server started for this session; fails (no skip) without one."""
    failure = None
    try:
        find_pg_bindir()
    except PostgresUnavailable:
        # As .ci/run does: Debian's server where we can (its default cluster is not used).
        from tests._support.system import install_debian_packages

        if install_debian_packages("postgresql") is None:
            # The package starts a default cluster we do not use: stop it again.
            for version in sorted(glob.glob("/usr/lib/postgresql/*"), key=_version_key):
                subprocess.run(
                    ["pg_ctlcluster", "--force", Path(version).name, "main", "stop"],
                    capture_output=True,
                    check=False,
                )
    try:
        with postgres_server() as url:
            yield url
    except PostgresUnavailable as exc:
        failure = str(exc)
    if failure is not None:  # outside the except: no chained traceback
        pytest.fail(failure, pytrace=False)
