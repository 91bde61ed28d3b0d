"""What the allow list judges against (`AllowState`): the policy, the worktree, the working
directories a command may run in, and, when the task's kernel sandbox is enforced, the sandboxed
mode (`SandboxedMode`, passed in by the classifier); it decides whether a path stays inside the
worktree (always, for the sandboxed mode's reads: `AllowState.reading`)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Protocol

from gitsup.policy.config import Policy
from gitsup.policy.decision import Decision
from gitsup.policy.normalise.expand import (
    UNKNOWN,
    Expander,
    has_glob,
    inside,
    may_match,
    names_git_dir,
    normal_form,
    resolve,
)
from gitsup.policy.parse.script import Part, Word


class SandboxedMode(Protocol):
    """What the sandboxed mode (docs/policy.md, "Sandboxed mode") adds to the allow list: each
    method returns a decision, or None for no opinion (the caller asks). The allow judges call it
    only through `AllowState.sandbox`; the classifier passes it in (`allow/mode.py`)."""

    def program(
        self, argv: list[str], st: AllowState, src: str, part: Part | None
    ) -> Decision | None: ...

    def path_program(self, part: Part, st: AllowState) -> Decision | None: ...

    def expanded_part(self, part: Part, first: Word, st: AllowState) -> Decision | None: ...

    def read_anywhere(
        self, prog: str, args: list[str], st: AllowState, src: str
    ) -> Decision | None: ...

    def sed_edit(self, args: list[str], st: AllowState, src: str) -> Decision | None: ...

    def git_worktree_op(
        self, sub: str, args: list[str], st: AllowState, src: str
    ) -> Decision | None: ...


@dataclass(slots=True, init=False)
class AllowState:
    policy: Policy
    worktree: str
    home: str
    cwds: set[str]  # where the part being judged may run (the worktree until a `cd`)
    sandboxed: bool  # the task's kernel sandbox is enforced (docs/policy.md, "Sandboxed mode")
    sandbox: SandboxedMode | None  # the sandboxed mode's judges, when `sandboxed`
    dotglob: bool
    reads_anywhere: bool  # every path counts as inside: a read the kernel confines (`reading`)
    _root_only: bool = field(repr=False)  # the worktree is in its normal form
    _expander: Expander | None = field(repr=False)

    def __init__(
        self,
        policy: Policy,
        worktree: str,
        home: str,
        sandbox: SandboxedMode | None = None,
        dotglob: bool = False,
    ) -> None:
        # written out (not generated): one state per question, built without default factories
        self.policy = policy
        self.worktree = worktree
        self.home = home
        self.cwds = {worktree}
        self.sandboxed = sandbox is not None
        self.sandbox = sandbox
        self.dotglob = dotglob
        self.reads_anywhere = False
        self._root_only = normal_form(worktree) == worktree
        self._expander = None

    def expander(self) -> Expander:
        """The plain-form expander (no variables), one per state."""
        ex = self._expander
        if ex is None:
            ex = self._expander = Expander({}, self.home, self.worktree)
        return ex

    def reading(self) -> AllowState:
        """The same state with every path readable: in the sandboxed mode the kernel decides
        what the task may read."""
        r = AllowState.__new__(AllowState)
        for name in AllowState.__slots__:
            setattr(r, name, getattr(self, name))
        r.reads_anywhere = True
        return r

    def path_inside(self, value: str) -> bool:
        if self.reads_anywhere:
            return True
        if value in ("/dev/null", "-", ""):
            return True
        if UNKNOWN in value:
            return False
        # glob components that can match `..` escape W (sandboxed: bash rules, where only a
        # pattern starting with `.` can match `..`; otherwise any pattern that fnmatches it)
        if not has_glob(value):
            if (
                self._root_only
                and value[0] != "/"
                and ".." not in value
                and len(self.cwds) == 1
                and self.worktree in self.cwds
            ):
                return True  # relative, without `..`: it stays below W
            return all(inside(resolve(value, cwd), self.worktree) for cwd in self.cwds)
        dots = _dotdot_sandboxed if self.sandboxed else _dotdot
        for cwd in self.cwds:
            p = resolve(value, cwd)
            if not inside(p, self.worktree):
                return False
            rel = p[len(self.worktree) :]
            if any(dots(c) for c in rel.split("/")):
                return False
        return not any(dots(c) for c in value.split("/"))

    def in_git_dir(self, value: str) -> bool:
        """The path is (or, through a glob, may be) in a `.git` directory."""
        if ".git" not in value and not has_glob(value):
            for cwd in self.cwds:
                if ".git" in cwd:
                    break
            else:
                return False  # `..` only removes components: no `.git` can appear
        return any(names_git_dir(resolve(value, cwd), dotglob=self.dotglob) for cwd in self.cwds)

    def strictly_inside(self, value: str) -> bool:
        """Inside W and not W itself (nor a glob at W's top that may match everything)."""
        if not self.path_inside(value) or value in ("-", "", "/dev/null"):
            return False
        return all(resolve(value, cwd) != self.worktree for cwd in self.cwds)


def _dotdot(component: str) -> bool:
    return has_glob(component) and fnmatch.fnmatchcase("..", component)


def _dotdot_sandboxed(component: str) -> bool:
    return has_glob(component) and may_match(component, "..")
