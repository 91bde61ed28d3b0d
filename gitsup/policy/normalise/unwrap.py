"""Wrappers (docs/policy.md, "Decision order", step 2): the command a wrapper runs, for deny detection only."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gitsup.policy.config import Policy, WrapperSpec
from gitsup.policy.normalise.expand import UNKNOWN, basename

_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

# Wrappers handled in code, besides the policy's wrappers (a program name the deny scan judges:
# facts.JUDGED).
UNWRAPPED = frozenset({"xargs", "find", "parallel"})


@dataclass
class Inner:
    """What a wrapper runs: an argv (with extra environment) or a shell payload."""

    via: str
    argv: list[str] | None = None
    env: dict[str, list[str]] = field(default_factory=dict)
    payload: str | None = None


def _wrapper(argv: Sequence[str], policy: Policy) -> tuple[str, WrapperSpec, int] | None:
    if not argv:
        return None
    prog = basename(argv[0])
    if len(argv) >= 2:
        two = f"{prog} {argv[1]}"
        spec = policy.wrappers.get(two)
        if spec is not None:
            return two, spec, 2
        if len(argv) >= 3:
            three = f"{two} {argv[2]}"
            spec = policy.wrappers.get(three)
            if spec is not None:
                return three, spec, 3
    spec = policy.wrappers.get(prog)
    if spec is not None:
        return prog, spec, 1
    return None


def _skip_options(
    args: Sequence[str], spec: WrapperSpec, name: str
) -> tuple[int, dict[str, list[str]], list[str], bool]:
    """Index of the wrapped command in `args`, env assignments, option values, ambiguous?"""
    env: dict[str, list[str]] = {}
    values: list[str] = []
    ambiguous = False
    i = 0
    n = len(args)
    with_arg = set(spec.opts_with_arg)
    while i < n:
        a = args[i]
        if a == "--":
            i += 1
            break
        if name in ("env", "sudo", "doas") and _ASSIGN.match(a):
            key, _, val = a.partition("=")
            env.setdefault(key, []).append(val)
            i += 1
            continue
        if not a.startswith("-") or a == "-":
            break
        if a.startswith("--"):
            opt, eq, _ = a.partition("=")
            if not eq and opt in with_arg:
                values.append(args[i + 1] if i + 1 < n else "")
                i += 2
                continue
            if eq:
                values.append(a.partition("=")[2])
            i += 1
            continue
        # short cluster: the first letter that takes a value swallows the rest or next word
        consumed = False
        known = True
        for k in range(1, len(a)):
            opt = "-" + a[k]
            if opt in with_arg:
                rest = a[k + 1 :]
                if rest:
                    values.append(rest)
                else:
                    values.append(args[i + 1] if i + 1 < n else "")
                    consumed = True
                break
            if name == "command" and a[k] in "vV":
                return n, env, values, False  # `command -v` does not run anything
        else:
            known = name in ("command", "exec", "nohup", "setsid", "time", "busybox")
        if not known:
            ambiguous = True
        i += 2 if consumed else 1
    # env -S "string": split into words
    if name == "env":
        split = [v for v in values if " " in v]
        if split:
            ambiguous = True
    return i, env, values, ambiguous


def wrapper_firsts(policy: Policy) -> frozenset[str]:
    """The first words of the policy's wrapper entries (once per policy)."""
    firsts = policy._deny_names.get("wrappers")
    if firsts is None:
        firsts = policy._deny_names["wrappers"] = frozenset(k.split()[0] for k in policy.wrappers)
    return firsts


def unwrap(argv: Sequence[str], policy: Policy, stdin: str | None) -> list[Inner]:
    """The commands run by this wrapper invocation (empty when it is not a wrapper)."""
    if not argv:
        return []
    prog = basename(argv[0])
    if prog in UNWRAPPED:
        if prog == "xargs":
            return _xargs(argv, stdin)
        if prog == "find":
            return _find(argv)
        if prog == "parallel":
            return _parallel(argv)
    firsts = wrapper_firsts(policy)
    if prog not in firsts:
        return []  # every wrapper entry starts with its program's name
    found = _wrapper(argv, policy)
    if found is None:
        return []
    name, spec, width = found
    rest = list(argv[width:])
    idx, env, values, ambiguous = _skip_options(rest, spec, name)
    out: list[Inner] = []
    if name == "env":
        for v in values:
            if " " in v:  # env -S 'cmd args'
                out.append(Inner(name, payload=v + " " + " ".join(rest[idx:])))
    if name in ("script", "flock", "npx", "npm exec", "su", "runuser"):
        for k, a in enumerate(rest):
            cluster = a.startswith("-") and not a.startswith("--") and a.endswith("c")
            if (a in ("--command", "--call") or cluster) and k + 1 < len(rest):
                out.append(Inner(name, payload=rest[k + 1]))
            elif a.startswith("--command=") or a.startswith("--call="):
                out.append(Inner(name, payload=a.split("=", 1)[1]))
        if name == "script":
            return out
    idx += spec.positionals
    cmd = rest[idx:]
    if spec.joined and cmd:
        out.append(Inner(name, payload=" ".join(cmd)))
        return out
    if cmd:
        out.append(Inner(name, argv=cmd, env=env))
    if ambiguous:
        # An option we do not know may or may not take a value: try every later start.
        for k in range(1, len(rest)):
            if k != idx and not rest[k].startswith("-"):
                out.append(Inner(name, argv=rest[k:], env=env))
    return out


_XARGS_WITH_ARG = frozenset(
    {
        "-I",
        "-i",
        "-L",
        "-l",
        "-n",
        "-P",
        "-s",
        "-d",
        "-E",
        "-e",
        "-a",
        "--arg-file",
        "--delimiter",
        "--max-args",
        "--max-lines",
        "--max-procs",
        "--max-chars",
        "--eof",
        "--replace",
        "--process-slot-var",
    }
)


def _xargs(argv: Sequence[str], stdin: str | None) -> list[Inner]:
    args = list(argv[1:])
    i = 0
    replace: str | None = None
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-"):
            break
        opt, eq, val = a.partition("=")
        if opt in ("-I", "--replace") or (opt.startswith("-I") and len(opt) > 2):
            replace = (
                val
                if eq
                else (a[2:] if len(a) > 2 else (args[i + 1] if i + 1 < len(args) else "{}"))
            )
            if opt == "-I" and not eq:
                i += 1
        elif opt == "-i" or (opt.startswith("-i") and len(opt) > 2):
            replace = a[2:] or "{}"
        elif (opt in _XARGS_WITH_ARG and not eq and len(a) == 2) or (
            opt in ("--arg-file", "--delimiter", "--max-args", "--max-procs", "--eof") and not eq
        ):
            i += 1
        i += 1
    cmd = args[i:] or ["echo"]
    items = stdin.split() if stdin is not None else [UNKNOWN]
    lines = stdin.splitlines() if stdin is not None else [UNKNOWN]
    if replace:
        return [
            Inner("xargs", argv=[c.replace(replace, line) for c in cmd])
            for line in lines[:16] or [UNKNOWN]
        ]
    return [Inner("xargs", argv=[*cmd, *items[:64]])]


_FIND_EXEC = ("-exec", "-execdir", "-ok", "-okdir")


def find_roots(args: Sequence[str]) -> list[str]:
    roots: list[str] = []
    for a in args:
        if a.startswith("-") or a in ("(", "!", ")", ","):
            break
        roots.append(a)
    return roots or ["."]


def _find(argv: Sequence[str]) -> list[Inner]:
    args = list(argv[1:])
    roots = find_roots([a for a in args if a not in ("-H", "-L", "-P")])
    out: list[Inner] = []
    i = 0
    while i < len(args):
        if args[i] in _FIND_EXEC:
            j = i + 1
            while j < len(args) and args[j] not in (";", "+", "\\;"):
                j += 1
            cmd = args[i + 1 : j]
            if cmd:
                for root in roots[:8]:
                    out.append(Inner("find", argv=[c.replace("{}", root) for c in cmd]))
            i = j
        i += 1
    return out


def _parallel(argv: Sequence[str]) -> list[Inner]:
    args = list(argv[1:])
    if ":::" in args:
        k = args.index(":::")
        cmd, items = args[:k], [a for a in args[k + 1 :] if a not in (":::", "::::")]
    else:
        cmd, items = args, []
    cmd = [c for c in cmd if not c.startswith("-")] if cmd and cmd[0].startswith("-") else cmd
    out: list[Inner] = []
    if cmd:
        for item in items[:16] or [UNKNOWN]:
            out.append(Inner("parallel", payload=" ".join([*cmd, item])))
    else:
        for item in items[:16]:
            out.append(Inner("parallel", payload=item))
    return out


def merge_env(
    a: Mapping[str, Sequence[str]], b: Mapping[str, Sequence[str]]
) -> dict[str, list[str]]:
    out = {k: list(v) for k, v in a.items()}
    for k, v in b.items():
        out.setdefault(k, []).extend(v)
    return out
