"""Where the cluster is and how to reach it: `--cluster ADDR` or `sup.cluster.*` config."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gitsup.errors import GitsupError
from gitsup.git import GitRepo

DEFAULT_NAMESPACE = "default"
DEFAULT_HEARTBEAT = 30.0  # seconds without a host's heartbeat before its task moves
_ADDRESS = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")


def require_sdk() -> None:
    """The cluster needs the `cluster` extra; without it a cluster command is bad input.
    Found, not imported: importing Temporal's SDK takes a few tenths of a second, which a
    submission spends while its baseline is pushed (submit.py)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("temporalio") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise GitsupError("the cluster needs Temporal's Python SDK: pip install 'gitsup[cluster]'")


def review_remote(repo: GitRepo) -> str:
    """The review remote every clone of the cluster shares (`sup.reviewRemote`)."""
    remote = repo.config_get("sup.reviewRemote")
    if not remote:
        raise GitsupError(
            "the cluster keeps every task's refs on the review remote, and this clone has none",
            hint="git config sup.reviewRemote <remote> (the gated remote every clone shares)",
        )
    return remote


@dataclass(frozen=True)
class ClusterSettings:
    address: str
    namespace: str = DEFAULT_NAMESPACE
    queue: str = "gitsup"
    heartbeat: float = DEFAULT_HEARTBEAT
    tls_cert: Path | None = None  # the client certificate (mTLS), PEM
    tls_key: Path | None = None  # its private key, PEM
    tls_ca: Path | None = (
        None  # the server's CA, PEM (TLS without a client certificate: this alone)
    )
    tls_server_name: str | None = None
    tls: bool = False

    def describe(self) -> str:
        return f"{self.address} (namespace {self.namespace}, queue {self.queue})"


def _path(repo: GitRepo, key: str) -> Path | None:
    value = repo.config_get(key)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise GitsupError(f"{key}: no such file {path}")
    return path


def check_address(address: str, where: str = "--cluster") -> str:
    if not _ADDRESS.fullmatch(address):
        raise GitsupError(
            f"{where}: not a Temporal frontend address: {address!r}",
            hint="give HOST:PORT, e.g. 127.0.0.1:7233 (`git sup cluster dev` prints it)",
        )
    return address


def load(repo: GitRepo, address: str | None = None) -> ClusterSettings:
    """The cluster a command talks to: `address` (`--cluster`), else `sup.cluster.address`."""
    where = "--cluster"
    if address is None:
        address, where = repo.config_get("sup.cluster.address"), "sup.cluster.address"
    if not address:
        raise GitsupError(
            "no cluster given",
            hint="--cluster HOST:PORT, or `git config sup.cluster.address HOST:PORT`",
        )
    check_address(address, where)
    heartbeat = DEFAULT_HEARTBEAT
    raw = repo.config_get("sup.cluster.heartbeat")
    if raw:
        from gitsup.durations import parse_duration

        try:
            heartbeat = parse_duration(raw)
        except ValueError as exc:
            raise GitsupError(f"sup.cluster.heartbeat: {exc}") from None
        if heartbeat < 1:
            raise GitsupError("sup.cluster.heartbeat: at least 1s")
    cert, key = _path(repo, "sup.cluster.tlsCert"), _path(repo, "sup.cluster.tlsKey")
    if (cert is None) != (key is None):
        raise GitsupError("sup.cluster.tlsCert and sup.cluster.tlsKey go together (mTLS)")
    ca = _path(repo, "sup.cluster.tlsCa")
    tls_flag = (repo.config_get("sup.cluster.tls") or "").lower() in ("true", "yes", "on", "1")
    return ClusterSettings(
        address=address,
        namespace=repo.config_get("sup.cluster.namespace") or DEFAULT_NAMESPACE,
        queue=queue_name(repo),
        heartbeat=heartbeat,
        tls_cert=cert,
        tls_key=key,
        tls_ca=ca,
        tls_server_name=repo.config_get("sup.cluster.tlsServerName") or None,
        tls=tls_flag or cert is not None or ca is not None,
    )


def queue_name(repo: GitRepo) -> str:
    """The task queue of this repository: `sup.cluster.queue`, else `gitsup` (set one per
    repository when one cluster serves several)."""
    name = repo.config_get("sup.cluster.queue") or "gitsup"
    if not re.fullmatch(r"[A-Za-z0-9._\-/]{1,200}", name):
        raise GitsupError(f"sup.cluster.queue: not a queue name: {name!r}")
    return name
