"""A throw-away PostgreSQL server for tests, from the Debian server binaries.

It runs in a fresh data directory under a temp dir, listens on a free
loopback port (and a unix socket in the same temp dir), trusts local
connections, and skips fsync: it is fast, private to the test run, and gone
afterwards. PostgreSQL refuses to run as root, so when the tests run as root
the server runs as the ``postgres`` system user, which owns the temp dir.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Sequence

INSTALL_HINT = "install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql)"
_SERVER_SETTINGS = (
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
    "-c listen_addresses=127.0.0.1 -c max_connections=100"
)


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are missing or the server did not start."""


def find_bin_dir() -> Path:
    """The directory of ``initdb``/``pg_ctl``: ``FLOE_PG_BINDIR``, Debian's layout, or the PATH."""
    configured = os.environ.get("FLOE_PG_BINDIR")
    candidates = [configured] if configured else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major_version, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    raise PostgresUnavailable(f"PostgreSQL server binaries (initdb, pg_ctl) not found: {INSTALL_HINT}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """Start with :meth:`start` (or ``with``), connect with :meth:`uri`, :meth:`stop` at the end."""

    def __init__(self, bin_dir: Optional[Path] = None, user: str = "postgres") -> None:
        self.bin_dir = bin_dir or find_bin_dir()
        self.superuser = "postgres"
        self._run_as = _run_as_prefix(user)
        self._owner = user if self._run_as else None
        self.port = 0
        self.base: Optional[Path] = None

    @property
    def data_dir(self) -> Path:
        assert self.base is not None, "server not started"
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        assert self.base is not None, "server not started"
        return self.base / "socket"

    def start(self) -> PostgresServer:
        self.base = Path(tempfile.mkdtemp(prefix="floe-pg-"))
        self.socket_dir.mkdir()
        if self._owner:
            _chown_tree(self.base, self._owner)
        self.port = free_port()
        try:
            self._pg(["initdb", "-D", str(self.data_dir), "-U", self.superuser, "-A", "trust",
                      "-E", "UTF8", "--no-sync", "--no-instructions"])
            self.resume()
        except PostgresUnavailable:
            self.stop()
            raise
        return self

    def require_tls(self, cert: Path, key: Path) -> None:
        """Serve TLS with ``cert`` and ``key`` and refuse every TCP connection without it (``hostssl`` alone;
        the unix socket stays open to the tests). Restarts the server."""
        for source, name in ((cert, "server.crt"), (key, "server.key")):
            target = self.data_dir / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            if self._owner:
                entry = pwd.getpwnam(self._owner)
                os.chown(target, entry.pw_uid, entry.pw_gid)
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
        (self.data_dir / "pg_hba.conf").write_text("local all all trust\nhostssl all all 127.0.0.1/32 trust\n")
        self.halt()
        self.resume()

    def halt(self) -> None:
        """A fast shutdown that keeps the data: open transactions roll back, clients are cut off."""
        self._pg(["pg_ctl", "stop", "-w", "-t", "60", "-m", "fast", "-D", str(self.data_dir)])

    def resume(self) -> None:
        """Start a halted server again on the same port and data."""
        options = f"-p {self.port} -k {self.socket_dir} {_SERVER_SETTINGS}"
        self._pg(["pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data_dir),
                  "-l", str(self.data_dir.parent / "server.log"), "-o", options])

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its files; safe to call twice."""
        if self.base is None:
            return
        try:
            if (self.data_dir / "postmaster.pid").exists():
                self._pg(["pg_ctl", "stop", "-w", "-t", "60", "-m", "fast", "-D", str(self.data_dir)])
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    def uri(self, database: str = "postgres") -> str:
        return f"postgresql://{self.superuser}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database; its URI."""
        import psycopg

        with psycopg.connect(self.uri(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.uri(name)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pg(self, argv: Sequence[str]) -> None:
        command = [*self._run_as, str(self.bin_dir / argv[0]), *argv[1:]]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.base)
        if result.returncode != 0:
            raise PostgresUnavailable(
                f"{argv[0]} failed with exit code {result.returncode}:\n{result.stdout}\n{result.stderr}\n"
                f"{self._log_tail()}"
            )

    def _log_tail(self) -> str:
        log = (self.base / "server.log") if self.base else None
        if log is None or not log.exists():
            return ""
        return "server log:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:])


def _run_as_prefix(user: str) -> list[str]:
    """``runuser -u <user> --`` when running as root, which PostgreSQL refuses."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(user)
    except KeyError as e:
        raise PostgresUnavailable(f"system user {user!r} does not exist: {INSTALL_HINT}") from e
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailable("running as root needs 'runuser' (util-linux) to start PostgreSQL as another user")
    return [runuser, "-u", user, "--"]


def _chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)


def _major_version(path: str) -> int:
    parts = Path(path).parts
    return int(parts[-2]) if len(parts) >= 2 and parts[-2].isdigit() else -1
