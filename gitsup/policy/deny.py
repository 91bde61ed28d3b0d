"""Deny detection (POLICY.md section 2) over the normalised form, with payload recursion."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import gitsup.policy.gitcmd as gitcmd
from gitsup.policy.braces import repair_braces
from gitsup.policy.context import MAX_DEPTH, ScanState
from gitsup.policy.decision import Decision, deny
from gitsup.policy.normalise import UNKNOWN, basename, has_glob, inside, is_ancestor, may_match
from gitsup.policy.parse import Part, Script, parse, split_glued
from gitsup.policy.rules import RuleId
from gitsup.policy.unwrap import find_roots, merge_env, unwrap

Env = Mapping[str, Sequence[str]]

_OUTPUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"})
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
_MUTATORS = frozenset(
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
_DEST_ONLY = frozenset({"cp", "install", "rsync"})
_PYTHON = re.compile(r"^python(\d(\.\d+)?)?$")
_FORGE_ENDPOINT = re.compile(
    r"/(pulls?|merge_requests|merges|releases|dispatches|contents|statuses|check-runs)\b"
    r"|/git/(refs|commits|trees|blobs|tags)\b|/branches/|/repository/"
    r"(commits|branches|files|merge_requests|tags|releases)\b"
)
_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SSH_WITH_ARG = frozenset("bcDEeFIiJLlmOoPpQRSWwB")


def scan_text(text: str, st: ScanState) -> Decision | None:
    """Deny detection over a shell string. Input bash cannot parse runs nothing from its broken
    line on, so only the complete lines before the first error are searched."""
    return scan_parsed(parse(text), text, st)


def scan_parsed(script: Script, text: str, st: ScanState) -> Decision | None:
    """Deny detection over a parsed string, working around parse errors and known
    tree-sitter-bash quirks (the repaired text is parsed again by tree-sitter)."""
    if "too-deep" in script.flags:
        return None
    if script.has_error:
        lines = text.split("\n")
        cut = min(script.error_line, len(lines))
        found = scan_text("\n".join(lines[:cut]), st) if cut > 0 else None
        if found is None:
            repaired = repair_braces(text)
            if repaired is not None:
                found = scan_script(parse(repaired), st)
        return found
    found = scan_script(script, st)
    if found is None and "newline-word" in script.flags:
        # tree-sitter-bash glues `a\n\\b` into one command; bash runs two.
        found = scan_script(parse(text.replace("\n\\", "\n \\")), st)
        split = split_glued(script)
        if found is None and split is not None:
            # ... and after a long pipeline also `sh\nx 2>&1`: end the command where bash does
            found = scan_script(parse(split), st)
    return found


_SUFFIX_SCAN_LINES = 64
_SUFFIX_SCAN_CHARS = 20_000


def scan_from_each_line(text: str, st: ScanState) -> Decision | None:
    """When tree-sitter cannot parse the whole text reliably (a parse error, or a known quirk),
    what bash would run from each later line on is parsed on its own too (a line can only
    start a new command or continue one, so every command starts at some line). Only a deny
    is taken from this: it makes an unreliable parse stricter, never looser. Called once, at
    the top (never from inside a scan), and bounded in lines."""
    lines = text.split("\n")
    limit = _SUFFIX_SCAN_LINES if len(text) <= _SUFFIX_SCAN_CHARS else 8
    for i in range(1, min(len(lines), limit)):
        rest = "\n".join(lines[i:])
        if not rest.strip():
            continue
        script = parse(rest)
        if "too-deep" in script.flags:
            continue
        if script.has_error:
            cut = min(script.error_line, len(lines) - i)
            if cut <= 0:
                continue
            script = parse("\n".join(lines[i : i + cut]))
            if script.has_error or "too-deep" in script.flags:
                continue
        found = scan_script(script, st)
        if found is not None:
            return found
    return None


def scan_script(script: Script, st: ScanState) -> Decision | None:
    st.collect_variables(script)
    _collect_git_aliases(script, st)
    if script.fork_bombs:
        return deny(
            RuleId.D4_FORK_BOMB,
            "a function that pipes into itself in the background (fork bomb)",
            script.fork_bombs[0],
        )
    for part in script.parts:
        d = scan_part(part, st)
        if d is not None:
            return d
    return None


def _collect_git_aliases(script: Script, st: ScanState) -> None:
    ex = st.expander()
    for part in script.parts:
        if part.kind != "cmd" or not part.words or basename(part.words[0].src) != "git":
            continue
        for argv in ex.argvs(part.words):
            call = gitcmd.parse_git(argv)
            if call.sub != "config":
                continue
            for w in gitcmd.config_writes(call.args):
                if w.key.startswith("alias.") and w.value is not None:
                    st.git_aliases.setdefault(w.key[6:], []).append(w.value)


def scan_part(part: Part, st: ScanState) -> Decision | None:
    ex = st.expander()
    for r in part.redirects:
        if (
            r.op in _OUTPUT_OPS
            and r.target is not None
            and not (r.op == ">&" and r.target.src.isdigit())
        ):
            for alt in ex.word(r.target):
                for value in alt:
                    d = _write_target(st.path(value), part.src, "redirection", st.dotglob)
                    if d is not None:
                        return d
    # `$(( ... ))` / `(( ... ))` that is not arithmetic is a subshell inside a substitution
    # for bash: search it as shell code.
    if part.kind == "arith" and part.src.startswith("((") and not part.src.startswith("for"):
        d = _arith_payload(part.src[1:-1], st)
        if d is not None:
            return d
    for w in part.words:
        for seg in w.segs:
            if seg.kind == "arith" and seg.text.startswith("$(("):
                d = _arith_payload(seg.text[2:-1], st)
                if d is not None:
                    return d
    d = _subscript_code(part, st)
    if d is not None:
        return d
    if part.kind not in ("cmd", "decl"):
        return None
    env: dict[str, list[str]] = {}
    for name, word in part.assigns:
        if word is not None:
            env.setdefault(name, []).extend(" ".join(a) for a in ex.word(word))
    # GIT_* set anywhere in the command (`export GIT_CONFIG_KEY_0=...; git x`) reach git
    for name, values in st.variables.items():
        if name.startswith("GIT_") and name not in env:
            env[name] = list(values)
    stdin = st.stdin_of(part)
    argvs = ex.argvs(part.words)
    for argv in argvs:
        d = check_argv(argv, env, part, st, stdin, 0)
        if d is not None:
            return d
    if argvs:
        _update_state(argvs[0], part, st)
    return None


# Builtins whose name operands (`a[sub]`) or operands bash evaluates as arithmetic: code in an
# array subscript runs even when the word is quoted (`[[ -v 'a[$(cmd)]' ]]`, `printf -v`).
_SUBSCRIPT_EVALUATORS = frozenset(
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


def _subscript_code(part: Part, st: ScanState) -> Decision | None:
    if "[" not in part.src and "$" not in part.src:
        return None  # no subscript, and no variable that could hold one
    texts: list[str]
    if part.kind == "arith":
        texts = [part.src.replace("'", "").replace('"', "")]
    elif part.kind in ("test", "decl") or (
        part.kind == "cmd" and part.words and basename(part.words[0].src) in _SUBSCRIPT_EVALUATORS
    ):
        ex = st.expander()
        texts = [v for w in part.words for alt in ex.word(w) for v in alt]
        texts += [" ".join(a) for _, w in part.assigns if w is not None for a in ex.word(w)]
    else:
        texts = []
    for w in part.words:
        for seg in w.segs:
            if seg.kind in ("arith", "opaque"):
                texts.append(seg.text.replace("'", "").replace('"', ""))
    for text in texts:
        d = _subscript_text(text, st)
        if d is not None:
            return d
    return None


def _subscript_text(text: str, st: ScanState) -> Decision | None:
    k = text.find("[")
    if k < 0:
        return None
    end = text.rfind("]")
    sub = text[k : end + 1] if end > k else text[k:]
    if "$(" in sub or "`" in sub:
        return payload("echo " + sub.replace("'", ""), st)
    return None


def _arith_payload(text: str, st: ScanState) -> Decision | None:
    if parse(text).has_error:
        return None
    return payload(text, st)


def _write_target(path: str, part: str, how: str, dotglob: bool = False) -> Decision | None:
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


def check_argv(
    argv: list[str], env: Env, part: Part, st: ScanState, stdin: str | None, wdepth: int
) -> Decision | None:
    if not argv or wdepth > 6:
        return None
    d = _rules(argv, env, part, st, stdin, wdepth)
    if d is not None:
        return d
    for inner in unwrap(argv, st.policy, stdin):
        if inner.payload is not None:
            d = payload(inner.payload, st)
        elif inner.argv:
            d = check_argv(inner.argv, merge_env(env, inner.env), part, st, stdin, wdepth + 1)
        if d is not None:
            return d
    return None


def payload(text: str, st: ScanState) -> Decision | None:
    """Recurse into a literal shell payload (bash -c, eval, heredoc into a shell, ...)."""
    if UNKNOWN in text and not text.replace(UNKNOWN, "").strip():
        return None
    if st.depth >= MAX_DEPTH:
        return None
    st.depth += 1
    try:
        return scan_text(text.replace(UNKNOWN, "__unknown__"), st)
    finally:
        st.depth -= 1


def _rules(
    argv: list[str], env: Env, part: Part, st: ScanState, stdin: str | None, wdepth: int
) -> Decision | None:
    policy = st.policy
    prog = basename(argv[0])
    args = argv[1:]
    src = part.src
    for prefix in policy.deny_prefixes:
        if _prefix_match(prefix, [prog, *args]):
            return deny(RuleId.DENY_REPO, f"the repository policy denies `{' '.join(prefix)}`", src)
    if prog == "git" or prog.startswith("git-") or prog == "hub":
        d = git_rules(argv, env, part, st, stdin, wdepth)
        if d is not None:
            return d
    if prog in policy.forge:
        d = _forge(prog, args, st, src)
        if d is not None:
            return d
    d = _publish(prog, args, policy.publish, src)
    if d is not None:
        return d
    if _PYTHON.match(prog):
        d = _python_publish(args, policy.publish, src)
        if d is not None:
            return d
    if prog in policy.http_clients:
        d = _raw_forge(prog, args, src)
        if d is not None:
            return d
    d = _destructive(prog, args, st, src)
    if d is not None:
        return d
    d = _hooks(prog, args, st, src)
    if d is not None:
        return d
    return _execution(prog, args, env, part, st, stdin)


# -- git ---------------------------------------------------------------------------------------
def git_rules(
    argv: list[str], env: Env, part: Part, st: ScanState, stdin: str | None, wdepth: int
) -> Decision | None:
    policy = st.policy
    src = part.src
    call = gitcmd.parse_git(argv)
    if gitcmd.sets_hooks_path(call, env):
        return deny(RuleId.D3_HOOKS_PATH, "sets core.hooksPath, which disables the Git hooks", src)
    defined = gitcmd.alias_definitions(call, env)
    for name, value in defined:
        if _alias_is_deny(value, st, wdepth):
            return deny(
                RuleId.D1_ALIAS,
                f"defines the git alias {name!r} as {value!r}, which "
                "publishes or crosses the boundary",
                src,
            )
    sub = call.sub
    if sub is None:
        return None
    if basename(argv[0]) == "hub" and sub in ("pull-request", "fork", "create", "delete"):
        return deny(RuleId.D1_FORGE, f"`hub {sub}` changes the remote forge", src)
    if sub in policy.git_publish:
        return deny(RuleId.D1_PUSH, f"`git {sub}` publishes to a remote", src)
    pos = gitcmd.positionals(call.args)
    for group, verb in policy.git_publish_nested:
        if sub == group and verb in pos:
            return deny(RuleId.D1_PUSH, f"`git {group} {verb}` publishes to a remote", src)
    if sub == "config":
        for w in gitcmd.config_writes(call.args):
            if w.key == "core.hookspath" or (w.key == "core" and "section" in w.action):
                return deny(
                    RuleId.D3_HOOKS_PATH, "writes core.hooksPath, which disables the Git hooks", src
                )
            if (
                w.key.startswith("alias.")
                and w.value is not None
                and _alias_is_deny(w.value, st, wdepth)
            ):
                return deny(
                    RuleId.D1_ALIAS,
                    f"defines the git alias {w.key[6:]!r} as {w.value!r} (alias poisoning)",
                    src,
                )
    d2 = gitcmd.d2_reason(call, policy, st.head_protected, stdin)
    if d2 is not None:
        return deny(d2[0], d2[1], src)
    # aliases expand (git ignores aliases that shadow builtins)
    if sub not in gitcmd.BUILTINS:
        values = [v for n, v in defined if n == sub] + st.git_aliases.get(sub, [])
        for value in values:
            d = _expand_alias(value, call, env, part, st, stdin, wdepth)
            if d is not None:
                return d
    return None


def _alias_words(value: str, st: ScanState) -> list[str]:
    script = parse("git " + value)
    if script.has_error or not script.parts:
        return ["git", *value.split()]
    ex = st.expander()
    argvs = ex.argvs(script.parts[0].words)
    return argvs[0] if argvs else ["git"]


def _alias_is_deny(value: str, st: ScanState, wdepth: int) -> bool:
    if "push" in value.lower():
        return True
    if wdepth > 4:
        return False
    if value.startswith("!"):
        return payload(value[1:], st) is not None
    fake = Part("git " + value, "cmd")
    return git_rules(_alias_words(value, st), {}, fake, st, None, wdepth + 1) is not None


def _expand_alias(
    value: str,
    call: gitcmd.GitCall,
    env: Env,
    part: Part,
    st: ScanState,
    stdin: str | None,
    wdepth: int,
) -> Decision | None:
    if value.startswith("!"):
        return payload(value[1:] + " " + " ".join(call.args), st)
    words = _alias_words(value, st)
    return check_argv([*words, *call.args], env, part, st, stdin, wdepth + 1)


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


def _forge(prog: str, args: list[str], st: ScanState, src: str) -> Decision | None:
    pos = gitcmd.positionals(args, _GH_WITH_ARG)
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
        method = gitcmd.short_value(args, "X", ("--method",))
        fields = gitcmd.has_flag(args, "fF", ("--field", "--raw-field", "--input"))
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
        elif _forge(prog, expansion.split(), st, src) is not None:
            return deny(RuleId.D1_FORGE, f"defines a gh alias for `gh {expansion}`", src)
    return None


def _publish(
    prog: str, args: list[str], table: Mapping[str, tuple[tuple[str, ...], ...]], src: str
) -> Decision | None:
    entries = table.get(prog)
    if not entries:
        return None
    words, _ = gitcmd.split_before_dd(args)
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


def _python_publish(
    args: list[str], table: Mapping[str, tuple[tuple[str, ...], ...]], src: str
) -> Decision | None:
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            return _publish(args[i + 1], args[i + 2 :], table, src)
        if a.startswith("-m") and len(a) > 2:
            return _publish(a[2:], args[i + 1 :], table, src)
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


def _raw_forge(prog: str, args: list[str], src: str) -> Decision | None:
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


def _operands(args: Sequence[str]) -> list[str]:
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


def _destructive(prog: str, args: list[str], st: ScanState, src: str) -> Decision | None:
    if prog == "rm":
        if any(a == "--no-preserve-root" for a in args):
            return deny(RuleId.D4_RM_ROOT, "`rm --no-preserve-root`", src)
        recursive = gitcmd.has_flag(args, "rR", ("--recursive",))
        if recursive:
            for op in _operands(args):
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
    if prog in ("chmod", "chown", "chgrp") and gitcmd.has_flag(args, "R", ("--recursive",)):
        for op in _operands(args):
            for p in _target_paths(op, st):
                if p == "/" or (p.count("/") == 1 and p != "/"):
                    return deny(RuleId.D4_CHMOD_ROOT, f"recursive {prog} of {p}", src)
    if prog.startswith("mkfs"):
        return deny(RuleId.D4_BLOCK_DEVICE, f"`{prog}` formats a device", src)
    if prog == "wipefs" and gitcmd.has_flag(args, "a", ("--all",)):
        return deny(RuleId.D4_BLOCK_DEVICE, "`wipefs -a` wipes a device", src)
    if prog in ("shred", "dd", "blkdiscard", "badblocks") or prog == "cat":
        for a in args:
            value = a.split("=", 1)[1] if (prog == "dd" and a.startswith("of=")) else a
            if prog == "dd" and not a.startswith("of="):
                continue
            if prog == "cat":
                break
            if _BLOCK_DEVICE.match(st.path(value)):
                return deny(
                    RuleId.D4_BLOCK_DEVICE, f"`{prog}` writes the block device {value}", src
                )
    return None


def _hooks(prog: str, args: list[str], st: ScanState, src: str) -> Decision | None:
    written = operand_writes(prog, args)
    for op in written:
        if UNKNOWN not in op:
            d = _write_target(st.path(op), src, f"`{prog}`", st.dotglob)
            if d is not None:
                return d
    if prog not in _MUTATORS and prog != "dd":
        return None
    if prog == "sed" and not gitcmd.has_flag(args, "i", ("--in-place",)):
        return None
    if prog == "dd":
        ops = [a[3:] for a in args if a.startswith("of=")]
    elif prog in _DEST_ONLY:
        target = gitcmd.short_value(args, "t", ("--target-directory",))
        ops = target or _operands(args)[-1:]
    else:
        ops = _operands(args)
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
        ops = _operands(args)
        return ops[1:2]
    if prog in ("sort", "tree", "base64"):
        return gitcmd.short_value(args, "o", ("--output",) if prog != "tree" else ())
    if prog == "go" and args[:1] in (["build"], ["test"]):
        return [a[3:] if a.startswith("-o=") else "" for a in args if a.startswith("-o=")] + [
            args[k + 1] for k, a in enumerate(args[:-1]) if a == "-o"
        ]
    return []


# -- execution of payloads and downloads ---------------------------------------------------
def _downloads_in(part: Part | None, st: ScanState) -> bool:
    """Is some earlier stage of the pipeline feeding this part a downloader?"""
    seen = 0
    while part is not None and seen < 32:
        if part.words and any(basename(w.src) in st.policy.downloaders for w in part.words[:6]):
            return True
        part = part.pipe_prev
        seen += 1
    return False


def _subst_downloads(part: Part, st: ScanState) -> bool:
    for w in part.words:
        for s in w.segs:
            if s.inner and any(
                p.words and any(basename(x.src) in st.policy.downloaders for x in p.words[:6])
                for p in s.inner
            ):
                return True
    for r in part.redirects:
        if r.target is not None:
            for s in r.target.segs:
                if s.inner and any(
                    p.words and basename(p.words[0].src) in st.policy.downloaders for p in s.inner
                ):
                    return True
    return False


def _shell_script_arg(args: list[str]) -> tuple[str | None, str | None, bool]:
    """(-c script, script file, reads stdin) for a shell's arguments."""
    i = 0
    command_mode = False
    while i < len(args):
        a = args[i]
        if a == "--" or a == "-":
            i += 1
            break
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if a.startswith("--command="):
            return a.split("=", 1)[1], None, False
        if a == "--command":
            return (args[i + 1] if i + 1 < len(args) else None), None, False
        if a.startswith("--"):
            i += 1
            continue
        if (a.startswith("-") or a.startswith("+")) and len(a) > 1:
            if "c" in a[1:]:
                command_mode = True
            i += 1
            continue
        break
    rest = args[i:]
    if command_mode:
        return (rest[0] if rest else None), None, False
    if rest:
        return None, rest[0], False
    return None, None, True


def _execution(
    prog: str, args: list[str], env: Env, part: Part, st: ScanState, stdin: str | None
) -> Decision | None:
    policy = st.policy
    src = part.src
    is_shell = prog in policy.shells
    is_interp = prog in policy.interpreters or bool(_PYTHON.match(prog))
    if is_shell or is_interp or prog in ("eval", "source", ".", "sudo", "xargs"):
        if (is_shell or is_interp or prog == "sudo") and _downloads_in(part.pipe_prev, st):
            return deny(
                RuleId.D4_DOWNLOAD_EXEC, "downloaded content is piped into an interpreter", src
            )
        if (is_shell or is_interp or prog in ("eval", "source", ".")) and _subst_downloads(
            part, st
        ):
            return deny(
                RuleId.D4_DOWNLOAD_EXEC,
                "downloaded content is executed through a substitution",
                src,
            )
    if is_shell:
        script, file, reads_stdin = _shell_script_arg(args)
        if script is not None:
            return payload(script, st)
        if file is not None:
            return _run_file(file, st, src)
        if reads_stdin and stdin is not None:
            return payload(stdin, st)
        return None
    if is_interp:
        for a in args:
            if not a.startswith("-"):
                if st.path(a) in st.downloaded:
                    return deny(RuleId.D4_DOWNLOAD_EXEC, f"runs the downloaded file {a}", src)
                break
        return None
    if prog == "eval":
        return payload(" ".join(args), st)
    if prog in ("source", "."):
        return _run_file(args[0], st, src) if args else None
    if prog == "alias":
        for a in args:
            _, eq, value = a.partition("=")
            if eq:
                d = payload(value, st)
                if d is not None:
                    return d
        return None
    if prog in ("su", "runuser"):
        for i, a in enumerate(args):
            if a in ("-c", "--command") and i + 1 < len(args):
                return payload(args[i + 1], st)
            if a.startswith("--command="):
                return payload(a.split("=", 1)[1], st)
        return None
    if prog in ("ssh", "mosh"):
        i = 0
        while i < len(args) and args[i].startswith("-"):
            a = args[i]
            i += 2 if (len(a) == 2 and a[1] in _SSH_WITH_ARG) else 1
        rest = args[i + 1 :]
        if rest:
            return payload(" ".join(rest), st)
        if stdin is not None:
            return payload(stdin, st)
        return None
    # a program named by a path: a script written or downloaded earlier
    if "/" in part.words[0].src if part.words else False:
        # a shell under another name (`cp /bin/sh ./x && ./x -c '...'`): its -c payload
        for k, a in enumerate(args[:-1]):
            if a == "-c" or (a.startswith("-") and not a.startswith("--") and a.endswith("c")):
                d = payload(args[k + 1], st)
                if d is not None:
                    return d
                break
        return _run_file(part.words[0].src if UNKNOWN not in prog else prog, st, src, direct=True)
    return None


def _run_file(name: str, st: ScanState, src: str, direct: bool = False) -> Decision | None:
    if UNKNOWN in name:
        return None
    path = st.path(name)
    if path in st.downloaded:
        return deny(RuleId.D4_DOWNLOAD_EXEC, f"executes the downloaded file {name}", src)
    content = st.files.get(path)
    if content is not None:
        return payload(content, st)
    return None


# -- state ------------------------------------------------------------------------------------
def _update_state(argv: list[str], part: Part, st: ScanState) -> None:
    prog = basename(argv[0]) if argv else ""
    args = argv[1:]
    ex = st.expander()
    is_download = prog in st.policy.downloaders
    for r in part.redirects:
        if r.op in (">", ">>", ">|", "&>", "&>>") and r.target is not None:
            path = st.path(ex.value(r.target))
            if is_download:
                st.downloaded.add(path)
                continue
            content = st.stdout_of(part)
            if content is not None:
                st.files[path] = (st.files.get(path, "") if r.op in (">>", "&>>") else "") + content
    if is_download:
        for i, a in enumerate(args):
            nxt = args[i + 1] if i + 1 < len(args) else ""
            if (
                a in ("-o", "--output", "-O", "--output-document")
                and nxt
                and not (prog == "curl" and a == "-O")
            ):
                if nxt != "-":
                    st.downloaded.add(st.path(nxt))
            elif a.startswith("--output=") or a.startswith("--output-document="):
                st.downloaded.add(st.path(a.split("=", 1)[1]))
            elif a.startswith("-o") and len(a) > 2 and prog == "curl":
                st.downloaded.add(st.path(a[2:]))
            elif (
                a.startswith("-")
                and not a.startswith("--")
                and len(a) > 2
                and nxt
                and a[-1] in ("o" if prog == "curl" else "O")
            ):
                st.downloaded.add(st.path(nxt))
        urls = [a for a in args if "://" in a]
        remote_name = prog == "wget" and not any(
            a.startswith("-O") or a.startswith("--output-document") for a in args
        )
        remote_name = remote_name or (
            prog == "curl"
            and any(
                a in ("-O", "--remote-name")
                or (a.startswith("-") and not a.startswith("--") and "O" in a)
                for a in args
            )
        )
        if remote_name:
            for u in urls:
                name = u.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                if name:
                    st.downloaded.add(st.path(name))
    if prog == "tee":
        data = st.stdin_of(part)
        for op in _operands(args):
            if data is not None:
                st.files[st.path(op)] = data
    if prog in ("cp", "mv", "install") and len(_operands(args)) == 2:
        src_, dst = (st.path(x) for x in _operands(args))
        if src_ in st.files:
            st.files[dst] = st.files[src_]
        if src_ in st.downloaded:
            st.downloaded.add(dst)
    if prog == "git":
        call = gitcmd.parse_git(argv)
        if not any(name == "-C" for name, _ in call.options):
            state = gitcmd.switches_to(call, st.policy)
            if state is not None:
                st.head_protected = state


def _prefix_match(prefix: Sequence[str], argv: Sequence[str]) -> bool:
    if len(argv) < len(prefix):
        return False
    return all(p == a or ("*" in p and _glob(p, a)) for p, a in zip(prefix, argv, strict=False))


def under(path: str, root: str) -> bool:
    return inside(path, root)
