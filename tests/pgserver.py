"""A real PostgreSQL server for tests: a throwaway cluster of Debian's `postgresql` binaries on 127.0.0.1.

`postgres_server(bindir)` yields a `postgresql://user:password@127.0.0.1:<port>/<db>` URI for a
database owned by a password-authenticated, non-superuser role, like the one argo/mlflow.yaml's
Secret names. PostgreSQL refuses to run as root, so under root the cluster runs as `postgres`.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.s3server import free_port

INSTALL_HINT = "apt-get install postgresql"
SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
# The database superuser authenticates only over the cluster's private Unix socket (trust).
ADMIN = "admin"


def find_bindir() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres (newest Debian version first), or None."""
    candidates = [Path(p) for p in [os.environ.get("PG_BINDIR", "")] if p]
    # Debian keeps the server binaries off PATH, under /usr/lib/postgresql/<major>/bin.
    debian = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(debian, key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.name)], reverse=True)
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).resolve().parent)
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in SERVER_BINARIES):
            return directory
    return None


def _owner() -> str | None:
    """The account the cluster runs as: None (ourselves), or Debian's `postgres` user under root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name).pw_name
        except KeyError:
            continue
    raise RuntimeError("running as root, but neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL as")


def _run(argv: list[str], owner: str | None, base: Path) -> None:
    """Run a PostgreSQL tool as `owner`; on failure raise with the tail of every log in `base`."""
    done = subprocess.run(argv, capture_output=True, text=True, user=owner, cwd="/", check=False)
    if done.returncode != 0:
        logs = "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(base.glob("*.log")))
        raise RuntimeError(
            f"{' '.join(argv)} exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}{logs}"
        )


def _initdb(bindir: Path, data: Path, owner: str | None, base: Path) -> None:
    """Create the cluster in `data`: the superuser trusted on the Unix socket, passwords over TCP."""
    flags = ["-E", "UTF8", "--locale=C", "--no-sync", "--auth-local=trust", "--auth-host=scram-sha-256"]
    _run([str(bindir / "initdb"), "-D", str(data), "-U", ADMIN, *flags], owner, base)


def _start(bindir: Path, data: Path, port: int, owner: str | None, base: Path) -> None:
    """Start the cluster on 127.0.0.1:`port` with its socket in `base`; wait until it accepts connections."""
    # Durability is irrelevant for a throwaway cluster; fsync off keeps MLflow's migrations fast.
    options = f"-h 127.0.0.1 -p {port} -k {base} -c fsync=off -c full_page_writes=off"
    log = str(base / "postgres.log")
    _run([str(bindir / "pg_ctl"), "-D", str(data), "-l", log, "-o", options, "-w", "-t", "60", "start"], owner, base)


def _stop(bindir: Path, data: Path, owner: str | None, base: Path) -> None:
    """Stop the cluster: fast shutdown, or immediate if that fails."""
    stop = [str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "30", "stop", "-m"]
    try:
        _run([*stop, "fast"], owner, base)
    except RuntimeError:
        _run([*stop, "immediate"], owner, base)


def _create_database(base: Path, port: int, database: str, user: str, password: str) -> None:
    """As the superuser over the Unix socket: a login role `user` and a `database` it owns."""
    import psycopg
    from psycopg import sql

    # autocommit: CREATE DATABASE cannot run inside a transaction.
    with psycopg.connect(host=str(base), port=port, user=ADMIN, dbname="postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(user), sql.Literal(password)))
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(user)))


@contextmanager
def postgres_server(bindir: Path, database: str = "mlflow", user: str = "mlflow") -> Iterator[str]:
    """initdb + start a cluster on a free loopback port; yield the URI of `database`; stop and delete it."""
    owner = _owner()
    # Not pytest's tmp_path (nor a TMPDIR): their parents may be private to root, and `postgres` must reach
    # the directory. A short path also keeps the Unix socket under its 107-byte limit.
    base = Path(tempfile.mkdtemp(prefix="paddle-mlops-pg-", dir="/tmp" if owner else None))
    if owner:
        shutil.chown(base, owner)
    data, port = base / "data", free_port()
    password = secrets.token_hex(12)
    started = False
    try:
        _initdb(bindir, data, owner, base)
        _start(bindir, data, port, owner, base)
        started = True
        _create_database(base, port, database, user, password)
        yield f"postgresql://{user}:{password}@127.0.0.1:{port}/{database}"
    finally:
        if started:
            _stop(bindir, data, owner, base)
        shutil.rmtree(base, ignore_errors=True)
