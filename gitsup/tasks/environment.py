"""`git sup env show`: a repository's environment recipe and what it resolves to on this host
(docs/environments.md). Returns data; the CLI prints it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gitsup.environment import include
from gitsup.environment.recipe import ENVIRONMENT_FILE, load_recipe
from gitsup.git import GitRepo
from gitsup.spec import TaskSpec
from gitsup.store.suprepo import SupRepo, worktree_root


def show(ctx: SupRepo, spec: TaskSpec | None = None) -> dict[str, Any]:
    """The recipe from the main checkout's `.gitsup/environment.toml` with `spec`'s
    `[environment]` over it, and per include entry: present or missing in the main checkout,
    its size, and how a task started now would get it (overlay, reflink or copy); the refused
    entries and why."""
    from gitsup.host.sandbox import probe, protected_globs, resolve_mode
    from gitsup.integration.keys import protected_paths

    main_root = ctx.repo.main_workdir
    recipe = load_recipe(main_root, spec.environment if spec is not None else None)
    mode = resolve_mode(
        spec.sandbox.mode if spec is not None else None, ctx.repo.config_get("sup.sandbox")
    )
    mountns = mode != "off" and probe().mountns
    overlay = mountns and include.overlay_available()
    home = os.environ.get("HOME") or os.path.expanduser("~")
    res = include.resolve(
        GitRepo.open(main_root), recipe, protected_globs(home, protected_paths(ctx.repo))
    )
    dest = _existing(worktree_root(ctx))
    entries: list[dict[str, Any]] = []
    for src in res.sources:
        if src.kind == "missing":
            entries.append({"path": src.path, "present": False, "method": "missing"})
            continue
        size, files = include.tree_size(src.source)
        if src.kind == "dir" and overlay:
            method = "overlay"
        else:
            method = "reflink" if include.can_clone(src.source, dest) else "copy"
        entries.append(
            {
                "path": src.path,
                "present": True,
                "kind": src.kind,
                "source": src.source,
                "bytes": size,
                "files": files,
                "method": method,
            }
        )
    file = main_root / ENVIRONMENT_FILE
    return {
        "file": str(file) if file.is_file() else None,
        "recipe": recipe.to_data(),
        "sandbox": {"mode": mode, "mount_ns": mountns, "overlayfs": overlay},
        "include": entries,
        "refused": res.refused,
    }


def _existing(path: Path) -> Path:
    """`path`, or its nearest existing parent (where a worktree would be made)."""
    while not path.is_dir() and path.parent != path:
        path = path.parent
    return path
