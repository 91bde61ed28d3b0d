"""The sandboxed mode as the allow judges see it (`AllowState.sandbox`): the classifier passes
`SANDBOXED` in when the task's kernel sandbox is enforced, so the allow list never imports the
mode that extends it."""

from __future__ import annotations

from gitsup.policy.allow.sandboxed import (
    expanded_part,
    path_program,
    read_anywhere,
    sandboxed_program,
    sed_edit,
)
from gitsup.policy.allow.sandboxed_git import git_worktree_op
from gitsup.policy.allow.state import AllowState
from gitsup.policy.decision import Decision
from gitsup.policy.parse.script import Part, Word


class Sandboxed:
    """The `SandboxedMode` of `allow/sandboxed.py` and `allow/sandboxed_git.py`."""

    __slots__ = ()

    def program(
        self, argv: list[str], st: AllowState, src: str, part: Part | None
    ) -> Decision | None:
        return sandboxed_program(argv, st, src, part)

    def path_program(self, part: Part, st: AllowState) -> Decision | None:
        return path_program(part, st)

    def expanded_part(self, part: Part, first: Word, st: AllowState) -> Decision | None:
        return expanded_part(part, first, st)

    def read_anywhere(
        self, prog: str, args: list[str], st: AllowState, src: str
    ) -> Decision | None:
        return read_anywhere(prog, args, st, src)

    def sed_edit(self, args: list[str], st: AllowState, src: str) -> Decision | None:
        return sed_edit(args, st, src)

    def git_worktree_op(
        self, sub: str, args: list[str], st: AllowState, src: str
    ) -> Decision | None:
        return git_worktree_op(sub, args, st, src)


SANDBOXED = Sandboxed()
