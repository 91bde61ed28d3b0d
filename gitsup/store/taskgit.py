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
private HEAD, reads each object's header before its content and holds the work to
`ImportLimits`, re-hashes every object it copies (refusing a missing or forged one, and a
tip that does not descend from the baseline), stages each verified object as a loose
object file (a big blob a chunk at a time: never held whole) and moves nothing into the
user's object store unless the whole import is sound. Nothing else from the private dir (other refs,
config, hooks) reaches the user's repository. The supervisor knows the private dir's
path; it never reads the worktree's `.git` file to find it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gitsup.errors import GitsupError
from gitsup.git import GitRepo, ObjectStore, RefConflict
from gitsup.git.objectstore import install_loose, stage_loose
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
# config and hooks it wrote): porcelain status and diff do not look inside submodules, and
# nothing recurses into them. A second line only: the worker's `.gitmodules` can set
# `ignore` per submodule, and `git add -A` looks inside anyway; gitsup/git/nested.py moves
# the nested repositories out when the task ends (docs/sandbox.md, "Nested repositories").
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
    from gitsup.git.hooks import install_hook

    install_hook(hooks, "pre-push", "start")


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


MiB = 1024 * 1024


@dataclass(frozen=True)
class ImportLimits:
    """What one import may bring into the user's repository. Every limit is checked before
    the object is copied: over one, the import is refused and nothing is written.

    `max_object_bytes` (uncompressed; 100 MiB, the size most Git hosts refuse a file at)
    bounds any one object; trees, commits and tags are read whole to follow them, so they
    are held to at most `_MAX_PARSED_BYTES` as well. `max_objects` and `max_bytes` bound
    the new objects and their total uncompressed size, `max_commits` the new commits
    (the history between the baseline and the worker's HEAD), `max_parents` the parents
    of one commit and `max_tree_depth` how deeply trees nest."""

    max_object_bytes: int = 100 * MiB
    max_objects: int = 100_000
    max_bytes: int = 1024 * MiB
    max_commits: int = 10_000
    max_parents: int = 16
    max_tree_depth: int = 256

    # spec key -> git config key (`sup.limits.<name>`)
    CONFIG: ClassVar[dict[str, str]] = {
        "max_object_bytes": "maxObjectBytes",
        "max_objects": "maxObjects",
        "max_bytes": "maxBytes",
        "max_commits": "maxCommits",
        "max_parents": "maxParents",
        "max_tree_depth": "maxTreeDepth",
    }

    @classmethod
    def resolve(cls, repo: GitRepo, given: Mapping[str, int | None]) -> ImportLimits:
        """A value `given` (the task spec's `[limits]`), else `git config sup.limits.<name>`
        (an integer, with an optional k, m or g suffix), else the default."""
        values: dict[str, int] = {}
        for name, key in cls.CONFIG.items():
            value = given.get(name)
            if value is None:
                raw = repo.config_get(f"sup.limits.{key}")
                if raw is not None:
                    value = _config_int(f"sup.limits.{key}", raw)
            if value is not None:
                values[name] = value
        return cls(**values)

    def key(self, name: str) -> str:
        return f"[limits] {name} / sup.limits.{self.CONFIG[name]}"


_MAX_PARSED_BYTES = 16 * MiB
# Blobs up to this size are read whole; bigger ones are copied a chunk at a time.
_STREAM_OVER = 4 * MiB


def _config_int(key: str, raw: str) -> int:
    text = raw.strip().lower()
    scale = {"k": 1024, "m": MiB, "g": 1024 * MiB}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    if not digits.isdigit() or int(digits) < 1:
        raise GitsupError(
            f"git config {key} is {raw!r}: give a positive integer (k, m or g suffix allowed)"
        )
    return int(digits) * scale


class ImportOverLimit(ImportRefused):
    """The work is over one of the import limits (the object and the limit are named)."""


class _Staged:
    """Objects read from the worker's store and verified one at a time, each written as a
    loose object file into a staging directory (none is held in memory whole); moved into
    the user's repository only once the whole import is sound."""

    def __init__(
        self, repo: GitRepo, store: ObjectStore, limits: ImportLimits, staging: Path
    ) -> None:
        self.repo = repo
        self.store = store
        self.limits = limits
        self.staging = staging
        self.objects: list[str] = []  # staged, parents first
        self.bytes = 0
        self.commits = 0
        self.commit_parents: dict[str, list[str]] = {}
        self._seen: set[str] = set()

    def _over(self, what: str, name: str, value: int) -> ImportOverLimit:
        limit = getattr(self.limits, name)
        return ImportOverLimit(
            f"{what} is over the import limit: {value} > {limit} ({self.limits.key(name)}); "
            "nothing was imported, the work stays in the task's Git dir until discard"
        )

    def closure(self, root: str, want: str | None) -> None:
        """Stage every object reachable from `root` that the user's repository lacks.
        An object the user's repository has is taken with everything it reaches."""
        lim = self.limits
        todo: list[tuple[str, str | None, int]] = [(root, want, 0)]
        while todo:
            oid, kind_wanted, depth = todo.pop()
            if oid in self._seen:
                continue
            self._seen.add(oid)
            if self.repo.has_object(oid):
                continue
            try:
                header = self.store.header(oid)
            except GitsupError as exc:
                raise ImportRefused(f"corrupt object in the task's Git dir: {exc.message}") from exc
            if header is None:
                raise ImportRefused(f"object {oid} is missing from the task's Git dir")
            kind, size = header
            if kind_wanted is not None and kind != kind_wanted:
                raise ImportRefused(f"object {oid} is a {kind}, expected a {kind_wanted}")
            if size > lim.max_object_bytes:
                raise self._over(f"{kind} {oid} ({size} bytes)", "max_object_bytes", size)
            if kind != "blob" and size > _MAX_PARSED_BYTES:
                raise ImportOverLimit(
                    f"{kind} {oid} ({size} bytes) is over the {_MAX_PARSED_BYTES}-byte limit "
                    f"of a {kind}; nothing was imported, the work stays in the task's Git dir "
                    "until discard"
                )
            if len(self.objects) + 1 > lim.max_objects:
                raise self._over(
                    f"the work's new objects (at {kind} {oid})",
                    "max_objects",
                    len(self.objects) + 1,
                )
            if self.bytes + size > lim.max_bytes:
                raise self._over(
                    f"the work's new objects' size (at {kind} {oid}, {size} bytes)",
                    "max_bytes",
                    self.bytes + size,
                )
            if kind == "tree" and depth > lim.max_tree_depth:
                raise self._over(f"tree {oid}'s depth", "max_tree_depth", depth)
            data = self._stage(oid, kind, size)
            self.objects.append(oid)
            self.bytes += size
            if kind == "commit":
                assert data is not None
                tree, parents = _parse_commit(oid, data)
                if len(parents) > lim.max_parents:
                    raise self._over(f"commit {oid}'s parents", "max_parents", len(parents))
                self.commits += 1
                if self.commits > lim.max_commits:
                    raise self._over(
                        f"the work's new commits (at commit {oid})", "max_commits", self.commits
                    )
                self.commit_parents[oid] = parents
                todo += [(p, "commit", 0) for p in parents]
                todo.append((tree, "tree", 1))
            elif kind == "tree":
                assert data is not None
                todo += [(e, k, depth + 1) for e, k in _parse_tree(oid, data) if k is not None]
            elif kind == "tag":
                assert data is not None
                todo.append((_parse_tag(oid, data), None, 0))

    def _stage(self, oid: str, kind: str, size: int) -> bytes | None:
        """Copy the object into the staging directory, verified; its content when it is
        one that is followed (a commit, tree or tag)."""
        try:
            if kind == "blob" and size > _STREAM_OVER:
                chunks: Any = self.store.stream_blob(oid, self.repo.common_dir)
                data = None
            else:
                got = self.store.read(oid)
                if got is None:
                    raise ImportRefused(f"object {oid} is missing from the task's Git dir")
                if got[0] != kind:
                    raise ImportRefused(f"object {oid} is a {got[0]}, expected a {kind}")
                data = got[1]
                chunks = (data,)
            stage_loose(kind, size, chunks, oid, self.staging)
        except ImportRefused:
            raise
        except GitsupError as exc:
            if exc.message.startswith("forged object"):
                raise ImportRefused(exc.message) from exc
            raise ImportRefused(f"corrupt object in the task's Git dir: {exc.message}") from exc
        return data

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
        """Move the staged objects into the user's repository, each object after
        everything it refers to: an object there always comes with its closure."""
        objects = self.repo.common_dir / "objects"
        for oid in reversed(self.objects):
            install_loose(self.staging / oid, oid, objects)
        return self.bytes


@contextlib.contextmanager
def _staging(layout: Layout, task: TaskId) -> Iterator[Path]:
    """A fresh staging directory in the task dir (which the worker cannot write, on the
    same file system as the user's objects), removed afterwards whatever happened."""
    d = layout.task_dir(task) / "import.tmp"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def worker_head(layout: Layout, task: TaskId) -> str | None:
    """The commit the worker's HEAD is at in the task's private Git dir (None: no private
    dir, no HEAD, or no commit), read without running anything the worker configured."""
    if not uses_private_dir(layout, task):
        return None
    git = private_dir(layout, task)
    if not (git / "HEAD").is_file():
        return None
    try:
        return GitRepo.open_task(git, None).head_ref()[1]
    except GitsupError:
        return None


def import_work(
    repo: GitRepo,
    layout: Layout,
    task: TaskId,
    baseline: Oid,
    branch: str,
    limits: ImportLimits | None = None,
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
    with _staging(layout, task) as staging:
        staged = _Staged(repo, ObjectStore(git / "objects"), limits or ImportLimits(), staging)
        staged.closure(tip, "commit")
        if not staged.descends(tip, baseline):
            where = ref.removeprefix("refs/heads/") if ref else "a detached HEAD"
            raise ImportRefused(
                f"the worker's {where} ({tip[:12]}) does not descend from the baseline "
                f"{baseline[:12]}"
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


def import_tree(
    repo: GitRepo, layout: Layout, task: TaskId, tree: Oid, limits: ImportLimits | None = None
) -> None:
    """Copy `tree` (e.g. a snapshot of the worktree) and what it reaches from the task's
    private Git dir into the user's repository, verified and bounded like `import_work`."""
    if not uses_private_dir(layout, task):
        return
    with _staging(layout, task) as staging:
        store = ObjectStore(private_dir(layout, task) / "objects")
        staged = _Staged(repo, store, limits or ImportLimits(), staging)
        staged.closure(tree, "tree")
        staged.write()


def remove(layout: Layout, task: TaskId) -> bool:
    git = private_dir(layout, task)
    if not git.exists():
        return False
    shutil.rmtree(git, ignore_errors=True)
    return True
