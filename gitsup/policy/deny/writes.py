"""Deny scanners for writes (docs/policy.md, "Deny: D1-D4"): destructive commands (recursive deletes or
permission changes of system directories, writes to block devices) and writes into a Git
hooks directory."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gitsup.policy import facts
from gitsup.policy.decision import Decision, deny
from gitsup.policy.facts import MKFS_PREFIX, MUTATORS, ScanState
from gitsup.policy.normalise.expand import UNKNOWN, has_glob, inside, is_ancestor, may_match
from gitsup.policy.normalise.unwrap import find_roots
from gitsup.policy.rules import RuleId

_SYSTEM_DIRS = frozenset(
    {
        "/etc",
        "/usr",
        "/bin",
        "/sbin",
        "/var",
        "/boot",
        "/home",
        "/root",
        "/opt",
        "/srv",
        "/dev",
        "/proc",
        "/sys",
    }
)


_BLOCK_DEVICE = re.compile(
    r"^/dev/(sd[a-z]|nvme\d|disk\d|rdisk\d|hd[a-z]|vd[a-z]|xvd[a-z]|mmcblk\d|md\d|dm-\d|"
    r"mapper/|loop\d|sr\d)"
)


_DEST_ONLY = frozenset({"cp", "install", "rsync"})


def write_target_rule(path: str, part: str, how: str, dotglob: bool = False) -> Decision | None:
    if _BLOCK_DEVICE.match(path):
        return deny(RuleId.D4_BLOCK_DEVICE, f"{how} writes the block device {path}", part)
    if in_hooks(path, dotglob=dotglob):
        return deny(RuleId.D3_HOOKS_DIR, f"{how} writes into a Git hooks directory ({path})", part)
    return None


def in_hooks(path: str, *, git_dir_itself: bool = False, dotglob: bool = False) -> bool:
    """Does `path` name a hooks directory of a Git dir (or, with `git_dir_itself`, the Git dir)?
    Glob components count when they may match (`.gi?/hoo*`)."""
    comps = path.split("/")
    for i, c in enumerate(comps):
        if (
            c == ".git"
            or (c.endswith(".git") and len(c) > 4)
            or (has_glob(c) and may_match(c, ".git", dotglob=dotglob))
        ):
            if i + 1 < len(comps) and (
                comps[i + 1] == "hooks" or may_match(comps[i + 1], "hooks", dotglob=dotglob)
            ):
                return True
            if git_dir_itself and i + 1 == len(comps):
                return True
    return False


# -- D4 -----------------------------------------------------------------------------------------
def dangerous_target(path: str, st: ScanState) -> bool:
    """`/`, `~`, top-level system directories and ancestors of the worktree."""
    if path == "/" or path == st.home.rstrip("/"):
        return True
    if path in _SYSTEM_DIRS:
        return True
    if path.count("/") == 1 and path.startswith("/lib"):
        return True
    return is_ancestor(path, st.worktree)


def _target_paths(value: str, st: ScanState) -> list[str]:
    if UNKNOWN in value:
        return []
    out = [st.path(value)]
    stripped = value.rstrip("/")
    for suffix in ("/*", "/.*", "/*.*"):
        if stripped.endswith(suffix):
            out.append(st.path(stripped[: -len(suffix)] or "/"))
    if value in ("*", ".*"):
        out.append(st.path("."))
    return out


def file_operands(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    dd = False
    for a in args:
        if dd:
            out.append(a)
        elif a == "--":
            dd = True
        elif not a.startswith("-") or a == "-":
            out.append(a)
    return out


def destructive_rule(prog: str, args: list[str], st: ScanState, src: str) -> Decision | None:
    if prog == "rm":
        if any(a == "--no-preserve-root" for a in args):
            return deny(RuleId.D4_RM_ROOT, "`rm --no-preserve-root`", src)
        recursive = facts.has_flag(args, "rR", ("--recursive",))
        if recursive:
            for op in file_operands(args):
                for p in _target_paths(op, st):
                    if dangerous_target(p, st):
                        return deny(
                            RuleId.D4_RM_ROOT,
                            f"recursive rm of {p} (the root, home, a "
                            "system directory or an ancestor of the worktree)",
                            src,
                        )
    if prog == "find" and "-delete" in args:
        for root in find_roots(args):
            for p in _target_paths(root, st):
                if dangerous_target(p, st):
                    return deny(RuleId.D4_RM_ROOT, f"`find {root} -delete` deletes {p}", src)
    if prog in ("chmod", "chown", "chgrp") and facts.has_flag(args, "R", ("--recursive",)):
        for op in file_operands(args):
            for p in _target_paths(op, st):
                if p == "/" or (p.count("/") == 1 and p != "/"):
                    return deny(RuleId.D4_CHMOD_ROOT, f"recursive {prog} of {p}", src)
    if prog.startswith(MKFS_PREFIX):
        return deny(RuleId.D4_BLOCK_DEVICE, f"`{prog}` formats a device", src)
    if prog == "wipefs" and facts.has_flag(args, "a", ("--all",)):
        return deny(RuleId.D4_BLOCK_DEVICE, "`wipefs -a` wipes a device", src)
    if prog in ("shred", "dd", "blkdiscard", "badblocks"):
        for a in args:
            value = a.split("=", 1)[1] if (prog == "dd" and a.startswith("of=")) else a
            if prog == "dd" and not a.startswith("of="):
                continue
            if _BLOCK_DEVICE.match(st.path(value)):
                return deny(
                    RuleId.D4_BLOCK_DEVICE, f"`{prog}` writes the block device {value}", src
                )
    return None


def hooks_rule(prog: str, args: list[str], st: ScanState, src: str) -> Decision | None:
    written = operand_writes(prog, args)
    for op in written:
        if UNKNOWN not in op:
            d = write_target_rule(st.path(op), src, f"`{prog}`", st.dotglob)
            if d is not None:
                return d
    if prog not in MUTATORS and prog != "dd":
        return None
    if prog == "sed" and not facts.has_flag(args, "i", ("--in-place",)):
        return None
    if prog == "dd":
        ops = [a[3:] for a in args if a.startswith("of=")]
    elif prog in _DEST_ONLY:
        target = facts.short_value(args, "t", ("--target-directory",))
        ops = target or file_operands(args)[-1:]
    else:
        ops = file_operands(args)
    destructive = prog in (
        "rm",
        "rmdir",
        "unlink",
        "mv",
        "chmod",
        "chown",
        "chgrp",
        "ln",
        "shred",
        "chattr",
    )
    for op in ops:
        if UNKNOWN in op:
            continue
        p = st.path(op)
        if in_hooks(p, git_dir_itself=True, dotglob=st.dotglob) and (
            destructive
            or in_hooks(p, dotglob=st.dotglob)
            or p.endswith(".git")
            or may_match(p.rsplit("/", 1)[-1], ".git", dotglob=st.dotglob)
        ):
            return deny(
                RuleId.D3_HOOKS_DIR,
                f"`{prog}` modifies a Git hooks directory or the Git dir itself ({p})",
                src,
            )
    return None


def operand_writes(prog: str, args: Sequence[str]) -> list[str]:
    """Files a read-looking tool writes through an operand or option: `uniq IN OUT`,
    `sort -o OUT`, `tree -o OUT`, `base64 -o OUT`."""
    if prog == "uniq":
        ops = file_operands(args)
        return ops[1:2]
    if prog in ("sort", "tree", "base64"):
        return facts.short_value(args, "o", ("--output",) if prog != "tree" else ())
    if prog == "go" and args[:1] in (["build"], ["test"]):
        return [a[3:] if a.startswith("-o=") else "" for a in args if a.startswith("-o=")] + [
            args[k + 1] for k, a in enumerate(args[:-1]) if a == "-o"
        ]
    return []


def under(path: str, root: str) -> bool:
    return inside(path, root)
