"""A task's private Git dir, and the supervisor's verified import of the worker's work.

A linked worktree shares refs, config, hooks, notes and the object store with the
user's repository. A task's worktree is instead connected to a private Git dir,
`$GIT_COMMON_DIR/sup/tasks/<id>/git`:

- objects: new ones land in its own `objects/`; the user's objects are read through
  `objects/info/alternates`;
- refs: `HEAD` -> `refs/heads/sup/<id>` at the baseline, plus a `packed-refs` snapshot of
  the user's branches and tags (so `git log main` works inside the task);
- config: minimal (identity copied from the user's repository, no remotes, no credential
  helpers; `core.hooksPath` is its own `hooks/`, holding only gitsup's push gate);
- index: the worktree's index, moved there from the worktree's registration.

The worktree's `.git` file points at the private dir; the user's repository keeps the
worktree's registration (`$GIT_COMMON_DIR/worktrees/<name>`, whose `gitdir` still names
the worktree's `.git`), so `git worktree list`, prune, the pool and discard work as before.

The supervisor imports the worker's work into the user's `sup/<id>`: it follows the
private HEAD, re-hashes every object it copies (refusing a missing or forged one, and a
tip that does not descend from the baseline) and writes nothing into the user's object
store unless the whole import is sound. Nothing else from the private dir (other refs,
config, hooks) reaches the user's repository. The supervisor knows the private dir's
path; it never reads the worktree's `.git` file to find it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gitsup.errors import GitsupError
from gitsup.git import GitRepo, ObjectStore, RefConflict
from gitsup.ids import Oid, TaskId
from gitsup.layout import TASK_GIT_SHELL, Layout

# Copied from the user's configuration so the worker's commits and checkout behave alike.
_COPIED_CONFIG = (
    "user.name",
    "user.email",
    "core.filemode",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.autocrlf",
    "core.eol",
)
_GITLINK = b"160000"
_TREE_MODES = (b"40000", b"040000")


class ImportRefused(GitsupError):
    """The worker's work could not be imported; nothing was written to the user's repo."""


@dataclass(frozen=True)
class Imported:
    ref: str | None  # the ref the worker's HEAD names (None: detached)
    tip: Oid  # the worker's commit that the task branch now points at
    previous: Oid | None  # the task branch before the import
    objects: int  # objects copied into the user's repository
    bytes: int

    @property
    def moved(self) -> bool:
        return self.previous != self.tip


_MARKER = "private-git"


def private_dir(layout: Layout, task: TaskId) -> Path:
    return layout.task_git_dir(task)


def uses_private_dir(layout: Layout, task: TaskId) -> bool:
    """Was the task made with a private Git dir? Told by a marker next to it (in the task
    dir, which the worker cannot write), so a worker that deletes its private dir, or its
    HEAD, is refused rather than taken for a task made before private dirs existed."""
    return (layout.task_dir(task) / _MARKER).exists()


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".gitsup-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def create(
    repo: GitRepo, layout: Layout, task: TaskId, worktree: Path, branch: str, baseline: Oid
) -> Path:
    """Make the task's private Git dir and connect `worktree` (a fresh linked worktree of
    `repo`, checked out at `baseline`) to it. Returns the private dir."""
    git = private_dir(layout, task)
    gitfile = worktree / ".git"
    registration = Path(gitfile.read_text().strip().removeprefix("gitdir:").strip())
    if not registration.is_absolute():
        registration = (worktree / registration).resolve()
    common = repo.common_dir
    for d in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        (git / d).mkdir(parents=True, exist_ok=True)
    (git / "objects" / "info" / "alternates").write_text(f"{common / 'objects'}\n")
    branch_ref = f"refs/heads/{branch}"
    (git / "HEAD").write_text(f"ref: {branch_ref}\n")
    own = git / branch_ref
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text(f"{baseline}\n")
    packed = ["# pack-refs with: sorted \n"]
    for name, target in repo.direct_refs(("refs/heads/", "refs/tags/")):
        if name != branch_ref:
            packed.append(f"{target} {name}\n")
    (git / "packed-refs").write_text("".join(packed))
    src = common / "shallow"
    if src.is_file():
        shutil.copyfile(src, git / "shallow")
    index = registration / "index"
    if index.is_file():
        os.replace(index, git / "index")
    (layout.task_dir(task) / _MARKER).write_text(f"{git}\n")
    seal(repo, layout, task, worktree)
    _write(gitfile, f"gitdir: {git}\n")
    return git


# --- the shell: what of the private Git dir only gitsup writes ------------------------------

# Settings that keep Git out of a nested repository the worker left in its worktree (whose
# config and hooks it wrote): porcelain status, diff and checkout do not look inside
# submodules, and nothing recurses into them. Partial: the worker's `.gitmodules` can set
# `ignore` per submodule, and `git add -A` looks inside anyway (docs/sandbox.md, Limits).
_SUBMODULES_OFF = {
    "diff": ["\tignoreSubmodules = all"],
    "status": ["\tsubmoduleSummary = false"],
    "submodule": ["\trecurse = false"],
    "fetch": ["\trecurseSubmodules = false"],
}
# Read by Git from a Git dir, never written by gitsup: legacy remote definitions, and the
# per-worktree config (read only with extensions.worktreeConfig, which the shell never sets).
_NEVER_THERE = ("remotes", "branches", "config.worktree")
_SEAL = "git-seal"


def _shell_config(repo: GitRepo, git: Path, worktree: Path) -> str:
    config = [
        "[core]",
        "\trepositoryformatversion = 0",
        "\tbare = false",
        "\tlogallrefupdates = true",
        f"\tworktree = {_quote(str(worktree))}",
        f"\thooksPath = {_quote(str(git / 'hooks'))}",
    ]
    sections: dict[str, list[str]] = {}
    for key in _COPIED_CONFIG:
        value = repo.config_get(key)
        if value is not None:
            section, name = key.split(".", 1)
            sections.setdefault(section, []).append(f"\t{name} = {_quote(value)}")
    protected = repo.config_get_all("sup.protected")
    if protected:  # what `git sup policy` inside the task reads
        sections["sup"] = [f"\tprotected = {_quote(b)}" for b in protected]
    fmt = repo.config_get("extensions.objectformat")
    if fmt is not None:
        config[1] = "\trepositoryformatversion = 1"
        sections.setdefault("extensions", []).append(f"\tobjectformat = {_quote(fmt)}")
    for section, lines in _SUBMODULES_OFF.items():
        sections.setdefault(section, []).extend(lines)
    config += sections.pop("core", [])
    for section, lines in sections.items():
        config += [f"[{section}]", *lines]
    return "\n".join(config) + "\n"


def _clear(path: Path) -> None:
    """Remove whatever is at `path` (a file, a symlink, a tree), following no link."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def seal(repo: GitRepo, layout: Layout, task: TaskId, worktree: Path) -> Path:
    """(Re)write the shell of the task's private Git dir: `config`, `commondir`, `hooks/`
    and `info/`, the parts of a Git dir that decide what Git executes (drivers, hooks,
    fsmonitor, pager, editor, aliases, includes, attributes). The sandbox binds each
    read-only over itself (layout.TASK_GIT_SHELL), so only gitsup writes them and the
    person's `git` in the task worktree reads only gitsup's settings. `commondir` names the
    dir itself: without it a worker could plant one and move Git's config elsewhere.
    Removes the legacy remote definitions and `config.worktree` a worker may have left.
    Records a digest of the shell next to the dir (`is_sealed`). Returns the dir."""
    git = private_dir(layout, task)
    common = repo.common_dir
    config = _shell_config(repo, git, worktree)
    if _as_written(layout, task, git, config, common):
        return git
    for name in _NEVER_THERE:
        _clear(git / name)
    for name in ("hooks", "info"):
        _clear(git / name)
        (git / name).mkdir()
    src = common / "info" / "exclude"
    if src.is_file():
        shutil.copyfile(src, git / "info" / "exclude")
    _install_gate(git / "hooks")
    for name, text in (
        ("commondir", f"{git}\n"),
        ("config", config),
    ):
        _write_fresh(git / name, text)
    _write(layout.task_dir(task) / _SEAL, _shell_digest(git) + "\n")
    return git


def _as_written(layout: Layout, task: TaskId, git: Path, config: str, common: Path) -> bool:
    """Is the shell what `seal` would write now (nothing to do)?"""
    from gitsup.git.hooks import launcher

    def text(p: Path) -> str | None:
        try:
            return p.read_text()
        except (OSError, UnicodeDecodeError):
            return None

    return (
        is_sealed(layout, task)
        and text(git / "config") == config
        and text(git / "commondir") == f"{git}\n"
        and text(git / "info" / "exclude") == text(common / "info" / "exclude")
        and text(git / "hooks" / "pre-push") == launcher("pre-push", "start")
    )


def _write_fresh(path: Path, text: str) -> None:
    """Replace `path` with a new file holding `text`, through a temporary file this call
    creates itself (never one a worker planted, a symlink, say)."""
    tmp = path.with_name(path.name + ".gitsup-tmp")
    _clear(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    os.replace(tmp, path)


def _shell_digest(git: Path) -> str:
    h = hashlib.sha256()
    for name in (*TASK_GIT_SHELL, *_NEVER_THERE):
        top = git / name
        paths = [top]
        if top.is_dir() and not top.is_symlink():
            paths += sorted(top.rglob("*"))
        for p in paths:
            h.update(os.fsencode(p.relative_to(git)) + b"\0")
            if p.is_symlink():
                h.update(b"link\0" + os.fsencode(os.readlink(p)))
            elif p.is_file():
                h.update(b"file %d\0" % (os.stat(p).st_mode & 0o111) + p.read_bytes())
            elif p.is_dir():
                h.update(b"dir\0")
            else:
                h.update(b"absent\0")
    return h.hexdigest()


def is_sealed(layout: Layout, task: TaskId) -> bool:
    """Is the shell of the task's private Git dir as gitsup last wrote it? False for a
    task made by a gitsup that let the worker write it (no digest recorded), and for one
    whose shell changed since (a sandbox without a mount namespace cannot hold it)."""
    try:
        recorded = (layout.task_dir(task) / _SEAL).read_text().strip()
    except OSError:
        return False
    return recorded == _shell_digest(private_dir(layout, task))


def _install_gate(hooks: Path) -> None:
    """The private hooks dir holds only gitsup's own client-side push gate (defence in
    depth: a push from inside the task is refused before it leaves); none of the user's
    hooks run in the task, and nothing there ever runs on the user's side."""
    try:
        from gitsup.git.hooks import install_hook  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return
    install_hook(hooks, "pre-push", "start")  # type: ignore[no-untyped-call,unused-ignore]


def open_worktree(layout: Layout, task: TaskId, worktree: Path) -> GitRepo:
    """The task's worktree with its Git state: the private dir when there is one (found
    by path, not through the worktree's `.git` file), else the linked worktree itself."""
    if uses_private_dir(layout, task):
        return GitRepo.open_task(private_dir(layout, task), worktree)
    return GitRepo.open(worktree)


# --- import ------------------------------------------------------------------------------


def _parse_commit(oid: str, data: bytes) -> tuple[str, list[str]]:
    tree = ""
    parents: list[str] = []
    for line in data.split(b"\n"):
        if not line:
            break
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value.decode("ascii", "replace")
        elif key == b"parent":
            parents.append(value.decode("ascii", "replace"))
    if not _is_hex(tree) or not all(_is_hex(p) for p in parents):
        raise ImportRefused(f"commit {oid} is malformed")
    return tree, parents


def _parse_tree(oid: str, data: bytes) -> list[tuple[str, str | None]]:
    """(object id, kind: 'tree', 'blob' or None for a submodule commit) of each entry."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(data):
        sp = data.find(b" ", i)
        nul = data.find(b"\0", sp + 1) if sp >= 0 else -1
        if sp < 0 or nul < 0 or nul + 21 > len(data):
            raise ImportRefused(f"tree {oid} is malformed")
        mode = data[i:sp]
        entry = data[nul + 1 : nul + 21].hex()
        i = nul + 21
        if mode == _GITLINK:
            out.append((entry, None))
        elif mode in _TREE_MODES:
            out.append((entry, "tree"))
        else:
            out.append((entry, "blob"))
    return out


def _parse_tag(oid: str, data: bytes) -> str:
    for line in data.split(b"\n"):
        if line.startswith(b"object "):
            target = line[7:].decode("ascii", "replace")
            if _is_hex(target):
                return target
    raise ImportRefused(f"tag {oid} is malformed")


def _is_hex(s: str) -> bool:
    return len(s) == 40 and all(c in "0123456789abcdef" for c in s)


def _object_id(kind: str, data: bytes) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"{kind} {len(data)}\0".encode())
    h.update(data)
    return h.hexdigest()


class _Staged:
    """Objects read from the worker's store and verified, not yet written anywhere."""

    def __init__(self, repo: GitRepo, store: ObjectStore) -> None:
        self.repo = repo
        self.store = store
        self.objects: list[tuple[str, str, bytes]] = []  # (oid, kind, data), parents first
        self.commit_parents: dict[str, list[str]] = {}
        self._seen: set[str] = set()

    def closure(self, root: str, want: str | None) -> None:
        """Stage every object reachable from `root` that the user's repository lacks.
        An object the user's repository has is taken with everything it reaches."""
        todo: list[tuple[str, str | None]] = [(root, want)]
        while todo:
            oid, kind_wanted = todo.pop()
            if oid in self._seen:
                continue
            self._seen.add(oid)
            if self.repo.has_object(oid):
                continue
            try:
                got = self.store.read(oid)
            except GitsupError as exc:
                raise ImportRefused(f"corrupt object in the task's Git dir: {exc.message}") from exc
            if got is None:
                raise ImportRefused(f"object {oid} is missing from the task's Git dir")
            kind, data = got
            if kind_wanted is not None and kind != kind_wanted:
                raise ImportRefused(f"object {oid} is a {kind}, expected a {kind_wanted}")
            actual = _object_id(kind, data)
            if actual != oid:
                raise ImportRefused(
                    f"forged object in the task's Git dir: {oid} holds content hashing to {actual}"
                )
            self.objects.append((oid, kind, data))
            if kind == "commit":
                tree, parents = _parse_commit(oid, data)
                self.commit_parents[oid] = parents
                todo += [(p, "commit") for p in parents]
                todo.append((tree, "tree"))
            elif kind == "tree":
                todo += [(e, k) for e, k in _parse_tree(oid, data) if k is not None]
            elif kind == "tag":
                todo.append((_parse_tag(oid, data), None))

    def descends(self, tip: str, baseline: str) -> bool:
        """Does `tip` reach `baseline` through parents (staged ones, then the user's)?"""
        todo = [tip]
        seen: set[str] = set()
        while todo:
            c = todo.pop()
            if c == baseline:
                return True
            if c in seen:
                continue
            seen.add(c)
            if c in self.commit_parents:
                todo += self.commit_parents[c]
            elif self.repo.has_object(c) and self.repo.is_ancestor(Oid(baseline), Oid(c)):
                return True
        return False

    def write(self) -> int:
        """Write the staged objects into the user's repository, each object after
        everything it refers to: an object there always comes with its closure."""
        size = 0
        for oid, kind, data in reversed(self.objects):
            written = self.repo.write_object(kind, data)
            if written != oid:
                raise ImportRefused(f"object {oid} was stored as {written}")
            size += len(data)
        return size


def import_work(
    repo: GitRepo, layout: Layout, task: TaskId, baseline: Oid, branch: str
) -> Imported | None:
    """Move the user's `branch` to the commit the worker's HEAD is at, after copying and
    verifying every object it needs. None when the task has no private Git dir."""
    if not uses_private_dir(layout, task):
        return None
    git = private_dir(layout, task)
    if not (git / "HEAD").is_file():
        raise ImportRefused(f"the task's Git dir {git} has no HEAD")
    try:
        ref, tip = GitRepo.open_task(git, None).head_ref()
    except GitsupError as exc:
        raise ImportRefused(f"cannot read the worker's HEAD: {exc.message}") from exc
    if tip is None:
        raise ImportRefused(f"the worker's HEAD ({ref}) has no commit")
    staged = _Staged(repo, ObjectStore(git / "objects"))
    staged.closure(tip, "commit")
    if not staged.descends(tip, baseline):
        where = ref.removeprefix("refs/heads/") if ref else "a detached HEAD"
        raise ImportRefused(
            f"the worker's {where} ({tip[:12]}) does not descend from the baseline {baseline[:12]}"
        )
    size = staged.write()
    name = f"refs/heads/{branch}"
    previous = repo.ref_target(name)
    if previous != tip:
        try:
            repo.update_ref(name, tip, old=previous, message="gitsup: import the worker's commits")
        except RefConflict as exc:
            raise ImportRefused(f"{branch} could not be updated: {exc.message}") from exc
    return Imported(ref, tip, previous, len(staged.objects), size)


def import_tree(repo: GitRepo, layout: Layout, task: TaskId, tree: Oid) -> None:
    """Copy `tree` (e.g. a snapshot of the worktree) and what it reaches from the task's
    private Git dir into the user's repository, verified like `import_work`."""
    if not uses_private_dir(layout, task):
        return
    staged = _Staged(repo, ObjectStore(private_dir(layout, task) / "objects"))
    staged.closure(tree, "tree")
    staged.write()


def remove(layout: Layout, task: TaskId) -> bool:
    git = private_dir(layout, task)
    if not git.exists():
        return False
    shutil.rmtree(git, ignore_errors=True)
    return True
