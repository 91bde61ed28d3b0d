"""`git sup env warm`: fill the shared package caches from the environment recipe
(docs/environments.md). The recipe's setup runs on the main checkout's HEAD in a throw-away
worktree, confined as a candidate's checks are (gitsup/verification/confined.py), with a copy
of the current shared layer as its cache; when every command passed, that copy replaces the
shared layer. Tasks only ever read copies of it. Returns data; the CLI prints it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gitsup.environment import setup as envsetup
from gitsup.environment.recipe import ENVIRONMENT_FILE, load_recipe
from gitsup.errors import GitsupError
from gitsup.integration.keys import protected_paths
from gitsup.store.suprepo import SupRepo
from gitsup.verification.confined import ConfinedChecks, Setup, SetupFailed


def warm(ctx: SupRepo, *, say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Run the recipe's setup with the caches writable and publish them. GitsupError (exit 2)
    when there is nothing to warm; SetupFailed (exit 4) when a command failed (the shared
    layer is then left as it was)."""
    repo = ctx.repo
    recipe = load_recipe(repo.main_workdir)
    hint = f"name them in {ENVIRONMENT_FILE} (docs/environments.md)"
    if not recipe.setup:
        raise GitsupError(
            f"nothing to warm: {ENVIRONMENT_FILE} has no [environment] setup", hint=hint
        )
    if not recipe.cache:
        raise GitsupError(
            f"nothing to warm: {ENVIRONMENT_FILE} names no [environment] cache "
            f"({', '.join(envsetup.CACHES)})",
            hint=hint,
        )
    setup = Setup.of(recipe, repo.common_dir)
    assert setup is not None
    commit = repo.head_commit()
    t0 = time.monotonic()
    with (
        _locked(setup.shared),
        ConfinedChecks(
            repo,
            prefix=f"gitsup-warm-{os.getpid()}-",
            marker="env-warm",
            label="warm",
            protect=protected_paths(repo),
        ) as box,
    ):
        say(f"warming {', '.join(k.name for k in setup.caches)} on {commit[:12]}")
        try:
            box.run(commit, [], say=say, setup=setup)
        except SetupFailed as exc:
            exc.hint = "the shared caches are unchanged; fix the setup and warm again"
            raise
        assert box.setup_cache is not None
        caches: dict[str, Any] = {}
        for kind in setup.caches:
            staged = box.setup_cache / kind.name
            before = envsetup.tree_bytes(setup.shared / kind.name)
            published = envsetup.publish_caches(box.setup_cache, setup.shared, [kind])
            caches[kind.name] = {
                "path": str(setup.shared / kind.name),
                "bytes": published,
                "bytes_before": before,
            }
            say(f"cache {kind.name}: {published} bytes (was {before}) from {staged}")
        report = dict(box.setup_report)
    return {
        "passed": True,
        "commit": commit,
        "commands": report.get("commands", []),
        "egress": report.get("egress", []),
        "setup_seconds": report.get("duration", 0.0),
        "seconds": round(time.monotonic() - t0, 3),
        "caches": caches,
    }


@contextlib.contextmanager
def _locked(shared: Path) -> Iterator[None]:
    """One warm at a time per repository."""
    shared.mkdir(parents=True, exist_ok=True)
    with open(shared / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GitsupError(
                "another `git sup env warm` is filling the caches of this repository",
                hint="wait for it, then warm again if needed",
            ) from None
        yield
