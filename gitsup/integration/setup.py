"""The boundary's part of `git sup init`, and what `git sup doctor` checks against.

`init_boundary` installs the `pre-push` gate, sets up the integration signing key and the
allowed-signers file, records the trust root (the current tips of the protected branches, once),
and keeps a snapshot of the gate's settings in `${XDG_CONFIG_HOME:-$HOME/.config}/gitsup/repos/`
(out of every task's reach). `tampering` compares the repository with that snapshot and checks
every protected branch: commits that are not integrated, integrations whose signature does not
verify, a changed or missing hook, changed `sup.*` settings. `install_gate` sets up the
server-side `pre-receive` gate of another repository.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from gitsup.boundary.gitrun import GitCli
from gitsup.boundary.lookup import RepoConfig
from gitsup.boundary.lookup import protected_tips as tips_of
from gitsup.boundary.signing import config_dir, default_allowed_signers, keys_of
from gitsup.boundary.trust import TrustCheck
from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.git.hooks import hooks_dir, install_hook, install_pre_push, is_ours
from gitsup.host import proc
from gitsup.integration.keys import signing_setup
from gitsup.protected import effective

WATCHED = r"^(sup\..*|gpg\.ssh\.allowedsignersfile|core\.hookspath)$"


def snapshot_path(repo: GitRepo) -> Path:
    key = hashlib.sha256(str(repo.common_dir.resolve()).encode()).hexdigest()[:20]
    return Path(config_dir()) / "repos" / f"{key}.json"


def _settings(repo: GitRepo) -> dict[str, list[str]]:
    return GitCli(cwd=str(repo.common_dir)).config(WATCHED)


def protected_tips(repo: GitRepo) -> dict[str, str]:
    git = GitCli(cwd=str(repo.common_dir))
    return tips_of(git, RepoConfig.read(git).policy().protected)


def record_trust_roots(repo: GitRepo) -> list[str]:
    """Once: the current tips of the protected branches become the trust root."""
    if repo.config_get_all("sup.trustRoot"):
        return []
    roots = sorted(set(protected_tips(repo).values()))
    for r in roots:
        repo.config_add("sup.trustRoot", r)
    return [f"sup.trustRoot += {r} (history before gitsup)" for r in roots]


def write_snapshot(repo: GitRepo) -> None:
    path = snapshot_path(repo)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    hook = hooks_dir(repo) / "pre-push"
    data = {
        "repository": str(repo.common_dir.resolve()),
        "settings": _settings(repo),
        "hook": str(hook),
        "hook_sha256": _sha(hook),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def snapshot_settings(repo: GitRepo, *, current: bool = False) -> dict[str, list[str]] | None:
    """The watched settings recorded by `git sup init` (None: no snapshot), or, with
    `current`, what they are now."""
    if current:
        return _settings(repo)
    try:
        snap = json.loads(snapshot_path(repo).read_text())
    except (OSError, ValueError):
        return None
    settings = snap.get("settings") if isinstance(snap, dict) else None
    return settings if isinstance(settings, dict) else None


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def init_boundary(repo: GitRepo, *, explicit: bool) -> tuple[list[str], list[str]]:
    """Hook, signing key, allowed signers, trust root, snapshot. Returns (hooks, changed).

    `explicit` (a person ran `git sup init`): failures are errors and the snapshot is
    rewritten; otherwise (every `git sup start`) only what is missing is set up."""
    hooks = install_pre_push(repo)
    changed = [f"installed {h}" for h in hooks]
    try:
        changed += signing_setup(repo, create=True).changed
    except (GitsupError, OSError) as exc:
        if explicit:
            raise
        changed.append(f"integration signing not set up: {exc}")
    changed += record_trust_roots(repo)
    if explicit or changed or not snapshot_path(repo).exists():
        try:
            write_snapshot(repo)
        except OSError as exc:
            if explicit:
                raise GitsupError(f"cannot record the gate's settings: {exc}") from None
    return hooks, changed


def tampering(repo: GitRepo) -> list[tuple[str, str]]:
    """(kind, detail) for each sign that the boundary was tampered with."""
    found: list[tuple[str, str]] = []
    hook = hooks_dir(repo) / "pre-push"
    if not os.path.lexists(hook):
        found.append(("hook-missing", f"{hook} is gone; `git sup init` reinstalls it"))
    elif not is_ours(hook):
        found.append(("hook-changed", f"{hook} is not gitsup's gate; `git sup init` reinstalls it"))
    snap: dict[str, object] = {}
    try:
        snap = json.loads(snapshot_path(repo).read_text())
    except (OSError, ValueError):
        found.append(("no-baseline", "no record of the gate's settings; run `git sup init`"))
    if snap:
        before = snap.get("settings") or {}
        now = _settings(repo)
        assert isinstance(before, dict)
        for key in sorted(set(before) | set(now)):
            if before.get(key) != now.get(key):
                found.append(
                    (
                        "config-changed",
                        f"{key}: {before.get(key) or '(unset)'} -> {now.get(key) or '(unset)'} "
                        "since `git sup init`",
                    )
                )
        moved = snap.get("hook_sha256") and _sha(hook) not in (None, snap.get("hook_sha256"))
        if moved and not any(k == "hook-changed" for k, _ in found):
            found.append(("hook-changed", f"{hook} changed since `git sup init`"))
    cfg = RepoConfig.read(GitCli(cwd=str(repo.common_dir)))
    from gitsup.boundary.hook import client_allowed_signers

    allowed = client_allowed_signers(cfg, os.environ)
    tips = protected_tips(repo)
    trust = TrustCheck(str(repo.common_dir), None, roots=cfg.trust_roots(), allowed_signers=allowed)
    zero = "0" * 40
    verdicts = trust.check([(ref, zero, oid) for ref, oid in tips.items()])
    for ref, bad in verdicts.items():
        if bad is not None:
            branch = ref.removeprefix("refs/heads/")
            found.append(
                (
                    "protected-moved",
                    f"{branch} moved outside an integration: {bad.total} commit(s) since the "
                    f"trust root are not integrated ({bad.commit[:12]} {bad.why})",
                )
            )
    for oid in sorted(trust.shaped - trust.verified):
        found.append(
            (
                "bad-signature",
                f"integration {oid[:12]}: its signature does not verify against the allowed "
                f"signers ({cfg.get('gpg.ssh.allowedSignersFile') or 'gitsup default'})",
            )
        )
    return found


# --- the server-side gate (`git sup gate install`) ---------------------------------------


@dataclass(frozen=True)
class GateResult:
    repository: str
    hook: str
    written: list[str]
    review_remote: bool
    protected: list[str]
    allowed_signers: list[str]  # the keys (`<type> <base64>`) this gate accepts
    trust_roots: list[str]


def _set_all(repo: GitRepo, key: str, values: list[str]) -> None:
    """Replace a multi-valued key with git itself (it quotes values such as
    `namespaces="git"` so that they read back unchanged)."""
    cfg = str(repo.git_dir / "config")
    proc.run(["git", "config", "-f", cfg, "--unset-all", key], timeout=30)
    for v in values:
        res = proc.run(["git", "config", "-f", cfg, "--add", key, v], timeout=30)
        if not res.ok:
            raise GitsupError(f"cannot set {key} in {cfg}: {res.output.strip()}")


def _require_untampered(source: GitRepo, *, need_signers: bool) -> None:
    """What a gate copies from `source` (its trust root, its allowed-signers file) must be
    what `git sup init` recorded: a worker shares `.git/config` and must not be able to hand
    the server its own key or its own commits as trusted."""
    recorded = snapshot_settings(source)
    if recorded is None:
        return  # never initialised with a snapshot: nothing gitsup-made to copy
    now = snapshot_settings(source, current=True) or {}
    keys = ["sup.trustroot", *(["gpg.ssh.allowedsignersfile"] if need_signers else [])]
    changed = [k for k in keys if recorded.get(k) != now.get(k)]
    if changed:
        raise GitsupError(
            f"{', '.join(changed)} changed in {source.common_dir} since `git sup init`; "
            "the gate does not copy settings a task could have written",
            hint="`git sup doctor` shows the change; if it is yours, run `git sup init` "
            "again (or pass --allowed-signers FILE)",
        )


def install_gate(
    path: str | os.PathLike[str],
    *,
    review_remote: bool,
    protected: list[str] | None = None,
    allowed_signers: str | os.PathLike[str] | None = None,
    source: GitRepo | None = None,
) -> GateResult:
    """The server-side gate: a `pre-receive` hook in (usually bare) repository `path`.

    Its own configuration: `sup.allowedSigner` (the lines of `allowed_signers`, default: the
    allowed-signers file of `source`, the repository the command runs in), `sup.trustRoot`
    (its protected tips now, plus `source`'s trust roots), `sup.protected` (additions)."""
    if not os.path.exists(path):
        raise GitsupError(f"no repository at {os.fspath(path)}")
    repo = GitRepo.open(path)
    if source is not None and source.common_dir.resolve() != repo.common_dir.resolve():
        _require_untampered(source, need_signers=allowed_signers is None)
    else:
        source = None
    if allowed_signers is not None:
        try:
            text = Path(allowed_signers).read_text()
        except OSError as exc:
            raise GitsupError(f"cannot read the allowed signers {allowed_signers}: {exc}") from None
        if not keys_of(text):
            raise GitsupError(f"{allowed_signers} lists no SSH public key")
    elif source is not None:
        configured = source.config_get("gpg.ssh.allowedSignersFile")
        file = os.path.expanduser(configured) if configured else default_allowed_signers()
        try:
            text = Path(file).read_text()
        except OSError:
            text = ""
    else:
        text = ""
    directory = hooks_dir(repo)
    written = install_hook(directory, "pre-receive", "gate install")
    repo.config_set("sup.gateReview", "true" if review_remote else "false")
    if protected:
        repo.config_set_multi("sup.protected", protected)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if lines or allowed_signers is not None:
        _set_all(repo, "sup.allowedSigner", lines)
    roots = repo.config_get_all("sup.trustRoot")
    new = [
        *protected_tips(repo).values(),
        *(source.config_get_all("sup.trustRoot") if source else []),
    ]
    for r in dict.fromkeys(new):
        if r not in roots:
            repo.config_add("sup.trustRoot", r)
            roots.append(r)
    return GateResult(
        repository=str(repo.git_dir),
        hook=str(directory / "pre-receive"),
        written=written,
        review_remote=review_remote,
        protected=list(effective(repo.config_get_all("sup.protected"))),
        allowed_signers=keys_of("\n".join(repo.config_get_all("sup.allowedSigner"))),
        trust_roots=roots,
    )
