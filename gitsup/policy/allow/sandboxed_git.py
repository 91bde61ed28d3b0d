"""The sandboxed mode's Git working-tree operations (docs/policy.md, "Sandboxed mode"): `git reset`,
`stash`, `restore`, `checkout -- paths`, `rebase`, `rm` and `mv` on the task branch, with
every path inside the worktree and out of the Git directory."""

from __future__ import annotations

import re

from gitsup.policy.allow.sandboxed import sandboxed_ok
from gitsup.policy.allow.state import AllowState
from gitsup.policy.decision import Decision, ask
from gitsup.policy.rules import RuleId

# -- git working-tree operations on the task branch -------------------------------------------
# the task's own history: HEAD~N, HEAD^, a commit hash (reflog forms such as HEAD@{1} may name
# another branch's commit and ask)
_HEADISH = re.compile(r"^(?:HEAD|@|ORIG_HEAD)(?:[~^]\d*)*$|^[0-9a-f]{7,40}$")
_STASH_REF = re.compile(r"^(?:stash@\{\d+\}|\d+)$")


def _paths_ok(paths: list[str], st: AllowState, src: str, what: str) -> Decision | None:
    for p in paths:
        if not st.path_inside(p) or p == "-":
            return ask(RuleId.ASK_OUTSIDE_PATH, f"`{what}` names {p} outside the worktree", src)
        if st.in_git_dir(p):
            return ask(RuleId.ASK_GIT_DIR, f"`{what}` names the Git directory ({p})", src)
    return None


def _operands(
    args: list[str],
    ok: set[str],
    takes: tuple[str, ...],
    attached: tuple[str, ...],
    sub: str,
    src: str,
    bundled: bool = False,
) -> list[str] | Decision:
    """The words of `git <sub> args` that are not options (all of them after `--`): options in
    `ok` (short ones bundled too, with `bundled`), those in `takes` with the next word as their
    value, those that start with one of `attached` with their value attached; any other option
    asks."""
    out: list[str] = []
    i = 0
    dd = False
    while i < len(args):
        x = args[i]
        if not dd and x == "--":
            dd = True
        elif not dd and x in takes:
            i += 1
        elif not dd and x.startswith(attached):
            pass
        elif not dd and x.startswith("-"):
            if x not in ok and not (bundled and len(x) > 1 and all("-" + c in ok for c in x[1:])):
                return ask(RuleId.ASK_GIT_CHANGE, f"`git {sub} {x}` is not accounted for", src)
        else:
            out.append(x)
        i += 1
    return out


def git_worktree_op(sub: str, a: list[str], st: AllowState, src: str) -> Decision | None:
    """`git reset|stash|restore|checkout -- paths|rebase|rm|mv` on the task branch."""
    what = f"git {sub}"
    if sub == "reset":
        return _git_reset(a, st, src)
    if sub == "stash":
        return _git_stash(a, st, src)
    if sub == "restore":
        return _git_restore(a, st, src)
    if sub == "checkout":
        return _git_checkout_paths(a, st, src)
    if sub == "rebase":
        return _git_rebase(a, st, src)
    if sub in ("rm", "mv"):
        ok = {"-r", "-f", "--force", "--cached", "-q", "--quiet", "-n", "--dry-run", "-k", "-v"}
        ok |= {"--ignore-unmatch", "--verbose", "--sparse"}
        paths = _operands(a, ok, (), (), sub, src, bundled=True)
        if isinstance(paths, Decision):
            return paths
        if not paths or any(not st.strictly_inside(p) for p in paths):
            return ask(RuleId.ASK_OUTSIDE_PATH, f"`{what}` needs paths inside the worktree", src)
        return _paths_ok(paths, st, src, what) or sandboxed_ok(
            f"`{what}` of paths in the worktree", src
        )
    return None


def _git_reset(a: list[str], st: AllowState, src: str) -> Decision | None:
    ok = {"--soft", "--mixed", "--hard", "--keep", "--merge", "-q", "--quiet", "--no-refresh"}
    before: list[str] = []
    after: list[str] = []
    dd = False
    for x in a:
        if not dd and x == "--":
            dd = True
        elif not dd and x.startswith("-"):
            if x not in ok:
                return ask(RuleId.ASK_GIT_CHANGE, f"`git reset {x}` is not accounted for", src)
        elif dd:
            after.append(x)
        else:
            before.append(x)
    if before and not _HEADISH.match(before[0]):
        return ask(
            RuleId.ASK_GIT_CHANGE,
            f"`git reset {before[0]}`: name a commit of the task (HEAD~N, a hash) or use `--`",
            src,
        )
    paths = before[1:] + after
    return _paths_ok(paths, st, src, "git reset") or sandboxed_ok(
        "`git reset` on the task branch", src
    )


def _git_stash(a: list[str], st: AllowState, src: str) -> Decision | None:
    verb = a[0] if a and not a[0].startswith("-") else "push"
    rest = a[1:] if a and not a[0].startswith("-") else a
    if verb in ("pop", "apply", "drop", "show", "list", "clear"):
        for x in rest:
            if x in ("--index", "-q", "--quiet") or _STASH_REF.match(x):
                continue
            if verb in ("show", "list") and x.startswith("-"):
                continue
            return ask(RuleId.ASK_GIT_CHANGE, f"`git stash {verb} {x}` is not accounted for", src)
        return sandboxed_ok(f"`git stash {verb}`", src)
    if verb not in ("push", "save"):
        return None
    ok = {"-u", "--include-untracked", "-a", "--all", "-k", "--keep-index", "--no-keep-index"}
    ok |= {"-q", "--quiet", "-S", "--staged"}
    found = _operands(rest, ok, ("-m", "--message"), ("--message=", "-m"), "stash", src)
    if isinstance(found, Decision):
        return found
    paths = found if verb == "push" else []  # `save`'s words are its message
    return _paths_ok(paths, st, src, "git stash") or sandboxed_ok(
        "`git stash` of the working tree", src
    )


def _git_restore(a: list[str], st: AllowState, src: str) -> Decision | None:
    ok = {"-S", "--staged", "-W", "--worktree", "-q", "--quiet", "--ours", "--theirs", "-m"}
    ok |= {"--merge", "--ignore-unmerged", "--overlay", "--no-overlay", "--progress"}
    ok |= {"--no-progress", "--ignore-skip-worktree-bits"}
    paths = _operands(
        a, ok, ("-s", "--source"), ("--source=", "--conflict=", "-s"), "restore", src, bundled=True
    )
    if isinstance(paths, Decision):
        return paths
    if not paths:
        return None
    return _paths_ok(paths, st, src, "git restore") or sandboxed_ok("`git restore` of paths", src)


def _git_checkout_paths(a: list[str], st: AllowState, src: str) -> Decision | None:
    ok = {"-q", "--quiet", "-f", "--force", "--ours", "--theirs", "-m", "--merge"}
    if a in (["."], ["--", "."]):
        return sandboxed_ok("`git checkout .` restores the working tree", src)
    if "--" not in a:
        return None
    k = a.index("--")
    before, paths = a[:k], a[k + 1 :]
    positional = [x for x in before if not x.startswith("-")]
    if any(x.startswith("-") and x not in ok for x in before) or len(positional) > 1 or not paths:
        return None
    return _paths_ok(paths, st, src, "git checkout") or sandboxed_ok("`git checkout -- paths`", src)


def _git_rebase(a: list[str], st: AllowState, src: str) -> Decision | None:
    if len(a) == 1 and a[0] in ("--continue", "--abort", "--skip", "--quit"):
        return sandboxed_ok(f"`git rebase {a[0]}`", src)
    ok = {"-q", "--quiet", "-v", "--verbose", "--autosquash", "--no-autosquash", "--autostash"}
    ok |= {"--no-autostash", "--keep-empty", "--no-keep-empty", "--committer-date-is-author-date"}
    ok |= {"--reset-author-date", "--ignore-date", "--signoff", "--no-ff", "-f", "--force-rebase"}
    ok |= {"-m", "--merge", "--reapply-cherry-picks", "--no-reapply-cherry-picks", "--keep-base"}
    positional: list[str] = []
    i = 0
    while i < len(a):
        x = a[i]
        if x == "--onto" or x.startswith("--onto="):
            value = x.split("=", 1)[1] if "=" in x else (a[i + 1] if i + 1 < len(a) else "")
            if not _HEADISH.match(value):
                return ask(RuleId.ASK_GIT_CHANGE, f"`git rebase --onto {value}`", src)
            i += 1 if "=" in x else 2
            continue
        if x.startswith("-"):
            if x not in ok:
                return ask(RuleId.ASK_GIT_CHANGE, f"`git rebase {x}` is not accounted for", src)
        else:
            positional.append(x)
        i += 1
    if len(positional) != 1 or not _HEADISH.match(positional[0]):
        return ask(
            RuleId.ASK_GIT_CHANGE,
            "`git rebase` onto something other than the task's own history (HEAD~N, a hash)",
            src,
        )
    return sandboxed_ok("`git rebase` of the task branch onto its own history", src)
