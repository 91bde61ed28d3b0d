"""Deny detection (docs/policy.md, "Deny: D1-D4") over the normalised form, with payload recursion."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import gitsup.policy.deny.inert as deny_inert
from gitsup.policy import facts
from gitsup.policy.config import Policy
from gitsup.policy.decision import Decision, deny
from gitsup.policy.deny.execution import downloads_in, shell_script_arg, subst_downloads
from gitsup.policy.deny.inert import inert, inert_name, relevant_names
from gitsup.policy.deny.publish import (
    forge_rule,
    prefix_match,
    publish_rule,
    python_publish_rule,
    raw_forge_rule,
)
from gitsup.policy.deny.state import update_state
from gitsup.policy.deny.writes import (
    destructive_rule,
    hooks_rule,
    write_target_rule,
)
from gitsup.policy.facts import (
    DESTRUCTIVE,
    EXECUTORS,
    GIT,
    GIT_PREFIX,
    HOOK_WRITERS,
    MAX_DEPTH,
    MKFS_PREFIX,
    PYTHON,
    STATE,
    SUBSCRIPT_EVALUATORS,
    VARIABLE_SETTERS,
    ScanState,
)
from gitsup.policy.normalise.braces import repair_braces
from gitsup.policy.normalise.expand import UNKNOWN, basename
from gitsup.policy.normalise.unwrap import UNWRAPPED, merge_env, unwrap, wrapper_firsts
from gitsup.policy.parse.parser import parse
from gitsup.policy.parse.script import Part, Script, plain_argv, split_glued
from gitsup.policy.rules import RuleId

Env = Mapping[str, Sequence[str]]

_NO_ENV: Env = MappingProxyType({})  # a plain part's environment without GIT_* variables
_OUTPUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"})
_SSH_WITH_ARG = frozenset("bcDEeFIiJLlmOoPpQRSWwB")


def scan_command(command: str, script: Script, st: ScanState) -> Decision | None:
    """The deny decision for a whole command string and its parse (`script`), or None: the
    classifier's deny step (docs/policy.md, "Decision order")."""
    if script.has_error or script.flags:
        found = scan_parsed(script, command, st)
    else:
        found = scan_script(script, st)  # what `scan_parsed` does for a clean parse
    if found is None and (script.has_error or "newline-word" in script.flags):
        found = scan_from_each_line(command, st)
    return found


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
    # Inert parts (deny/inert.py) assign nothing, define no alias and match no rule: only the
    # others are collected from and scanned.
    if deny_inert.ENABLED:
        # Plain parts (`plain_argv`) assign a variable only through `printf -v` or `read` and
        # define a git alias only with `config` among their words: the others are not
        # collected from (they would add nothing).
        policy = st.policy
        names = relevant_names(policy)
        todo: list[tuple[Part, list[str] | None]] = []
        setters: list[Part] = []
        configs: list[Part] = []
        for p in script.parts:
            argv = plain_argv(p)
            if argv is None:
                if names is not None and inert(p, names):
                    continue
                todo.append((p, None))
                setters.append(p)
                configs.append(p)
                continue
            head = p.words[0].src
            if (
                names is not None
                and "/" not in head
                and "/" not in argv[0]
                and _families(policy, argv[0]) & _F_INERT
            ):
                continue  # `inert_name`, remembered with the program's rule families
            todo.append((p, argv))
            if head in VARIABLE_SETTERS:
                setters.append(p)
            if "config" in argv:
                configs.append(p)
        if setters:
            st.collect_variables(setters)
        if configs:
            collect_git_aliases(configs, st)
    else:
        todo = [(p, None) for p in script.parts]
        if todo:
            st.collect_variables(script.parts)
            collect_git_aliases(script.parts, st)
    if script.fork_bombs:
        return deny(
            RuleId.D4_FORK_BOMB,
            "a function that pipes into itself in the background (fork bomb)",
            script.fork_bombs[0],
        )
    for part, plain in todo:
        d = scan_part(part, st) if plain is None else _scan_plain(part, plain, st)
        if d is not None:
            return d
    return None


def collect_git_aliases(parts: list[Part], st: ScanState) -> None:
    ex = st.expander()
    for part in parts:
        if part.kind != "cmd" or not part.words or basename(part.words[0].src) != "git":
            continue
        for argv in ex.argvs(part.words):
            if "config" not in argv:
                continue  # the subcommand is one of the words
            call = facts.parse_git(argv)
            if call.sub != "config":
                continue
            for w in facts.config_writes(call.args):
                if w.key.startswith("alias.") and w.value is not None:
                    st.git_aliases.setdefault(w.key[6:], []).append(w.value)


def scan_part(part: Part, st: ScanState) -> Decision | None:
    if deny_inert.ENABLED:
        argv = plain_argv(part)
        if argv is not None:
            return _scan_plain(part, argv, st)
    ex = st.expander()
    for r in part.redirects:
        if (
            r.op in _OUTPUT_OPS
            and r.target is not None
            and not (r.op == ">&" and r.target.src.isdigit())
        ):
            for alt in ex.word(r.target):
                for value in alt:
                    d = write_target_rule(st.path(value), part.src, "redirection", st.dotglob)
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
        d = check_argv(argv, env, part, st, stdin)
        if d is not None:
            return d
    if argvs:
        update_state(argvs[0], part, st)
    return None


def _scan_plain(part: Part, argv: list[str], st: ScanState) -> Decision | None:
    """`scan_part` of a part with a plain argument vector: it has no redirection, no
    arithmetic, no assignment and one argument vector, so only the subscript, the rules and
    the state steps can find or record something."""
    d = _subscript_code(part, st)
    if d is not None:
        return d
    env: Env = _NO_ENV
    if st.variables:
        env = {name: list(v) for name, v in st.variables.items() if name.startswith("GIT_")}
    stdin = st.stdin_of(part) if part.pipe_prev is not None else None
    prog = basename(argv[0])
    mask = _families(st.policy, prog)
    d = _check(Invocation(argv, prog, mask, env, part, stdin, 0), st)
    if d is not None:
        return d
    if mask & _F_STATE:
        update_state(argv, part, st)
    return None


def _subscript_code(part: Part, st: ScanState) -> Decision | None:
    if "[" not in part.src and "$" not in part.src:
        return None  # no subscript, and no variable that could hold one
    texts: list[str]
    if part.kind == "arith":
        texts = [part.src.replace("'", "").replace('"', "")]
    elif part.kind in ("test", "decl") or (
        part.kind == "cmd" and part.words and basename(part.words[0].src) in SUBSCRIPT_EVALUATORS
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


class Invocation:
    """One argument vector the deny rules judge, with what they judge it in: the part it
    comes from (its source text and words), the environment the command sets for it, the
    literal data on its stdin, and how many wrappers or aliases deep it was found (`wdepth`).
    The scan's own state (variables, files, aliases, payload depth) is the `ScanState`."""

    __slots__ = ("argv", "env", "mask", "part", "prog", "stdin", "wdepth")

    def __init__(
        self,
        argv: list[str],
        prog: str,
        mask: int,
        env: Env,
        part: Part,
        stdin: str | None,
        wdepth: int,
    ) -> None:
        self.argv = argv
        self.prog = prog  # basename(argv[0])
        self.mask = mask  # the rule families that judge `prog` (`_families`)
        self.env = env
        self.part = part
        self.stdin = stdin
        self.wdepth = wdepth


def check_argv(
    argv: list[str],
    env: Env,
    part: Part,
    st: ScanState,
    stdin: str | None,
    wdepth: int = 0,
) -> Decision | None:
    if not argv or wdepth > 6:
        return None
    prog = basename(argv[0])
    return _check(Invocation(argv, prog, _families(st.policy, prog), env, part, stdin, wdepth), st)


def _check(inv: Invocation, st: ScanState) -> Decision | None:
    """`check_argv` once the program's name and rule families are known."""
    d = _rules(inv, st)
    if d is not None:
        return d
    if not inv.mask & _F_WRAPPER and deny_inert.ENABLED:
        return None  # `unwrap` finds no wrapper
    for inner in unwrap(inv.argv, st.policy, inv.stdin):
        if inner.payload is not None:
            d = payload(inner.payload, st)
        elif inner.argv:
            env = merge_env(inv.env, inner.env)
            d = check_argv(inner.argv, env, inv.part, st, inv.stdin, inv.wdepth + 1)
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


# The rule families of `_rules`, in the order they run.
_F_GIT, _F_FORGE, _F_PUBLISH, _F_PY_PUBLISH, _F_HTTP, _F_DESTRUCTIVE, _F_HOOKS, _F_EXEC = (
    1 << k for k in range(8)
)
# ... and whether `unwrap` may find a wrapper, `update_state` record something, and whether a
# part naming the program (without `/`) is inert (`deny/inert.py` `inert_name`).
_F_WRAPPER = 1 << 8
_F_STATE = 1 << 9
_F_INERT = 1 << 10
_DISPATCH_LIMIT = 4096


def _families(policy: Policy, prog: str) -> int:
    """The rule families that judge the program `prog` (a bit mask of `_F_*`): the name tests
    of `_rules`, made once per policy and program name, then one dict lookup."""
    table = policy._deny_dispatch
    mask = table.get(prog)
    if mask is not None:
        return mask
    python = PYTHON.match(prog) is not None
    mask = 0
    if prog in GIT or prog.startswith(GIT_PREFIX):
        mask |= _F_GIT
    if prog in policy.forge:
        mask |= _F_FORGE
    if policy.publish.get(prog):
        mask |= _F_PUBLISH
    if python:
        mask |= _F_PY_PUBLISH
    if prog in policy.http_clients:
        mask |= _F_HTTP
    if prog in DESTRUCTIVE or prog.startswith(MKFS_PREFIX):
        mask |= _F_DESTRUCTIVE
    if prog in HOOK_WRITERS:
        mask |= _F_HOOKS
    if prog in EXECUTORS or prog in policy.shells or prog in policy.interpreters or python:
        mask |= _F_EXEC
    firsts = wrapper_firsts(policy)
    if prog in UNWRAPPED or prog in firsts:
        mask |= _F_WRAPPER
    if prog in policy.downloaders or prog in STATE:
        mask |= _F_STATE
    names = relevant_names(policy)
    if names is not None and inert_name(prog, prog, names):
        mask |= _F_INERT
    if len(table) >= _DISPATCH_LIMIT:
        table.clear()
    table[prog] = mask
    return mask


def _rules(inv: Invocation, st: ScanState) -> Decision | None:
    policy = st.policy
    prog = inv.prog
    mask = inv.mask
    args = inv.argv[1:]
    src = inv.part.src
    for prefix in policy.deny_prefixes:
        if prefix_match(prefix, [prog, *args]):
            return deny(RuleId.DENY_REPO, f"the repository policy denies `{' '.join(prefix)}`", src)
    if policy.deny_rules:
        words = [prog, *args]
        for rule in policy.deny_rules:
            if rule.matches(words):
                return deny(RuleId.DENY_REPO, rule.reason(), src)
    if mask & _F_GIT:
        d = git_rules(inv, st)
        if d is not None:
            return d
    if mask & _F_FORGE:
        d = forge_rule(prog, args, st, src, payload)
        if d is not None:
            return d
    if mask & _F_PUBLISH:
        d = publish_rule(prog, args, policy.publish, src)
        if d is not None:
            return d
    if mask & _F_PY_PUBLISH:
        d = python_publish_rule(args, policy.publish, src)
        if d is not None:
            return d
    if mask & _F_HTTP:
        d = raw_forge_rule(prog, args, src)
        if d is not None:
            return d
    if mask & _F_DESTRUCTIVE:
        d = destructive_rule(prog, args, st, src)
        if d is not None:
            return d
    if mask & _F_HOOKS:
        d = hooks_rule(prog, args, st, src)
        if d is not None:
            return d
    if mask & _F_EXEC or (inv.part.words and "/" in inv.part.words[0].src):
        return _execution(inv, st)
    return None


# -- git ---------------------------------------------------------------------------------------
def _nested_groups(policy: Policy) -> frozenset[str]:
    """The subcommands of the policy's nested publishing pairs (`remote` of `remote update`)."""
    groups = policy._deny_names.get("nested")
    if groups is None:
        groups = policy._deny_names["nested"] = frozenset(g for g, _ in policy.git_publish_nested)
    return groups


def git_rules(inv: Invocation, st: ScanState) -> Decision | None:
    policy = st.policy
    src = inv.part.src
    env = inv.env
    wdepth = inv.wdepth
    call = facts.parse_git(inv.argv)
    # without global options or environment, no hooks path is set and no alias is defined
    configured = bool(call.options or env)
    if configured and facts.sets_hooks_path(call, env):
        return deny(RuleId.D3_HOOKS_PATH, "sets core.hooksPath, which disables the Git hooks", src)
    defined = facts.alias_definitions(call, env) if configured else []
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
    prog = inv.prog
    if prog == "hub" and sub in ("pull-request", "fork", "create", "delete"):
        return deny(RuleId.D1_FORGE, f"`hub {sub}` changes the remote forge", src)
    if sub in policy.git_publish:
        return deny(RuleId.D1_PUSH, f"`git {sub}` publishes to a remote", src)
    if sub in _nested_groups(policy):
        pos = facts.positionals(call.args)
        for group, verb in policy.git_publish_nested:
            if sub == group and verb in pos:
                return deny(RuleId.D1_PUSH, f"`git {group} {verb}` publishes to a remote", src)
    if sub == "config":
        for w in facts.config_writes(call.args):
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
    if sub in facts.D2_SUBS or (st.head_protected and sub in facts.HEAD_WRITERS):
        d2 = facts.d2_reason(call, policy, st.head_protected, inv.stdin)
        if d2 is not None:
            return deny(d2[0], d2[1], src)
    # aliases expand (git ignores aliases that shadow builtins)
    if sub not in facts.BUILTINS:
        values = [v for n, v in defined if n == sub] + st.git_aliases.get(sub, [])
        for value in values:
            d = _expand_alias(value, call, inv, st)
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
    words = _alias_words(value, st)
    fake = Part("git " + value, "cmd")
    prog = basename(words[0]) if words else ""
    inv = Invocation(words, prog, _F_GIT, {}, fake, None, wdepth + 1)
    return git_rules(inv, st) is not None


def _expand_alias(
    value: str, call: facts.GitCall, inv: Invocation, st: ScanState
) -> Decision | None:
    if value.startswith("!"):
        return payload(value[1:] + " " + " ".join(call.args), st)
    words = _alias_words(value, st)
    return check_argv([*words, *call.args], inv.env, inv.part, st, inv.stdin, inv.wdepth + 1)


def _execution(inv: Invocation, st: ScanState) -> Decision | None:
    policy = st.policy
    prog = inv.prog
    args = inv.argv[1:]
    part = inv.part
    stdin = inv.stdin
    src = part.src
    is_shell = prog in policy.shells
    is_interp = prog in policy.interpreters or bool(PYTHON.match(prog))
    if is_shell or is_interp or prog in ("eval", "source", ".", "sudo", "xargs"):
        if (is_shell or is_interp or prog == "sudo") and downloads_in(part.pipe_prev, st):
            return deny(
                RuleId.D4_DOWNLOAD_EXEC, "downloaded content is piped into an interpreter", src
            )
        if (is_shell or is_interp or prog in ("eval", "source", ".")) and subst_downloads(part, st):
            return deny(
                RuleId.D4_DOWNLOAD_EXEC,
                "downloaded content is executed through a substitution",
                src,
            )
    if is_shell:
        script, file, reads_stdin = shell_script_arg(args)
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
