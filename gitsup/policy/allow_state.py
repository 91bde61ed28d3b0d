"""What the allow list judges against (`AllowState`): the policy, the worktree, the working
directories a command may run in, and whether the task's kernel sandbox is enforced; it decides
whether a path stays inside the worktree."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from gitsup.policy.config import Policy
from gitsup.policy.normalise import (
    UNKNOWN,
    Expander,
    has_glob,
    inside,
    may_match,
    names_git_dir,
    normal_form,
    resolve,
)


@dataclass(slots=True, init=False)
class AllowState:
    policy: Policy
    worktree: str
    home: str
    cwds: set[str]  # where the part being judged may run (the worktree until a `cd`)
    sandboxed: bool  # the task's kernel sandbox is enforced (docs/policy.md, "Sandboxed mode")
    dotglob: bool
    _root_only: bool = field(repr=False)  # the worktree is in its normal form
    _expander: Expander | None = field(repr=False)

    def __init__(
        self,
        policy: Policy,
        worktree: str,
        home: str,
        sandboxed: bool = False,
        dotglob: bool = False,
    ) -> None:
        # written out (not generated): one state per question, built without default factories
        self.policy = policy
        self.worktree = worktree
        self.home = home
        self.cwds = {worktree}
        self.sandboxed = sandboxed
        self.dotglob = dotglob
        self._root_only = normal_form(worktree) == worktree
        self._expander = None

    def expander(self) -> Expander:
        """The plain-form expander (no variables), one per state."""
        ex = self._expander
        if ex is None:
            ex = self._expander = Expander({}, self.home, self.worktree)
        return ex

    def path_inside(self, value: str) -> bool:
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
