"""The boundary's part of `git sup init`, and what `git sup doctor` checks against.

`init_boundary` installs the `pre-push` gate, sets up the integration signing key and the
allowed-signers file, records the trust root (the current tips of the protected branches, once),
and keeps a snapshot of the gate's settings in `${XDG_CONFIG_HOME:-$HOME/.config}/gitsup/repos/`
(out of every task's reach). `tampering` compares the repository with that snapshot and checks
every protected branch: commits that are not integrated, integrations whose signature does not
verify, a changed or missing hook, changed `sup.*` settings.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from gitsup.boundary.gitrun import GitCli
from gitsup.boundary.install import hooks_dir, install_pre_push, is_ours
from gitsup.boundary.keys import signing_setup
from gitsup.boundary.lookup import RepoConfig
from gitsup.boundary.signing import config_dir
from gitsup.boundary.trust import TrustCheck
from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.protected import effective, is_protected

WATCHED = r"^(sup\..*|gpg\.ssh\.allowedsignersfile|core\.hookspath)$"


def snapshot_path(repo: GitRepo) -> Path:
    key = hashlib.sha256(str(repo.common_dir.resolve()).encode()).hexdigest()[:20]
    return Path(config_dir()) / "repos" / f"{key}.json"


def _settings(repo: GitRepo) -> dict[str, list[str]]:
    return GitCli(cwd=str(repo.common_dir)).config(WATCHED)


def protected_tips(repo: GitRepo) -> dict[str, str]:
    cfg = RepoConfig.read(GitCli(cwd=str(repo.common_dir)))
    patterns = effective(cfg.get_all("sup.protected"))
    out = GitCli(cwd=str(repo.common_dir)).out(
        "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"
    )
    tips: dict[str, str] = {}
    for line in (out or "").splitlines():
        oid, _, ref = line.partition(" ")
        if is_protected(ref, patterns):
            tips[ref] = oid
    return tips


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
