"""The integrator's signing key and the allowed-signers list (`git sup init`).

The user's configured SSH signing key (`gpg.format=ssh`, `user.signingKey`) if there is one;
otherwise a dedicated ed25519 key that gitsup creates in
`${XDG_CONFIG_HOME:-$HOME/.config}/gitsup/signing/` (mode 0700: the kernel sandbox keeps every
task process out of that directory). Its public half goes into the allowed-signers file Git
itself uses (`gpg.ssh.allowedSignersFile`; gitsup's own file unless one is configured), so
`git verify-commit` and `git log --show-signature` verify integrations out of the box.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gitsup.boundary.signing import (
    config_dir,
    default_allowed_signers,
    default_signing_key,
    keys_of,
)
from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.host import proc
from gitsup.host.fsutil import atomic_write


@dataclass
class SigningSetup:
    key: str  # what `user.signingKey` is set to when integrate signs
    public: str  # "<type> <base64>"
    dedicated: bool  # gitsup's own key (not the user's)
    allowed_signers: str  # the file Git and the client gate verify against
    changed: list[str] = field(default_factory=list)

    def git_config_args(self) -> list[str]:
        """`git -c ...` options that make `commit-tree -S` sign with this key."""
        return ["-c", "gpg.format=ssh", "-c", f"user.signingKey={self.key}"]


def _public_of(key: str) -> str | None:
    """The public key for a `user.signingKey` value (a literal, or a key file)."""
    literal = key.removeprefix("key::").strip()
    if literal.startswith(("ssh-", "ecdsa-", "sk-")):
        return " ".join(literal.split()[:2])
    path = Path(os.path.expanduser(key))
    for candidate in (path, Path(f"{path}.pub")):
        try:
            text = candidate.read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.startswith(("ssh-", "ecdsa-", "sk-")):
            return " ".join(text.split()[:2])
    return None


def _dedicated_key() -> tuple[str, list[str]]:
    key = Path(default_signing_key())
    changed: list[str] = []
    if not key.exists():
        Path(config_dir()).mkdir(parents=True, exist_ok=True, mode=0o700)
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(config_dir(), 0o700)
        os.chmod(key.parent, 0o700)
        res = proc.run(
            [*("ssh-keygen", "-q", "-t", "ed25519", "-N", ""), "-C", "gitsup", "-f", str(key)],
            timeout=60,
        )
        if not res.ok or not key.exists():
            raise GitsupError(
                f"cannot create the integration signing key {key}: {res.output.strip()}",
                hint="install OpenSSH's ssh-keygen, or configure your own: "
                "`git config gpg.format ssh` and `git config user.signingKey <key>`",
            )
        changed.append(f"created the integration signing key {key}")
    return str(key), changed


def signing_setup(repo: GitRepo, *, create: bool) -> SigningSetup:
    """Which key integrations are signed with; with `create`, make the dedicated key and
    configure the allowed-signers file (idempotent). Without, only read."""
    user_key = repo.config_get("user.signingKey")
    fmt = (repo.config_get("gpg.format") or "openpgp").lower()
    changed: list[str] = []
    if fmt == "ssh" and user_key and _public_of(user_key):
        key, dedicated = user_key, False
    elif create:
        key, changed = _dedicated_key()
        dedicated = True
    else:
        key, dedicated = default_signing_key(), True
    public = _public_of(key) or ""
    configured = repo.config_get("gpg.ssh.allowedSignersFile")
    allowed = os.path.expanduser(configured) if configured else default_allowed_signers()
    if create:
        if not configured:
            repo.config_set("gpg.ssh.allowedSignersFile", allowed)
            changed.append(f"gpg.ssh.allowedSignersFile = {allowed}")
        if public:
            changed += _allow_signer(allowed, public, repo.config_get("user.email"))
    return SigningSetup(key, public, dedicated, allowed, changed)


def follow_identity(repo: GitRepo, signing: SigningSetup) -> list[str]:
    """gitsup's own allowed-signers line names the user's `user.email` as it is now (at every
    integration, not only at `init`)."""
    if not signing.public or signing.allowed_signers != default_allowed_signers():
        return []
    return _rename_signer(signing.allowed_signers, signing.public, repo.config_get("user.email"))


def _allow_signer(allowed: str, public: str, email: str | None) -> list[str]:
    """The key's line in the allowed-signers file names the user's identity as it is now:
    added when missing, its principal re-written when `user.email` changed since."""
    principal = email or "gitsup-integrator"
    try:
        have = Path(allowed).read_text()
    except OSError:
        have = ""
    if public not in keys_of(have):
        Path(allowed).parent.mkdir(parents=True, exist_ok=True)
        with open(allowed, "a") as fh:
            if have and not have.endswith("\n"):
                fh.write("\n")
            fh.write(f'{principal} namespaces="git" {public}\n')
        return [f"allowed signer {principal} added to {allowed}"]
    if allowed != default_allowed_signers():
        return []  # the user's own list: theirs to edit
    return _rename_signer(allowed, public, email, have)


def _rename_signer(
    allowed: str, public: str, email: str | None, have: str | None = None
) -> list[str]:
    if not email:
        return []
    principal = email
    if have is None:
        try:
            have = Path(allowed).read_text()
        except OSError:
            return []
    lines = have.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if public not in line or line.lstrip().startswith("#"):
            continue
        old, _, rest = line.partition(" ")
        if old == principal or not rest:
            return []
        lines[i] = f"{principal} {rest}"
        atomic_write(Path(allowed), "".join(lines).encode())
        return [f"allowed signer {old} is now {principal} in {allowed} (user.email changed)"]
    return []


def protected_paths(repo: GitRepo) -> list[str]:
    """What no task sandbox rule may open, beyond gitsup's config dir (which the sandbox
    always protects): the integration signing key (a key file, with its public half) and the
    allowed-signers file Git verifies against, wherever the Git config puts them."""
    signing = signing_setup(repo, create=False)
    out = [signing.allowed_signers]
    literal = signing.key.removeprefix("key::").strip()
    if not literal.startswith(("ssh-", "ecdsa-", "sk-")):
        key = os.path.expanduser(signing.key)
        out += [key, f"{key}.pub"]
    return [p for p in out if os.path.isabs(p)]
