"""Deny scanners for publishing (docs/policy.md, "Deny: D1-D4"): uploads to a package registry, raw
calls to a forge's write API, forge CLI calls that change the forge, and the word matching of
configured deny prefixes."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from gitsup.policy import facts
from gitsup.policy.decision import Decision, deny
from gitsup.policy.facts import ScanState
from gitsup.policy.normalise.expand import basename
from gitsup.policy.rules import RuleId

_FORGE_ENDPOINT = re.compile(
    r"/(pulls?|merge_requests|merges|releases|dispatches|contents|statuses|check-runs)\b"
    r"|/git/(refs|commits|trees|blobs|tags)\b|/branches/|/repository/"
    r"(commits|branches|files|merge_requests|tags|releases)\b"
)


_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# deny.payload: deny detection over a literal shell payload
Payload = Callable[[str, ScanState], "Decision | None"]


def publish_rule(
    prog: str, args: list[str], table: Mapping[str, tuple[tuple[str, ...], ...]], src: str
) -> Decision | None:
    entries = table.get(prog)
    if not entries:
        return None
    words, _ = facts.split_before_dd(args)
    # `npm run publish` runs a script named publish: invisible, so ask rather than deny
    for k, w in enumerate(words):
        if w in ("run", "run-script", "exec", "dlx", "x"):
            words = words[:k]
            break
    for seq in entries:
        if _subsequence(seq, words):
            return deny(
                RuleId.D1_REGISTRY, f"`{prog} {' '.join(seq)}` publishes to a registry", src
            )
    return None


def _subsequence(seq: Sequence[str], words: Sequence[str]) -> bool:
    i = 0
    for w in words:
        if i >= len(seq):
            break
        item = seq[i]
        if item.startswith("-"):
            ok = w == item or w.startswith(item + "=")
        else:
            ok = not w.startswith("-") and (w == item or ("*" in item and _glob(item, w)))
        if ok:
            i += 1
    return i >= len(seq)


def _glob(pattern: str, word: str) -> bool:
    import fnmatch

    return fnmatch.fnmatchcase(word, pattern)


def python_publish_rule(
    args: list[str], table: Mapping[str, tuple[tuple[str, ...], ...]], src: str
) -> Decision | None:
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            return publish_rule(args[i + 1], args[i + 2 :], table, src)
        if a.startswith("-m") and len(a) > 2:
            return publish_rule(a[2:], args[i + 1 :], table, src)
        if basename(a) == "setup.py":
            rest = args[i + 1 :]
            if any(r in ("upload", "upload_docs", "register") for r in rest):
                return deny(
                    RuleId.D1_REGISTRY, "`python setup.py upload` publishes to a registry", src
                )
            return None
        if not a.startswith("-"):
            return None
    return None


def raw_forge_rule(prog: str, args: list[str], src: str) -> Decision | None:
    method = ""
    data = False
    for i, a in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a in ("-X", "--request"):
            method = nxt
        elif a.startswith("-X") and len(a) > 2:
            method = a[2:]
        elif a.startswith("--request=") or a.startswith("--method="):
            method = a.split("=", 1)[1]
        elif a.split("=", 1)[0] in (
            "-d",
            "--data",
            "--data-raw",
            "--data-binary",
            "--data-urlencode",
            "-F",
            "--form",
            "--form-string",
            "--json",
            "-T",
            "--upload-file",
            "--post-data",
            "--post-file",
            "--body-data",
            "--body-file",
        ) or (a.startswith("-d") and len(a) > 2 and prog == "curl"):
            data = True
        elif prog in ("http", "https", "xh") and a.upper() in _MUTATING and a.isupper():
            method = a
    mutating = data or method.upper() in _MUTATING
    if mutating and any(_FORGE_ENDPOINT.search(a) for a in args if "/" in a):
        return deny(
            RuleId.D1_FORGE,
            f"`{prog}` sends a mutating request to a forge pull/merge/ref endpoint",
            src,
        )
    return None


def prefix_match(prefix: Sequence[str], argv: Sequence[str]) -> bool:
    if len(argv) < len(prefix):
        return False
    return all(p == a or ("*" in p and _glob(p, a)) for p, a in zip(prefix, argv, strict=False))


# -- forges and registries ---------------------------------------------------------------------
_GH_WITH_ARG = frozenset(
    {
        "-R",
        "--repo",
        "--hostname",
        "-X",
        "--method",
        "-H",
        "--header",
        "-f",
        "-F",
        "--field",
        "--raw-field",
        "--input",
        "-q",
        "--jq",
        "-t",
        "--template",
        "-p",
        "--preview",
        "-b",
        "--body",
        "--title",
        "-B",
        "--base",
        "-a",
        "--assignee",
        "-l",
        "--label",
        "-m",
        "--milestone",
        "--cache",
        "-r",
        "--reviewer",
        "--head",
        "--body-file",
    }
)


def forge_rule(
    prog: str, args: list[str], st: ScanState, src: str, payload: Payload
) -> Decision | None:
    """A forge CLI call that changes the remote forge (`payload` scans an alias's shell code)."""
    pos = facts.positionals(args, _GH_WITH_ARG)
    if not pos:
        return None
    group = pos[0]
    verb = pos[1] if len(pos) > 1 else ""
    pairs = st.policy.forge[prog]
    if (group, verb) in pairs or (group, "") in pairs:
        return deny(
            RuleId.D1_FORGE,
            f"`{prog} {group} {verb}`".replace(" `", "`") + " changes the remote forge",
            src,
        )
    if prog == "gh" and group == "api":
        method = facts.short_value(args, "X", ("--method",))
        fields = facts.has_flag(args, "fF", ("--field", "--raw-field", "--input"))
        if fields or any(m.upper() in _MUTATING for m in method):
            return deny(
                RuleId.D1_FORGE,
                "`gh api` with a mutating method or fields changes the remote forge",
                src,
            )
    if prog == "gh" and group == "alias" and verb == "set" and len(pos) >= 4:
        expansion = pos[3]
        if "--shell" in args or "-s" in args or expansion.startswith("!"):
            if payload(expansion.lstrip("!"), st) is not None:
                return deny(RuleId.D1_FORGE, "defines a gh alias that crosses the boundary", src)
        elif forge_rule(prog, expansion.split(), st, src, payload) is not None:
            return deny(RuleId.D1_FORGE, f"defines a gh alias for `gh {expansion}`", src)
    return None
