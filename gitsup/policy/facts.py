"""What the deny scanners and the allow judges know about programs, git commands and the
context of one command: the program names judged in code, git's command line (global
options, aliases, config writes, and the git parts of D1 push, D2 protected refs and D3
core.hooksPath), and the literal data carried through one classification (`ScanState`).

The program names. Every name-specific step of the deny scan reads its set from here before
it looks at a program: the rule dispatch of `deny/scan.py` (git, destructive commands, hooks
writers, executors), the subscript evaluation, the state updates of `deny/state.py`, the
variable collection of `ScanState` and the wrappers `normalise/unwrap.py` handles in code
(`UNWRAPPED`). The inert-part shortcut (`deny/inert.py`) skips only programs outside `JUDGED`
and outside the policy's own tables (shells, interpreters, downloaders, HTTP clients, forges,
registries, wrappers), so a program a step judges cannot be skipped: a program missing here is
not judged with or without the shortcut. `tests/policy/test_deny_names.py` reads the source of
those modules and fails on a program name compared in code that is in neither this table nor
the default policy's tables.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gitsup.policy.config import Policy
from gitsup.policy.normalise.expand import UNKNOWN, Expander, basename, resolve
from gitsup.policy.normalise.unwrap import UNWRAPPED
from gitsup.policy.parse.script import Part, decode_ansi_c
from gitsup.policy.rules import RuleId

# -- program names ----------------------------------------------------------------------
# git's rules (deny/scan.py git_rules); `git-*` programs too.
GIT = frozenset({"git", "hub"})
GIT_PREFIX = "git-"

# deny/writes.py destructive_rule; `mkfs*` programs too.
DESTRUCTIVE = frozenset(
    {"rm", "find", "chmod", "chown", "chgrp", "wipefs", "shred", "dd", "blkdiscard", "badblocks"}
)
MKFS_PREFIX = "mkfs"

# Programs that change files through their operands (deny/writes.py hooks_rule, allow side too).
MUTATORS = frozenset(
    {
        "rm",
        "rmdir",
        "unlink",
        "mv",
        "cp",
        "ln",
        "chmod",
        "chown",
        "chgrp",
        "truncate",
        "touch",
        "mkdir",
        "tee",
        "install",
        "shred",
        "rsync",
        "sed",
        "chattr",
        "setfacl",
        "patch",
    }
)

# deny/writes.py hooks_rule: mutators and read-looking tools that write through an option or operand.
HOOK_WRITERS = frozenset({"uniq", "sort", "tree", "base64", "go", "dd"} | MUTATORS)

# deny/scan.py _execution, besides the policy's shells and interpreters and programs named by a path.
EXECUTORS = frozenset(
    {"eval", "source", ".", "sudo", "xargs", "alias", "su", "runuser", "ssh", "mosh"}
)

# deny/scan.py _subscript_code: builtins whose name operands or operands bash evaluates as arithmetic
# (code in an array subscript runs even when the word is quoted: `[[ -v 'a[$(cmd)]' ]]`).
SUBSCRIPT_EVALUATORS = frozenset(
    {
        "test",
        "[",
        "printf",
        "read",
        "mapfile",
        "readarray",
        "let",
        "unset",
        "getopts",
        "wait",
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
    }
)

# deny/state.py update_state, besides the policy's downloaders: copies and writes of literal data,
# and git switching HEAD.
STATE = frozenset({"tee", "cp", "mv", "install", "git"})

# ScanState.collect_variables (below): `printf -v X ...` and `read X <<< ...` assign variables.
VARIABLE_SETTERS = frozenset({"printf", "read"})

# Interpreters judged by name shape (python, python3, python3.12), besides the policy's list.
PYTHON = re.compile(r"^python(\d(\.\d+)?)?$")

JUDGED = (
    GIT
    | DESTRUCTIVE
    | HOOK_WRITERS
    | EXECUTORS
    | SUBSCRIPT_EVALUATORS
    | STATE
    | VARIABLE_SETTERS
    | UNWRAPPED
)
PREFIXES = (GIT_PREFIX, MKFS_PREFIX)


# -- git commands ----------------------------------------------------------------------
# Global options of git that take a separate value.
_GLOBAL_WITH_ARG = frozenset(
    {
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--super-prefix",
        "--config-env",
        "--attr-source",
        "--list-cmds",
        "--exec-path",
    }
)
_GLOBAL_NO_SEPARATE = frozenset({"--exec-path"})  # `--exec-path` alone prints the path

HEAD_WRITERS = frozenset(
    {"merge", "pull", "rebase", "reset", "cherry-pick", "revert", "commit", "am"}
)

# Subcommands git implements itself: aliases cannot shadow them.
BUILTINS = frozenset(
    [
        "add",
        "am",
        "annotate",
        "apply",
        "archive",
        "bisect",
        "blame",
        "branch",
        "bundle",
        "cat-file",
        "check-attr",
        "check-ignore",
        "check-mailmap",
        "check-ref-format",
        "checkout",
        "checkout-index",
        "cherry",
        "cherry-pick",
        "citool",
        "clean",
        "clone",
        "column",
        "commit",
        "commit-graph",
        "commit-tree",
        "config",
        "count-objects",
        "credential",
        "describe",
        "diff",
        "diff-files",
        "diff-index",
        "diff-tree",
        "difftool",
        "fast-export",
        "fast-import",
        "fetch",
        "fetch-pack",
        "filter-branch",
        "for-each-ref",
        "for-each-repo",
        "format-patch",
        "fsck",
        "gc",
        "get-tar-commit-id",
        "grep",
        "hash-object",
        "help",
        "http-push",
        "index-pack",
        "init",
        "interpret-trailers",
        "log",
        "ls-files",
        "ls-remote",
        "ls-tree",
        "mailinfo",
        "mailsplit",
        "maintenance",
        "merge",
        "merge-base",
        "merge-file",
        "merge-index",
        "merge-tree",
        "mktag",
        "mktree",
        "multi-pack-index",
        "mv",
        "name-rev",
        "notes",
        "pack-objects",
        "pack-refs",
        "patch-id",
        "prune",
        "prune-packed",
        "pull",
        "push",
        "range-diff",
        "read-tree",
        "rebase",
        "receive-pack",
        "reflog",
        "remote",
        "repack",
        "replace",
        "request-pull",
        "rerere",
        "reset",
        "restore",
        "rev-list",
        "rev-parse",
        "revert",
        "rm",
        "send-email",
        "send-pack",
        "shortlog",
        "show",
        "show-branch",
        "show-index",
        "show-ref",
        "sparse-checkout",
        "stash",
        "status",
        "stripspace",
        "submodule",
        "switch",
        "symbolic-ref",
        "tag",
        "unpack-file",
        "unpack-objects",
        "update-index",
        "update-ref",
        "update-server-info",
        "upload-archive",
        "upload-pack",
        "var",
        "verify-commit",
        "verify-pack",
        "verify-tag",
        "version",
        "whatchanged",
        "worktree",
        "write-tree",
    ]
)


@dataclass(frozen=True, slots=True)
class GitCall:
    """A parsed git invocation. One parse is shared by every step that reads the same argument
    vector (`parse_git`), so neither it nor its lists are changed after parsing."""

    argv: list[str]
    options: list[tuple[str, str | None]]  # global options
    sub: str | None = None
    args: list[str] = field(default_factory=list)
    by_path_verb: bool = False  # git-push by path

    def config(self) -> list[tuple[str, str]]:
        """`-c key=value` settings (key lower-cased), plus `--config-env` keys."""
        out: list[tuple[str, str]] = []
        for name, value in self.options:
            if name == "-c" and value is not None:
                key, _, val = value.partition("=")
                out.append((key.lower(), val if "=" in value else "true"))
            elif name == "--config-env" and value is not None:
                key, _, env = value.partition("=")
                out.append((key.lower(), "$" + env))
        return out


# argument vector -> its parse: the deny rules, the deny scan's state step and the allow list
# each read the same git invocation. Bounded; cleared when full.
_CALLS: dict[tuple[str, ...], GitCall] = {}
_CALLS_LIMIT = 64


def parse_git(argv: Sequence[str]) -> GitCall:
    key = tuple(argv)
    call = _CALLS.get(key)
    if call is None:
        if len(_CALLS) >= _CALLS_LIMIT:
            _CALLS.clear()
        call = _CALLS[key] = _parse_git(list(argv))
    return call


def _parse_git(argv: list[str]) -> GitCall:
    prog = basename(argv[0])
    if prog.startswith("git-") and prog != "git-upload-pack":
        return GitCall(argv, [], prog[4:], argv[1:], by_path_verb=True)
    options: list[tuple[str, str | None]] = []
    i = 1
    n = len(argv)
    while i < n:
        a = argv[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-"):
            break
        name, eq, value = a.partition("=")
        if eq and name.startswith("--"):
            options.append((name, value))
        elif a in _GLOBAL_WITH_ARG and a not in _GLOBAL_NO_SEPARATE:
            options.append((a, argv[i + 1] if i + 1 < n else None))
            i += 1
        elif a.startswith("-c") and len(a) > 2:
            options.append(("-c", a[2:]))
        elif a.startswith("-C") and len(a) > 2:
            options.append(("-C", a[2:]))
        else:
            options.append((a, None))
        i += 1
    if i < n:
        return GitCall(argv, options, argv[i], argv[i + 1 :])
    return GitCall(argv, options)


def positionals(args: Sequence[str], with_arg: frozenset[str] = frozenset()) -> list[str]:
    """Non-option words (options listed in `with_arg` swallow the next word)."""
    out: list[str] = []
    skip = False
    after_dd = False
    for a in args:
        if skip:
            skip = False
            continue
        if after_dd:
            out.append(a)
            continue
        if a == "--":
            after_dd = True
            continue
        if a.startswith("-") and a != "-":
            if a in with_arg:
                skip = True
            continue
        out.append(a)
    return out


def split_before_dd(args: Sequence[str]) -> tuple[list[str], list[str]]:
    if "--" in args:
        k = list(args).index("--")
        return list(args[:k]), list(args[k + 1 :])
    return list(args), []


def has_flag(args: Sequence[str], shorts: str = "", longs: Sequence[str] = ()) -> bool:
    """True when a short flag letter (possibly clustered) or a long flag occurs before `--`."""
    for a in args:
        if a == "--":
            return False
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if any(name == lng or (len(name) > 3 and lng.startswith(name)) for lng in longs):
                return True
        elif a.startswith("-") and len(a) > 1 and shorts and any(c in shorts for c in a[1:]):
            return True
    return False


def short_value(args: Sequence[str], letters: str, longs: Sequence[str] = ()) -> list[str]:
    """Values given to a short option (`-B name`, `-Bname`) or its long forms."""
    out: list[str] = []
    n = len(args)
    for i, a in enumerate(args):
        if a == "--":
            break
        if a.startswith("--"):
            name, eq, val = a.partition("=")
            if name in longs or (len(name) > 3 and any(lng.startswith(name) for lng in longs)):
                out.append(val if eq else (args[i + 1] if i + 1 < n else ""))
            continue
        if a.startswith("-") and len(a) > 1:
            for k, c in enumerate(a[1:], start=1):
                if c in letters:
                    rest = a[k + 1 :]
                    out.append(rest if rest else (args[i + 1] if i + 1 < n else ""))
                    break
    return out


# -- alias handling --------------------------------------------------------------------------
def alias_definitions(call: GitCall, env: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """Aliases defined for this invocation: `-c alias.x=..`, `GIT_CONFIG_KEY_n` pairs,
    `--config-env`, `GIT_CONFIG_PARAMETERS`."""
    if not call.options and not env:
        return []
    out: list[tuple[str, str]] = []
    for key, value in call.config():
        if key.startswith("alias."):
            if value.startswith("$"):
                for v in env.get(value[1:], ()):
                    out.append((key[6:], v))
            else:
                out.append((key[6:], value))
    for key, value in config_env_pairs(env):
        if key.startswith("alias."):
            out.append((key[6:], value))
    return out


def config_env_pairs(env: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, keys in env.items():
        if name.startswith("GIT_CONFIG_KEY_"):
            idx = name[len("GIT_CONFIG_KEY_") :]
            values = env.get("GIT_CONFIG_VALUE_" + idx, ()) or ("",)
            for k in keys:
                for v in values:
                    out.append((k.lower(), v))
    for params in env.get("GIT_CONFIG_PARAMETERS", ()):
        for item in params.replace("'", " ").split():
            key, _, value = item.partition("=")
            out.append((key.lower(), value))
    return out


def sets_hooks_path(call: GitCall, env: Mapping[str, Sequence[str]]) -> bool:
    if not call.options and not env:
        return False
    keys = [k for k, _ in call.config()] + [k for k, _ in config_env_pairs(env)]
    if any(k == "core.hookspath" for k in keys):
        return True
    return any("hookspath" in p.lower() for p in env.get("GIT_CONFIG_PARAMETERS", ()))


_CONFIG_WITH_ARG = frozenset(
    {"-f", "--file", "--blob", "--type", "--default", "--comment", "--value", "--regexp"}
)
_CONFIG_WRITE_FLAGS = frozenset(
    {
        "--unset",
        "--unset-all",
        "--add",
        "--replace-all",
        "--rename-section",
        "--remove-section",
        "--edit",
        "-e",
    }
)
_CONFIG_READ_FLAGS = frozenset(
    {
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--get-color",
        "--get-colorbool",
        "-l",
        "--list",
        "--show-origin",
        "--show-scope",
    }
)


_CONFIG_LONGS = tuple(
    sorted(
        f
        for f in (*_CONFIG_WRITE_FLAGS, *_CONFIG_WITH_ARG, *_CONFIG_READ_FLAGS)
        if f.startswith("--")
    )
)


def _config_canon(arg: str) -> str:
    """The full name of an abbreviated long option (write flags first)."""
    if not arg.startswith("--") or len(arg) < 4:
        return arg
    name, eq, value = arg.partition("=")
    if name in _CONFIG_LONGS:
        return arg
    hits = [f for f in _CONFIG_LONGS if f.startswith(name)]
    if not hits:
        return arg
    writes = [f for f in hits if f in _CONFIG_WRITE_FLAGS]
    return (writes or hits)[0] + eq + value


@dataclass
class ConfigWrite:
    key: str  # lower-cased; a section name for --rename/--remove-section
    value: str | None
    action: str


def config_writes(args: Sequence[str]) -> list[ConfigWrite]:
    """Writes performed by `git config <args>` (empty for reads). Long options may be
    abbreviated (`--unse`, `--fil`): a prefix of a write flag counts as that write."""
    sub = ""
    rest = [_config_canon(a) for a in args]
    if rest and rest[0] in (
        "set",
        "unset",
        "get",
        "list",
        "rename-section",
        "remove-section",
        "edit",
    ):
        sub, rest = rest[0], rest[1:]
    flags = [a.split("=", 1)[0] for a in rest if a.startswith("-")]
    pos = positionals(rest, _CONFIG_WITH_ARG)
    write_flag = next((f for f in flags if f in _CONFIG_WRITE_FLAGS), "")
    if sub in ("get", "list", "edit") or (
        not sub and not write_flag and any(f in _CONFIG_READ_FLAGS for f in flags)
    ):
        return []
    action = sub or write_flag
    if action in ("rename-section", "remove-section", "--rename-section", "--remove-section"):
        return [ConfigWrite(p.lower(), None, action) for p in pos[:1]]
    if action in ("unset", "--unset", "--unset-all"):
        return [ConfigWrite(p.lower(), None, action) for p in pos[:1]]
    if action in ("set", "--add", "--replace-all") or len(pos) >= 2:
        if not pos:
            return []
        return [ConfigWrite(pos[0].lower(), pos[1] if len(pos) > 1 else None, action or "set")]
    return []


def protected_ref(policy: Policy, ref: str) -> bool:
    return bool(ref) and policy.is_protected(ref)


def fetch_dest_protected(policy: Policy, refspec: str) -> bool:
    spec = refspec.lstrip("+")
    if ":" not in spec or spec.startswith("^"):
        return False
    dst = spec.split(":", 1)[1]
    if not dst:
        return False
    if "*" in dst:
        for name in policy.protected:
            if "*" in name:
                continue
            if fnmatch.fnmatchcase("refs/heads/" + name, dst) or fnmatch.fnmatchcase(name, dst):
                return True
        return False
    return protected_ref(policy, dst)


_REBASE_WITH_ARG = frozenset(
    {"--onto", "-s", "--strategy", "-X", "--strategy-option", "-x", "--exec", "-C", "--whitespace"}
)
_BRANCH_WITH_ARG = frozenset(
    {
        "-u",
        "--set-upstream-to",
        "--contains",
        "--no-contains",
        "--merged",
        "--no-merged",
        "--points-at",
        "--sort",
        "--format",
        "--color",
        "--column",
        "-t",
        "--track",
    }
)


# The subcommands `_d2_ref_reason` judges (every other one writes no protected ref).
D2_SUBS = frozenset(
    {
        "rebase", "branch", "checkout", "switch", "worktree", "update-ref", "symbolic-ref",
        "fetch", "pull", "filter-branch", "filter-repo",
    }
)  # fmt: skip


def d2_reason(
    call: GitCall, policy: Policy, head_protected: bool, stdin: str | None
) -> tuple[RuleId, str] | None:
    """The D2 rule and why this git call rewrites a protected branch, or None."""
    sub = call.sub or ""
    if head_protected and sub in HEAD_WRITERS:
        return (
            RuleId.D2_PROTECTED_HEAD,
            f"`git {sub}` while HEAD is a protected branch (checked out earlier)",
        )
    reason = _d2_ref_reason(call, policy, stdin)
    return (RuleId.D2_PROTECTED_REF, reason) if reason is not None else None


def _d2_ref_reason(call: GitCall, policy: Policy, stdin: str | None) -> str | None:
    """Why this git call writes a protected ref (D2.protected-ref), or None."""
    sub = call.sub or ""
    if sub not in D2_SUBS:
        return None
    args = call.args
    before, _ = split_before_dd(args)
    if sub == "rebase":
        pos = positionals(before, _REBASE_WITH_ARG)
        branch = pos[1] if len(pos) >= 2 else (pos[0] if pos and "--root" in before else None)
        if branch and protected_ref(policy, branch):
            return f"`git rebase` rewrites the protected branch {branch!r}"
    if sub == "branch":
        pos = positionals(before, _BRANCH_WITH_ARG)
        force = has_flag(before, "f", ("--force",))
        delete = has_flag(before, "dD", ("--delete",))
        move = has_flag(before, "mMcC", ("--move", "--copy"))
        targets = pos if (delete or move) else (pos[:1] if force else [])
        for t in targets:
            if protected_ref(policy, t):
                return f"`git branch` forces, deletes, renames or copies onto protected {t!r}"
    if sub in ("checkout", "switch"):
        letters = "B" if sub == "checkout" else "C"
        longs = ("--force-create",) if sub == "switch" else ()
        for v in short_value(before, letters, longs):
            if protected_ref(policy, v):
                return f"`git {sub} -{letters}` resets the protected branch {v!r}"
    if sub == "worktree" and before[:1] == ["add"]:
        for v in short_value(before[1:], "B"):
            if protected_ref(policy, v):
                return f"`git worktree add -B` resets the protected branch {v!r}"
    if sub == "update-ref":
        pos = positionals(before, frozenset({"-m", "--create-reflog"}) - {"--create-reflog"})
        if pos and protected_ref(policy, pos[0]):
            return f"`git update-ref` writes the protected ref {pos[0]!r}"
        if "--stdin" in before and stdin is not None:
            for tok in stdin.split():
                if protected_ref(policy, tok) and tok.startswith("refs/heads/"):
                    return f"`git update-ref --stdin` writes the protected ref {tok!r}"
    if sub == "symbolic-ref":
        for p in positionals(before, frozenset({"-m"})):
            if p.startswith("refs/heads/") and protected_ref(policy, p):
                return f"`git symbolic-ref` points at or rewrites protected {p!r}"
    if sub in ("fetch", "pull"):
        pos = positionals(
            before,
            frozenset(
                {
                    "--depth",
                    "--deepen",
                    "--shallow-since",
                    "--shallow-exclude",
                    "-j",
                    "--jobs",
                    "--refmap",
                    "--upload-pack",
                    "-o",
                    "--server-option",
                    "--negotiation-tip",
                    "--recurse-submodules-default",
                    "--filter",
                    "-s",
                    "--strategy",
                    "-X",
                    "--strategy-option",
                }
            ),
        )
        for spec in pos[1:]:
            if fetch_dest_protected(policy, spec):
                return f"`git {sub}` refspec {spec!r} writes a protected branch"
    if sub == "filter-branch" and (
        "--all" in args or "--branches" in args or any(protected_ref(policy, a) for a in args)
    ):
        return "`git filter-branch` rewrites protected branches"
    if sub == "filter-repo":
        if "--analyze" in args:
            return None
        refs = short_value(args, "", ("--refs",))
        if not refs or "--all" in args or any(protected_ref(policy, r) for r in refs):
            return "`git filter-repo` rewrites every branch, protected ones included"
    return None


def switches_to(call: GitCall, policy: Policy) -> bool | None:
    """After this call HEAD is protected (True), not protected (False), or unchanged (None)."""
    sub = call.sub
    before, after = split_before_dd(call.args)
    if sub not in ("checkout", "switch"):
        return None
    created = short_value(before, "bBcC", ("--orphan", "--create", "--force-create"))
    if created:
        return protected_ref(policy, created[0])
    if has_flag(before, "", ("--detach",)):
        return False
    pos = positionals(before, frozenset({"--conflict", "-t", "--track"}))
    if after and sub == "checkout":
        return None  # `git checkout <tree-ish> -- paths`: no switch
    if pos:
        if protected_ref(policy, pos[0]):
            return True
        if sub == "switch":
            return False
    return None


# -- the context of one command ------------------------------------------------------------
MAX_DEPTH = 8  # nesting of shell payloads (bash -c 'bash -c ...')
_PRINTF_DIRECTIVE = re.compile(r"%(?:%|[-+ #0]*\d*(?:\.\d+)?[sbdiouxXcq])")


@dataclass(slots=True, init=False)
class ScanState:
    policy: Policy
    worktree: str
    home: str
    variables: dict[str, list[str]]
    files: dict[str, str]  # path -> literal content
    downloaded: set[str]
    head_protected: bool
    git_aliases: dict[str, list[str]]
    depth: int
    dotglob: bool  # `*` may match dot files (shopt -s dotglob, GLOBIGNORE)

    _expander: Expander | None

    def __init__(self, policy: Policy, worktree: str, home: str, dotglob: bool = False) -> None:
        # written out (not generated): one state per question, built without default factories
        self.policy = policy
        self.worktree = worktree
        self.home = home
        self.variables = {}
        self.files = {}
        self.downloaded = set()
        self.head_protected = False
        self.git_aliases = {}
        self.depth = 0
        self.dotglob = dotglob
        self._expander = None

    def expander(self) -> Expander:
        """One expander per state (it reads `variables` live, so it never goes stale)."""
        ex = self._expander
        if ex is None:
            ex = self._expander = Expander(
                self.variables, self.home, self.worktree, self.subst_output
            )
        return ex

    def path(self, value: str) -> str:
        return resolve(value, self.worktree, self.home)

    # -- literal data --------------------------------------------------------------------
    def collect_variables(self, parts: list[Part]) -> None:
        """Literal values assigned anywhere in the script's `parts` (order is not evaluated)."""
        ex = self.expander()
        for part in parts:
            for name, word in part.assigns:
                values = self.variables.setdefault(name, [])
                if word is None:  # a for-loop variable: every listed word
                    for w in part.words:
                        for alt in ex.word(w):
                            for v in alt:
                                if v not in values and UNKNOWN not in v:
                                    values.append(v)
                    continue
                for alt in ex.word(word):
                    v = " ".join(alt)
                    if UNKNOWN not in v and v not in values:
                        values.append(v)
            if part.kind != "cmd" or not part.words or part.words[0].src not in VARIABLE_SETTERS:
                continue
            # `printf -v X FORMAT ARGS`
            if len(part.words) >= 4 and part.words[0].src == "printf" and part.words[1].src == "-v":
                for argv in ex.argvs(part.words):
                    if len(argv) >= 4 and UNKNOWN not in argv[3]:
                        value = printf_format(decode_ansi_c(argv[3]), argv[4:])
                        self.variables.setdefault(argv[2], []).append(value)
            # `read X <<< literal`
            if part.words[0].src == "read":
                data = self.stdin_of(part)
                if data is not None:
                    names = [w.src for w in part.words[1:] if not w.src.startswith("-")]
                    fields_ = data.split()
                    for i, name in enumerate(names):
                        value = fields_[i] if i < len(fields_) else ""
                        if i == len(names) - 1:
                            value = " ".join(fields_[i:])
                        self.variables.setdefault(name, []).append(value)

    def subst_output(self, inner: list[Part]) -> str | None:
        """Literal stdout of a substitution whose body is one literal pipeline."""
        if not inner:
            return ""
        top = min(p.depth for p in inner)
        stages = [p for p in inner if p.depth == top]
        last = stages[-1]
        chain = []
        p: Part | None = last
        while p is not None:
            chain.append(p)
            p = p.pipe_prev
        if any(s not in chain for s in stages):
            return None
        return self.stdout_of(last)

    def stdin_of(self, part: Part, _depth: int = 0) -> str | None:
        """Literal data on the part's stdin, if visible (through at most 48 pipe stages)."""
        ex = self.expander()
        for r in part.redirects:
            if r.is_heredoc and r.body is not None:
                return r.body
            if r.op == "<<<" and r.target is not None:
                return ex.value(r.target) + "\n"
            if r.op == "<" and r.target is not None:
                target = self.path(ex.value(r.target))
                if target in self.files:
                    return self.files[target]
        if part.pipe_prev is not None:
            return self.stdout_of(part.pipe_prev, _depth + 1)
        return None

    def stdout_of(self, part: Part, _depth: int = 0) -> str | None:
        if part.kind != "cmd" or not part.words or _depth > 48:
            return None
        ex = self.expander()
        argvs = ex.argvs(part.words)
        if not argvs or not argvs[0]:
            return None
        argv = argvs[0]
        prog = basename(argv[0])
        args = argv[1:]
        if prog == "echo":
            newline, escapes = True, False
            while args and re.fullmatch(r"-[neE]+", args[0]):
                newline = newline and "n" not in args[0]
                escapes = escapes or "e" in args[0]
                args = args[1:]
            text = " ".join(args)
            if escapes:
                text = decode_ansi_c(text)
            return text + ("\n" if newline else "")
        if prog == "printf":
            if args and args[0] == "--":
                args = args[1:]
            if not args:
                return None
            fmt = decode_ansi_c(args[0])
            rest = args[1:]
            if not _PRINTF_DIRECTIVE.search(fmt):
                return fmt
            return printf_format(fmt, rest)
        if prog in ("cat", "tee") and all(a.startswith("-") for a in args if a != "-"):
            return self.stdin_of(part, _depth)
        if prog == "cat" and args:
            texts = [self.files.get(self.path(a)) for a in args if not a.startswith("-")]
            if all(t is not None for t in texts):
                return "".join(t for t in texts if t is not None)
            return None
        if prog in ("base64", "base32") and any(a in ("-d", "--decode", "-D") for a in args):
            data = self.stdin_of(part, _depth)
            if data is None:
                return None
            try:
                raw = (base64.b64decode if prog == "base64" else base64.b32decode)(
                    "".join(data.split())
                )
            except (binascii.Error, ValueError):
                return None
            return raw.decode("utf-8", "replace")
        if prog == "xxd" and "-r" in args:
            data = self.stdin_of(part, _depth)
            if data is None:
                return None
            try:
                return bytes.fromhex("".join(data.split())).decode("utf-8", "replace")
            except ValueError:
                return None
        if prog == "rev":
            data = self.stdin_of(part, _depth)
            if data is None:
                return None
            return "\n".join(line[::-1] for line in data.split("\n"))
        if prog == "pwd":
            return self.worktree + "\n"
        if prog == "git" and "rev-parse" in args:
            if any(a in ("--git-dir", "--git-common-dir", "--absolute-git-dir") for a in args):
                return self.worktree + "/.git\n"
            if "--show-toplevel" in args:
                return self.worktree + "\n"
        return None


def printf_format(fmt: str, args: list[str]) -> str:
    """`printf FORMAT ARGS...` for %s-style directives; the format repeats while args remain."""
    out: list[str] = []
    rest = list(args)
    while True:
        pieces: list[str] = []
        pos = 0
        used = 0
        for m in _PRINTF_DIRECTIVE.finditer(fmt):
            pieces.append(fmt[pos : m.start()])
            if m.group(0) == "%%":
                pieces.append("%")
            else:
                pieces.append(rest[used] if used < len(rest) else "")
                used += 1
            pos = m.end()
        pieces.append(fmt[pos:])
        out.append("".join(pieces))
        rest = rest[used:]
        if not rest or not used:
            break
    return "".join(out)
