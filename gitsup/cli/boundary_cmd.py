"""Boundary commands: `git sup hook pre-push|pre-receive`, `git sup gate install`,
`git sup integrate`.

`hook_app` is the `git sup hook` group; other hook entry points (e.g. `claude`)
register on it with `@hook_app.command(...)` after importing this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gitsup.cli.main import app
from gitsup.cli.options import ProtectedOpt, TaskArg
from gitsup.cli.output import emit_json, out, progress

hook_app = typer.Typer(
    name="hook",
    help="Git hook entry points (run by Git, not by hand).",
    no_args_is_help=True,
)
gate_app = typer.Typer(
    name="gate",
    help="The server-side gate for a shared (bare) repository.",
    no_args_is_help=True,
)
app.add_typer(hook_app, name="hook")
app.add_typer(gate_app, name="gate")


@hook_app.command("pre-push")
def hook_pre_push(
    remote: Annotated[str, typer.Argument(help="Remote name (or URL) git passes.")] = "",
    url: Annotated[str, typer.Argument(help="Remote URL git passes.")] = "",
) -> None:
    """Evaluate the ref updates on stdin; reject (exit 1) what may not cross."""
    from gitsup.boundary.hook import pre_push, stdin_lines

    raise typer.Exit(pre_push(remote, url or remote, stdin_lines()))


@hook_app.command("pre-receive")
def hook_pre_receive() -> None:
    """Server side: evaluate `<old> <new> <ref>` lines on stdin."""
    from gitsup.boundary.hook import pre_receive, stdin_lines

    raise typer.Exit(pre_receive(stdin_lines()))


@gate_app.command("install")
def gate_install(
    path: Annotated[Path, typer.Argument(help="The (bare) repository people and CI push to.")],
    review_remote: Annotated[
        bool,
        typer.Option(
            "--review-remote",
            help="This repository is the review remote: accept refs/sup/* and refs/notes/sup "
            "(never deleted or rewritten). Needed to push protected branches here.",
        ),
    ] = False,
    protected: ProtectedOpt = None,
    allowed_signers: Annotated[
        Path | None,
        typer.Option(
            "--allowed-signers",
            help="The SSH allowed-signers file whose keys may sign integrations "
            "(default: this repository's, gpg.ssh.allowedSignersFile).",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Install the ref-update gate as a pre-receive hook (idempotent).

    The gate keeps its own allowed signers and trust root (the protected tips it has now,
    plus this repository's trust root) in the repository's config."""
    from gitsup.errors import GitsupError
    from gitsup.git import GitRepo
    from gitsup.integration.setup import install_gate

    try:
        source: GitRepo | None = GitRepo.discover(".")
    except GitsupError:
        source = None
    res = install_gate(
        path,
        review_remote=review_remote,
        protected=protected,
        allowed_signers=allowed_signers,
        source=source,
    )
    if json_out:
        emit_json(res.__dict__)
        return
    out(f"gate: {res.hook}")
    for w in res.written:
        out(f"  wrote {w}")
    if not res.written:
        out("  (already installed; hook unchanged)")
    out("protected branches: " + " ".join(res.protected))
    out(f"review remote: {'yes' if res.review_remote else 'no'}")
    out(f"allowed signers: {len(res.allowed_signers)} key(s)")
    if not res.allowed_signers:
        out("  no key may sign integrations here: `--allowed-signers FILE` sets them")
    out(f"trust root: {len(res.trust_roots)} commit(s)")


@app.command("integrate")
def integrate_cmd(
    task: TaskArg,
    into: Annotated[str, typer.Option("--into", help="Target branch, e.g. main.")],
    strategy: Annotated[
        str,
        typer.Option("--strategy", help="merge | auto (the same: always a signed merge commit)."),
    ] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    allow_policy_change: Annotated[
        bool,
        typer.Option(
            "--allow-policy-change",
            help="Integrate a candidate that changes .gitsup/ (recorded as a Sup-Policy-Change "
            "trailer); without it such a candidate is refused.",
        ),
    ] = False,
    review: Annotated[
        bool,
        typer.Option(
            "--review",
            help="Have the task's reviewer judge the merge, read-only, before it is signed "
            "(also git config sup.integrate.review); its verdict is the Sup-Review trailer.",
        ),
    ] = False,
) -> None:
    """Integrate a ready candidate into a branch: re-run its required checks on the merge,
    then commit it signed with the integrator's key (Sup-* trailers). Never pushes.
    A candidate that changes .gitsup/ is refused unless --allow-policy-change is given.

    Exit codes: 0 integrated, 2 refused (nothing changed), 3 checks failed or the integration
    review did not pass (target untouched).
    """
    from gitsup.errors import GitsupError
    from gitsup.integration.integrate import Strategy, integrate
    from gitsup.store.suprepo import SupRepo

    try:
        strat = Strategy(strategy)
    except ValueError:
        raise GitsupError(
            f"unknown strategy {strategy!r}", hint="--strategy ff, merge or auto"
        ) from None
    ctx = SupRepo.discover()
    res = integrate(
        ctx,
        task,
        into,
        strategy=strat,
        on_progress=None if json_out else progress,
        allow_policy_change=allow_policy_change,
        review=review,
    )
    if json_out:
        emit_json(res.as_dict())
    elif res.integrated:
        out(f"integrated {res.task} into {res.into} ({res.strategy}): {res.result}")
        if res.checkout_updated:
            out(f"updated the checkout {res.checkout_updated}")
        if res.policy_change:
            out(f"policy change allowed and recorded: {', '.join(res.policy_change)}")
        if res.review is not None:
            out(f"integration review ({res.review.kind}): {res.review.verdict}")
        out(f"publish: git push {_publish_remote(ctx, res.into)} {res.into}")
    else:
        out(f"not integrated: {res.reason}")
    raise typer.Exit(int(res.exit_code))


def _publish_remote(ctx: object, branch: str) -> str:
    """The remote a published branch goes to: its upstream's, else sup.reviewRemote, else
    origin."""
    from gitsup.store.suprepo import SupRepo

    assert isinstance(ctx, SupRepo)
    repo = ctx.repo
    return (
        repo.config_get(f"branch.{branch}.remote")
        or repo.config_get("sup.reviewRemote")
        or "origin"
    )
