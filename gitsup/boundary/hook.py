"""Hook entry points: `python -m gitsup.boundary.hook pre-push|pre-receive [args]`.

Standard library and the boundary's hook modules only (no pygit2, typer or
pydantic): this runs on every push. Rejections print one line per rejected ref
on stderr (`gitsup: rejected <ref>: <reason>`) and exit 1; acceptance is silent.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TextIO

from gitsup.boundary.evaluate import (
    Pusher,
    PushSetting,
    RefUpdate,
    RefVerdict,
    evaluate,
    protected_branch,
)
from gitsup.boundary.gitrun import GitCli
from gitsup.boundary.hookio import (
    HookInputError,
    format_rejection,
    parse_pre_push,
    parse_pre_receive,
    pre_commit_update,
)
from gitsup.boundary.lookup import GitLookup, RepoConfig, is_review_remote, protected_tips
from gitsup.boundary.pusher import client_pusher, server_pusher
from gitsup.boundary.trust import TrustCheck

USAGE = "usage: python -m gitsup.boundary.hook pre-push REMOTE URL | pre-receive"


def _report(verdicts: Sequence[RefVerdict], err: TextIO) -> int:
    rejected = [v for v in verdicts if not v.accepted]
    for v in rejected:
        err.write(format_rejection(v.ref, v.reason) + "\n")
    err.flush()
    return 1 if rejected else 0


def _read_updates(
    parse: Callable[[Iterable[str]], list[RefUpdate]], lines: Iterable[str], err: TextIO
) -> list[RefUpdate] | None:
    """The hook's ref updates; None (the push rejected, saying why) for malformed input."""
    try:
        return parse(lines)
    except HookInputError as exc:
        err.write(f"gitsup: rejected push: {exc}\n")
        return None


def _locations(git: GitCli, cwd: str) -> tuple[str, str] | None:
    out = git.out("rev-parse", "--absolute-git-dir", "--git-common-dir")
    if out is None:
        return None
    lines = out.splitlines()
    if len(lines) != 2:
        return None
    git_dir, common = lines
    if not os.path.isabs(common):
        common = os.path.normpath(os.path.join(cwd, common))
    return git_dir, common


def pre_push(
    remote: str,
    url: str,
    lines: Iterable[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    err: TextIO = sys.stderr,
) -> int:
    """The client-side gate (git runs it in the pushing repository)."""
    env = os.environ if env is None else env
    cwd = os.getcwd() if cwd is None else cwd
    updates = _read_updates(parse_pre_push, lines, err)
    if updates is None:
        return 1
    if not updates:
        from_env = pre_commit_update(env)
        if from_env is not None:
            updates = [from_env]
            remote = remote or env.get("PRE_COMMIT_REMOTE_NAME", "")
            url = url or env.get("PRE_COMMIT_REMOTE_URL", "")
    if not updates:
        return 0
    git = GitCli(cwd=cwd, env=env)
    locations = _locations(git, cwd)
    if locations is None:
        err.write("gitsup: rejected push: cannot locate the repository (git rev-parse failed)\n")
        return 1
    git_dir, common = locations
    pusher = client_pusher(git_dir=git_dir, common_dir=common, env=env, cwd=cwd)
    return _report(decide_client(git, pusher, remote, url, updates), err)


def client_allowed_signers(cfg: RepoConfig, env: Mapping[str, str]) -> str:
    """The allowed signers the client trusts: `gpg.ssh.allowedSignersFile`, else gitsup's."""
    from gitsup.boundary.signing import default_allowed_signers

    path = cfg.get("gpg.ssh.allowedSignersFile") or default_allowed_signers(env)
    try:
        with open(os.path.expanduser(path)) as fh:
            return fh.read()
    except OSError:
        return ""


def _touches_protected(updates: Sequence[RefUpdate], patterns: Sequence[str]) -> bool:
    return any(protected_branch(u.ref, patterns) for u in updates)


def decide_client(
    git: GitCli, pusher: Pusher, remote: str, url: str, updates: Sequence[RefUpdate]
) -> list[RefVerdict]:
    cfg = RepoConfig.read(git)
    policy = cfg.policy()
    ctx = PushSetting(
        pusher=pusher,
        destination=remote or url,
        to_review_remote=is_review_remote(cfg, remote, url),
        policy=policy,
    )
    env = os.environ if git.env is None else git.env
    needs_signers = not pusher.in_task and _touches_protected(updates, policy.protected)
    trust = TrustCheck(
        git.cwd,
        git.env,
        roots=cfg.trust_roots(),
        allowed_signers=client_allowed_signers(cfg, env) if needs_signers else "",
    )
    return evaluate(ctx, updates, GitLookup(git, trust))


def pre_receive(
    lines: Iterable[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    err: TextIO = sys.stderr,
) -> int:
    """The server-side gate (git runs it in the receiving repository, usually bare)."""
    env = os.environ if env is None else env
    cwd = os.getcwd() if cwd is None else cwd
    updates = _read_updates(parse_pre_receive, lines, err)
    if updates is None:
        return 1
    if not updates:
        return 0
    git = GitCli(cwd=cwd, env=env)
    cfg = RepoConfig.read(git)
    policy = cfg.policy()
    ctx = PushSetting(
        pusher=server_pusher(env=env),
        destination="this repository",
        to_review_remote=cfg.is_true("sup.gateReview"),
        policy=policy,
        server=True,
    )
    exclude: list[str] = []
    if not ctx.pusher.in_task and _touches_protected(updates, policy.protected):
        # What protected branches here already hold passed this gate (or is a trust root).
        exclude = list(protected_tips(git, policy.protected).values())
    trust = TrustCheck(
        cwd,
        env,
        roots=cfg.trust_roots(),
        allowed_signers="\n".join(cfg.get_all("sup.allowedSigner")),
        exclude=exclude,
    )
    verdicts = evaluate(ctx, updates, GitLookup(git, trust))
    return _report(verdicts, err)


def stdin_lines(stream: TextIO = sys.stdin) -> Iterable[str]:
    """Hook input; nothing when stdin is a terminal (a person running the hook by hand)."""
    try:
        return [] if stream.isatty() else stream
    except (AttributeError, ValueError):
        return []


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stderr.write(USAGE + "\n")
        return 2
    kind, rest = args[0], args[1:]
    if kind == "pre-push":
        remote = rest[0] if rest else ""
        url = rest[1] if len(rest) > 1 else remote
        return pre_push(remote, url, stdin_lines())
    if kind == "pre-receive":
        return pre_receive(stdin_lines())
    sys.stderr.write(USAGE + "\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
