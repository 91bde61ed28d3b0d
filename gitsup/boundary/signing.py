"""Integration commits: their shape, their trailers, and their SSH signatures.

An integration is a merge commit signed with Git's own SSH signing (`gpg.format=ssh`) whose
message ends in `Sup-*` trailers (`Sup-Task`, `Sup-Candidate`, `Sup-Baseline`, `Sup-Checks`,
`Sup-Review`). The gates verify the signature themselves, against an allowed-signers list
in process for ed25519 keys (boundary/sshsig.py: OpenSSL's libcrypto checks the signature,
as `ssh-keygen -Y verify` would), else with `ssh-keygen -Y verify` (one process per signature,
run in parallel), so nothing a push carries (notes, refs) can stand in for the proof.

Standard library only: the hook path imports this. Verified ids may be remembered in
`${XDG_CONFIG_HOME:-$HOME/.config}/gitsup/verified/`, next to the signing key, which no task
process can read or write; a cache file is keyed by the allowed-signers content.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from gitsup.boundary import gitrun

SSH_SIG_BEGIN = b"-----BEGIN SSH SIGNATURE-----"
NAMESPACE = "git"
PRINCIPAL = "gitsup-integrator"  # every allowed key is checked under this one identity
TRAILER_KEYS = ("Sup-Task", "Sup-Candidate", "Sup-Baseline", "Sup-Checks", "Sup-Review")


def config_dir(env: Mapping[str, str] | None = None) -> str:
    """`${XDG_CONFIG_HOME:-$HOME/.config}/gitsup`: the key, allowed signers, verified ids."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".config"
    )
    return os.path.join(base, "gitsup")


def default_allowed_signers(env: Mapping[str, str] | None = None) -> str:
    return os.path.join(config_dir(env), "allowed_signers")


def default_signing_key(env: Mapping[str, str] | None = None) -> str:
    return os.path.join(config_dir(env), "signing", "id_ed25519")


class Commit(NamedTuple):
    oid: str
    parents: tuple[str, ...]
    payload: bytes  # the object without its signature header: what was signed
    signature: bytes | None
    trailers: dict[str, str]

    @property
    def is_integration(self) -> bool:
        """Shaped like an integration: a merge whose second parent is the named candidate."""
        cand = self.trailers.get("Sup-Candidate", "")
        return (
            len(self.parents) == 2
            and bool(self.trailers.get("Sup-Task"))
            and bool(self.trailers.get("Sup-Baseline"))
            and self.parents[1] == cand
        )


def parse_commit(oid: str, raw: bytes) -> Commit:
    """Split a raw commit object into payload and signature (as Git does), parents, trailers."""
    head, sep, message = raw.partition(b"\n\n")
    kept: list[bytes] = []
    sig: list[bytes] = []
    parents: list[str] = []
    in_sig = False
    for line in head.split(b"\n"):
        if in_sig and line.startswith(b" "):
            sig.append(line[1:])
            continue
        in_sig = False
        if line.startswith(b"gpgsig ") or line.startswith(b"gpgsig-sha256 "):
            in_sig = True
            sig.append(line.split(b" ", 1)[1])
            continue
        if line.startswith(b"parent "):
            parents.append(line[7:].decode("ascii", "replace"))
        kept.append(line)
    payload = b"\n".join(kept) + sep + message
    signature = b"\n".join(sig) + b"\n" if sig else None
    return Commit(oid, tuple(parents), payload, signature, trailers(message))


def trailers(message: bytes | str) -> dict[str, str]:
    """The `Sup-*` trailers of a commit message's last paragraph (first value wins)."""
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    paragraphs = [p for p in text.strip().split("\n\n") if p.strip()]
    out: dict[str, str] = {}
    if not paragraphs:
        return out
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(":")
        if sep and key in TRAILER_KEYS and key not in out:
            out[key] = value.strip()
    return out


def allowed_for_verify(text: str) -> str:
    """An allowed-signers list with every principal replaced by one identity, so one
    `ssh-keygen -Y verify -I <identity>` accepts exactly the listed keys (their options kept)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) == 2:
            out.append(f"{PRINCIPAL} {parts[1]}")
    return "\n".join(out) + ("\n" if out else "")


def keys_of(text: str) -> list[str]:
    """`<type> <base64>` of every key in an allowed-signers list."""
    found = []
    for line in text.splitlines():
        words = line.split()
        for i, w in enumerate(words[:-1]):
            if w.startswith(("ssh-", "ecdsa-", "sk-")) and not w.startswith("ssh-keygen"):
                found.append(f"{w} {words[i + 1]}")
                break
    return found


def verify(
    commits: Sequence[Commit], allowed_text: str, *, jobs: int = 8, fast: bool = True
) -> set[str]:
    """The ids of `commits` whose SSH signature verifies against `allowed_text`
    (`fast=False`: every one through `ssh-keygen -Y verify`)."""
    todo = [c for c in commits if c.signature and c.signature.startswith(SSH_SIG_BEGIN)]
    allowed = allowed_for_verify(allowed_text)
    if not todo or not allowed:
        return set()
    good: set[str] = set()
    if fast:
        todo, good = _verify_in_process(todo, allowed_text)
    if todo:
        good |= _verify_with_ssh_keygen(todo, allowed, jobs)
    return good


def _verify_in_process(todo: Sequence[Commit], allowed_text: str) -> tuple[list[Commit], set[str]]:
    """Decide what the in-process verifier is sure of; return the rest (for ssh-keygen)."""
    import time

    from gitsup.boundary import sshsig

    fast = sshsig.verifier(allowed_text)
    if fast is None:
        return list(todo), set()
    now = int(time.time())
    rest: list[Commit] = []
    good: set[str] = set()
    for c in todo:
        try:
            if fast.check(c.signature or b"", c.payload, NAMESPACE, now):
                good.add(c.oid)
        except (sshsig.Unsure, ValueError):
            rest.append(c)
    return rest, good


def _verify_with_ssh_keygen(todo: Sequence[Commit], allowed: str, jobs: int) -> set[str]:
    import tempfile  # only when there is something to verify: it costs a push ~4 ms

    good: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="gitsup-verify-") as tmp:
        signers = os.path.join(tmp, "allowed")
        with open(signers, "w") as fh:
            fh.write(allowed)
        for start in range(0, len(todo), jobs):
            running: list[tuple[str, gitrun.Popen[bytes]]] = []
            for c in todo[start : start + jobs]:
                sig, msg = os.path.join(tmp, f"{c.oid}.sig"), os.path.join(tmp, c.oid)
                with open(sig, "wb") as fh:
                    fh.write(c.signature or b"")
                with open(msg, "wb") as fh:
                    fh.write(c.payload)
                with open(msg, "rb") as stdin:
                    try:
                        p = gitrun.start(
                            [
                                *("ssh-keygen", "-Y", "verify", "-f", signers),
                                *("-I", PRINCIPAL, "-n", NAMESPACE, "-s", sig),
                            ],
                            stdin=stdin,
                            stdout=gitrun.DEVNULL,
                        )
                    except OSError:
                        return good  # no ssh-keygen: nothing verifies (fails closed)
                running.append((c.oid, p))
            for oid, p in running:
                if p.wait() == 0:
                    good.add(oid)
    return good


def _cache_file(allowed_text: str, env: Mapping[str, str] | None) -> str:
    import hashlib

    digest = hashlib.sha256(allowed_for_verify(allowed_text).encode()).hexdigest()[:24]
    return os.path.join(config_dir(env), "verified", digest)


def cached(allowed_text: str, env: Mapping[str, str] | None = None) -> set[str]:
    """Ids verified earlier against this same allowed-signers list (empty when unreadable)."""
    try:
        with open(_cache_file(allowed_text, env)) as fh:
            return {line.strip() for line in fh if len(line.strip()) in (40, 64)}
    except OSError:
        return set()


def remember(oids: Iterable[str], allowed_text: str, env: Mapping[str, str] | None = None) -> None:
    """Best effort: add verified ids to the cache (never fails a push)."""
    lines = "".join(f"{o}\n" for o in oids)
    if not lines or not allowed_for_verify(allowed_text):
        return
    path = _cache_file(allowed_text, env)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
    except OSError:
        pass
