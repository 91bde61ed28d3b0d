"""The in-process SSH signature check agrees with `ssh-keygen -Y verify`.

Real keys and signatures made by `ssh-keygen`, real allowed-signers files; every verdict of
the fast path is compared with what `ssh-keygen -Y verify` says about the same signature,
payload and list (rewritten to the gates' one identity, as the gates do)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from gitsup.boundary import signing, sshsig

PAYLOAD = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nSup-Task: x\n"


def keygen(tmp: Path, name: str, kind: str = "ed25519") -> tuple[Path, str]:
    key = tmp / name
    argv = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", name, "-f", str(key)]
    if kind == "rsa":
        argv += ["-b", "2048"]
    subprocess.run(argv, check=True)
    pub = (tmp / f"{name}.pub").read_text().split()
    return key, f"{pub[0]} {pub[1]}"


def sign(tmp: Path, key: Path, payload: bytes, namespace: str = "git") -> bytes:
    msg = tmp / "msg"
    msg.write_bytes(payload)
    (tmp / "msg.sig").unlink(missing_ok=True)
    argv = ["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", namespace, str(msg)]
    subprocess.run(argv, check=True)
    return (tmp / "msg.sig").read_bytes()


def ssh_keygen_says(tmp: Path, allowed: str, sig: bytes, payload: bytes) -> bool:
    (tmp / "allowed").write_text(signing.allowed_for_verify(allowed))
    (tmp / "check.sig").write_bytes(sig)
    res = subprocess.run(
        [
            *("ssh-keygen", "-Y", "verify", "-f", str(tmp / "allowed")),
            *("-I", signing.PRINCIPAL, "-n", "git", "-s", str(tmp / "check.sig")),
        ],
        input=payload,
        capture_output=True,
    )
    return res.returncode == 0


def fast_says(allowed: str, sig: bytes, payload: bytes) -> bool | None:
    """The fast path's verdict; None when it leaves the signature to ssh-keygen."""
    v = sshsig.verifier(allowed)
    if v is None:
        return None
    try:
        return v.check(sig, payload, "git", int(time.time()))
    except sshsig.Unsure:
        return None


def stamp(offset_days: int, utc: bool = True) -> str:
    t = time.time() + offset_days * 86400
    return time.strftime("%Y%m%d%H%M", time.gmtime(t) if utc else time.localtime(t)) + (
        "Z" if utc else ""
    )


def test_fast_path_agrees_with_ssh_keygen(tmp_path: Path) -> None:
    key, pub = keygen(tmp_path, "good")
    other, other_pub = keygen(tmp_path, "other")
    good = sign(tmp_path, key, PAYLOAD)
    by_other = sign(tmp_path, other, PAYLOAD)
    wrong_ns = sign(tmp_path, key, PAYLOAD, "file")
    sha512 = good  # ssh-keygen signs with sha512 by default; sha256 via -O hashalg below
    cases: list[tuple[str, str, bytes, bytes, bool]] = [
        ("good", f"me {pub}", good, PAYLOAD, True),
        ("tampered payload", f"me {pub}", good, PAYLOAD + b"x", False),
        ("wrong key", f"me {pub}", by_other, PAYLOAD, False),
        ("wrong namespace", f"me {pub}", wrong_ns, PAYLOAD, False),
        ("namespaces=git", f'me namespaces="git" {pub}', good, PAYLOAD, True),
        ("namespaces list", f'me namespaces="file,git" {pub}', good, PAYLOAD, True),
        ("namespaces=file", f'me namespaces="file" {pub}', good, PAYLOAD, False),
        ("expired", f'me valid-before="{stamp(-1)}" {pub}', good, PAYLOAD, False),
        ("not yet valid", f'me valid-after="{stamp(1)}" {pub}', good, PAYLOAD, False),
        ("not yet (local)", f'me valid-after="{stamp(1, False)}" {pub}', good, PAYLOAD, False),
        (
            "within validity",
            f'me valid-after="{stamp(-1)}",valid-before="{stamp(1)}" {pub}',
            *(good, PAYLOAD, True),
        ),
        ("expired (local)", f'me valid-before="{stamp(-1, False)}" {pub}', good, PAYLOAD, False),
        ("second line allows", f'me namespaces="file" {pub}\nyou {pub}', good, PAYLOAD, True),
        ("other principal", f"someone-else@example.invalid {pub}", good, PAYLOAD, True),
        ("several keys", f"a {other_pub}\nb {pub}", sha512, PAYLOAD, True),
        ("only the other", f"a {other_pub}", good, PAYLOAD, False),
        ("comment and blank", f"# hi\n\nme {pub} the key\n", good, PAYLOAD, True),
    ]
    (tmp_path / "msg.sig").unlink()
    subprocess.run(
        ["ssh-keygen", "-q", "-Y", "sign", "-O", "hashalg=sha256", "-f", str(key), "-n", "git",
         str(tmp_path / "msg")],
        check=True,
    )  # fmt: skip
    cases.append(("sha256", f"me {pub}", (tmp_path / "msg.sig").read_bytes(), PAYLOAD, True))
    raw = bytearray(good)
    i = raw.index(b"\n", 40) - 5  # a base64 character inside the signature blob
    raw[i] = ord("A") if raw[i] != ord("A") else ord("B")
    cases.append(("corrupted signature", f"me {pub}", bytes(raw), PAYLOAD, False))
    for name, allowed, sig, payload, expected in cases:
        truth = ssh_keygen_says(tmp_path, allowed, sig, payload)
        assert truth == expected, f"{name}: ssh-keygen says {truth}"
        assert fast_says(allowed, sig, payload) == truth, name


def test_what_the_fast_path_leaves_to_ssh_keygen(tmp_path: Path) -> None:
    """Other key types, certificate authorities and unknown options: the fast path does not
    answer, and `signing.verify` still gives ssh-keygen's verdict."""
    key, pub = keygen(tmp_path, "good")
    rsa, rsa_pub = keygen(tmp_path, "rsa", "rsa")
    good = sign(tmp_path, key, PAYLOAD)
    by_rsa = sign(tmp_path, rsa, PAYLOAD)
    cases = [
        ("rsa signer", f"a {rsa_pub}\nb {pub}", by_rsa, True),
        ("cert-authority line", f"ca cert-authority {rsa_pub}\nme {pub}", good, True),
        ("unknown option", f"me frobnicate {pub}", good, False),
        ("unquoted value", f"me namespaces=git {pub}", good, False),
        ("namespace pattern", f'me namespaces="g*" {pub}', good, True),
    ]
    for name, allowed, sig, expected in cases:
        assert fast_says(allowed, sig, PAYLOAD) is None, name
        assert ssh_keygen_says(tmp_path, allowed, sig, PAYLOAD) == expected, name
        commit = signing.Commit("a" * 40, (), PAYLOAD, sig, {})
        assert (signing.verify([commit], allowed) == {commit.oid}) == expected, name
        assert (signing.verify([commit], allowed, fast=False) == {commit.oid}) == expected, name


@pytest.mark.parametrize("fast", [True, False])
def test_verify_agrees_either_way(tmp_path: Path, fast: bool) -> None:
    key, pub = keygen(tmp_path, "good")
    good = sign(tmp_path, key, PAYLOAD)
    commits = [
        signing.Commit("a" * 40, (), PAYLOAD, good, {}),
        signing.Commit("b" * 40, (), PAYLOAD + b"x", good, {}),
    ]
    assert signing.verify(commits, f"me {pub}\n", fast=fast) == {"a" * 40}
