"""Integrations are signed commits the gates verify: the new-user flow end to end, forgeries
(notes, foreign keys, unsigned or altered commits, smuggled first parents), `sup.protected` on a
bare repository, and `git sup doctor` reporting tampering. Every push is a real `git push`
into a real gated bare repository."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.conftest import Setup, accepted, push, refs_of, rejected, start_task
from tests.conftest import git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, PYTEST_CHECK

FORGED_NOTE = '{"schema": "gitsup.candidate/1", "status": "integrated"}'

SECOND = """
import pathlib, subprocess
pathlib.Path("second.txt").write_text("more work\\n")
subprocess.run(["git", "add", "second.txt"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "second"], check=True)
"""


def _integrate(repo: Path, tid: str) -> str:
    res = run_sup(repo, "integrate", tid, "--into", "main")
    assert res.returncode == 0, res.stderr
    return res.stdout


def _commit(repo: Path, name: str, parent: str = "HEAD") -> str:
    tree = git(repo, "rev-parse", f"{parent}^{{tree}}")
    return git(repo, "commit-tree", "-p", parent, "-m", f"hand-made {name}", tree)


def _integration_message(task: str, cand: str, base: str) -> str:
    return (
        f"Merge gitsup candidate {task} into main\n\n"
        f"Sup-Task: {task}\nSup-Candidate: {cand}\nSup-Baseline: {base}\n"
        "Sup-Checks: pytest=passed\nSup-Review: pass\n"
    )


def _merge(repo: Path, first: str, cand: str, message: str, *sign: str) -> str:
    tree = git(repo, "rev-parse", f"{cand}^{{tree}}")
    res = subprocess.run(
        ["git", *sign, "commit-tree", *(["-S"] if sign else []), "-p", first, "-p", cand, tree],
        cwd=repo,
        input=message,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def _foreign_key(tmp: Path) -> list[str]:
    key = tmp / "foreign_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "intruder", "-f", str(key)],
        check=True,
    )
    return ["-c", "gpg.format=ssh", "-c", f"user.signingKey={key}"]


def _own_key() -> list[str]:
    from gitsup.boundary.signing import default_signing_key

    return ["-c", "gpg.format=ssh", "-c", f"user.signingKey={default_signing_key()}"]


def _both(setup: Setup, ref: str, *needles: str) -> None:
    """`ref` is refused by the client hook and, with --no-verify, by the server gate."""
    before = refs_of(setup.origin)
    rejected(push(setup.repo, "origin", ref), *needles)
    res = push(setup.repo, "--no-verify", "origin", ref)
    rejected(res, *needles)
    assert "remote: gitsup: rejected" in res.stderr
    assert refs_of(setup.origin) == before


def test_new_user_flow(repo: Path, tmp: Path) -> None:
    """init -> gate install with defaults -> push the existing history -> a real task ->
    integrate -> `git push origin main`, twice."""
    res = run_sup(repo, "init")
    assert res.returncode == 0, res.stderr
    log = subprocess.run(["git", "log"], cwd=repo, capture_output=True, text=True)
    assert log.returncode == 0 and log.stderr == ""  # no notes-ref warning
    bare = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    res = run_sup(repo, "gate", "install", str(bare))
    assert res.returncode == 0, res.stderr
    assert "allowed signers: 1 key(s)" in res.stdout and "trust root: 1 commit(s)" in res.stdout
    git(repo, "remote", "add", "origin", str(bare))
    accepted(push(repo, "origin", "main"))  # the history from before gitsup
    setup = Setup(repo, bare, bare, tmp)
    first = start_task(setup, FIX_AND_COMMIT, "--check", PYTEST_CHECK)
    assert first["_rc"] == 0 and first["status"] == "ready", first
    out = _integrate(repo, first["id"])
    assert "publish: git push origin main" in out
    accepted(push(repo, "origin", "main"))
    second = start_task(setup, SECOND, name="second.py")
    assert second["_rc"] == 0 and second["status"] == "ready", second
    _integrate(repo, second["id"])
    accepted(push(repo, "origin", "main"))
    assert git(bare, "rev-parse", "main") == git(repo, "rev-parse", "main")
    shown = subprocess.run(
        ["git", "log", "--show-signature", "--first-parent", "main"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0
    assert shown.stdout.count('Good "git" signature') == 2, shown.stdout
    subjects = git(repo, "log", "--first-parent", "--format=%s", "main").splitlines()
    assert subjects[:2] == [
        f"Merge gitsup candidate {second['id']} into main",
        f"Merge gitsup candidate {first['id']} into main",
    ]
    # A clone verifies too, given the allowed signers (what a forge does with the key).
    clone = tmp / "clone"
    git(tmp, "clone", "-q", str(bare), str(clone))
    signers = git(repo, "config", "gpg.ssh.allowedSignersFile")
    git(clone, "config", "gpg.ssh.allowedSignersFile", signers)
    git(clone, "verify-commit", "main")
    # The notes are evidence and may follow.
    accepted(push(repo, "origin", "refs/notes/sup"))


def test_a_forged_note_does_not_integrate(setup: Setup) -> None:
    git(setup.repo, "commit", "-q", "--allow-empty", "-m", "not integrated")
    head = git(setup.repo, "rev-parse", "HEAD")
    git(setup.repo, "notes", "--ref=sup", "add", "-f", "-m", FORGED_NOTE, head)
    before = refs_of(setup.origin)
    rejected(push(setup.repo, "origin", "main", "refs/notes/sup"), "not integrated")
    res = push(setup.repo, "--no-verify", "origin", "main", "refs/notes/sup")
    rejected(res, "remote: gitsup: rejected refs/heads/main", "not integrated")
    assert git(setup.origin, "rev-parse", "main") != head
    assert "refs/heads/main" in before


def test_a_forged_note_from_a_clone_elsewhere(setup: Setup, tmp: Path) -> None:
    """No gitsup, no hook, no task marker: only the server gate stands."""
    clone = tmp / "elsewhere"
    git(tmp, "clone", "-q", str(setup.origin), str(clone))
    git(clone, "commit", "-q", "--allow-empty", "-m", "minted")
    head = git(clone, "rev-parse", "HEAD")
    git(clone, "notes", "--ref=sup", "add", "-m", FORGED_NOTE, head)
    before = git(setup.origin, "rev-parse", "main")
    res = push(clone, "origin", "main", "refs/notes/sup")
    rejected(res, "remote: gitsup: rejected refs/heads/main", "not integrated")
    assert git(setup.origin, "rev-parse", "main") == before


def test_a_foreign_key_does_not_integrate(setup: Setup, ready: dict[str, Any]) -> None:
    main, cand = git(setup.repo, "rev-parse", "main"), ready["candidate"]
    msg = _integration_message(ready["id"], cand, ready["baseline"])
    forged = _merge(setup.repo, main, cand, msg, *_foreign_key(setup.tmp))
    git(setup.repo, "update-ref", "refs/heads/main", forged)
    _both(setup, "main", "not by an allowed signer")


def test_unsigned_or_altered_integrations_are_refused(setup: Setup, ready: dict[str, Any]) -> None:
    main, cand = git(setup.repo, "rev-parse", "main"), ready["candidate"]
    msg = _integration_message(ready["id"], cand, ready["baseline"])
    unsigned = _merge(setup.repo, main, cand, msg)
    git(setup.repo, "update-ref", "refs/heads/main", unsigned)
    _both(setup, "main", "is not signed")
    # A real signature by the allowed key, on an object altered afterwards.
    signed = _merge(setup.repo, main, cand, msg, *_own_key())
    raw = subprocess.run(
        ["git", "cat-file", "commit", signed], cwd=setup.repo, capture_output=True, check=True
    ).stdout
    altered = raw.replace(b"Sup-Review: pass", b"Sup-Review: revise")
    forged = (
        subprocess.run(
            ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
            cwd=setup.repo,
            input=altered,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    git(setup.repo, "update-ref", "refs/heads/main", forged)
    _both(setup, "main", "not by an allowed signer")
    # The unaltered one is accepted (the key itself is fine).
    git(setup.repo, "update-ref", "refs/heads/main", signed)
    accepted(push(setup.repo, "origin", "main"))


def test_a_smuggled_first_parent_is_refused(setup: Setup, ready: dict[str, Any]) -> None:
    """A worker moved the user's main (refs are shared): neither `integrate` nor a
    correctly signed integration on top of it gets that commit published."""
    repo, cand = setup.repo, ready["candidate"]
    smuggled = _commit(repo, "smuggled", "main")
    git(repo, "update-ref", "refs/heads/main", smuggled)
    git(repo, "reset", "-q", "--hard", "main")
    res = run_sup(repo, "integrate", ready["id"], "--into", "main")
    assert res.returncode == 2 and "moved outside integrations" in res.stderr, res.stderr
    assert git(repo, "rev-parse", "main") == smuggled
    # What integrate would have made without that check: signed by the allowed key, well
    # formed, and still refused, because its first parent is not integrated.
    msg = _integration_message(ready["id"], cand, ready["baseline"])
    merge = _merge(repo, smuggled, cand, msg, *_own_key())
    git(repo, "update-ref", "refs/heads/main", merge)
    _both(setup, "main", f"{smuggled[:12]} is neither a signed integration")


def test_a_smuggled_baseline_is_refused(setup: Setup, ready: dict[str, Any]) -> None:
    """A candidate built on an unintegrated commit brings it along: refused at integrate."""
    from tests.boundary.conftest import make_task

    repo = setup.repo
    smuggled = _commit(repo, "smuggled", "main")
    rec = make_task(setup, base=smuggled)
    before = git(repo, "rev-parse", "main")
    res = run_sup(repo, "integrate", rec["id"], "--into", "main")
    assert res.returncode == 2 and f"baseline {smuggled[:12]} brings 1 commit" in res.stderr
    assert git(repo, "rev-parse", "main") == before


def test_an_integration_covers_only_baseline_to_candidate(setup: Setup) -> None:
    """What `integrate` refuses above, made by hand: a well-formed integration signed by the
    allowed key whose candidate carries an unintegrated commit below its baseline. Its
    range is `baseline..candidate`: the commit under the baseline is refused by both gates."""
    from tests.boundary.conftest import make_task

    repo = setup.repo
    main = git(repo, "rev-parse", "main")
    smuggled = _commit(repo, "smuggled", "main")
    rec = make_task(setup, base=smuggled)
    cand = rec["candidate"]
    assert git(repo, "rev-parse", f"{cand}^") == smuggled
    msg = _integration_message(rec["id"], cand, smuggled)
    merge = _merge(repo, main, cand, msg, *_own_key())
    git(repo, "update-ref", "refs/heads/main", merge)
    git(repo, "reset", "-q", "--hard", "main")
    _both(setup, "main", f"1 commit not integrated; {smuggled[:12]} is neither a signed")
    # the same integration with the commit inside its range is accepted
    honest = _merge(repo, main, cand, _integration_message(rec["id"], cand, main), *_own_key())
    git(repo, "update-ref", "refs/heads/main", honest)
    accepted(push(repo, "--no-verify", "origin", "main"))


def test_trust_roots_and_the_refusal_message(setup: Setup) -> None:
    """A protected branch that was never integrated is refused with the command to run."""
    git(setup.repo, "switch", "-q", "-c", "develop")
    git(setup.repo, "commit", "-q", "--allow-empty", "-m", "older work")
    tip = git(setup.repo, "rev-parse", "HEAD")
    res = push(setup.repo, "origin", "develop")
    rejected(res, f"git config --add sup.trustRoot {tip}")
    git(setup.repo, "config", "--add", "sup.trustRoot", tip)
    res = push(setup.repo, "origin", "develop")
    rejected(res, "remote: gitsup: rejected", "in this repository (its administrator)")
    git(setup.origin, "config", "--add", "sup.trustRoot", tip)
    accepted(push(setup.repo, "origin", "develop"))


def test_bare_repo_protected_additions_keep_main(setup: Setup, tmp: Path) -> None:
    bare = tmp / "release.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    res = run_sup(setup.repo, "gate", "install", str(bare), "--protected", "release/*", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["protected"] == [
        "main",
        "master",
        "trunk",
        "develop",
        "integration",
        "release/*",
    ]
    accepted(push(setup.repo, "--no-verify", str(bare), "main"))  # the trust root
    git(setup.repo, "commit", "-q", "--allow-empty", "-m", "unintegrated")
    for target in ("main", "release/1"):
        res = push(setup.repo, "--no-verify", str(bare), f"HEAD:refs/heads/{target}")
        rejected(res, f"remote: gitsup: rejected refs/heads/{target}", "not integrated")
    accepted(push(setup.repo, "--no-verify", str(bare), "HEAD:refs/heads/topic"))


def test_gate_allowed_signers_option(setup: Setup, ready: dict[str, Any], tmp: Path) -> None:
    """`--allowed-signers FILE` replaces the keys the server accepts; the client's key is then
    refused there, and the file's key accepted."""
    sign = _foreign_key(tmp)
    pub = (tmp / "foreign_key.pub").read_text().split()
    signers = tmp / "signers"
    signers.write_text(f'ci@example.invalid namespaces="git" {pub[0]} {pub[1]}\n')
    res = run_sup(tmp, "gate", "install", str(setup.other), "--allowed-signers", str(signers))
    assert res.returncode == 0 and "allowed signers: 1 key(s)" in res.stdout, res.stderr
    _integrate(setup.repo, ready["id"])
    res = push(setup.repo, "other", "main")
    rejected(res, "remote: gitsup: rejected refs/heads/main", "not by an allowed signer")
    main, cand = git(setup.repo, "rev-parse", "main^1"), ready["candidate"]
    by_ci = _merge(
        setup.repo, main, cand, _integration_message(ready["id"], cand, ready["baseline"]), *sign
    )
    accepted(push(setup.repo, "--no-verify", "other", f"{by_ci}:refs/heads/main"))


def _doctor(repo: Path) -> list[dict[str, Any]]:
    res = run_sup(repo, "doctor", "--json")
    assert res.returncode == 0, res.stderr
    found: list[dict[str, Any]] = json.loads(res.stdout)
    return found


def _kinds(repo: Path) -> set[str]:
    return {f["kind"] for f in _doctor(repo)}


def test_doctor_reports_tampering(setup: Setup, ready: dict[str, Any]) -> None:
    repo = setup.repo
    # The fixture configured sup.reviewRemote after init: doctor says so until init runs.
    assert "sup.reviewremote: (unset) -> ['origin']" in run_sup(repo, "doctor").stdout
    assert run_sup(repo, "init").returncode == 0
    _integrate(repo, ready["id"])
    res = run_sup(repo, "doctor")
    assert "nothing to report" in res.stdout, res.stdout
    # main moved outside an integration
    integrated = git(repo, "rev-parse", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "by hand")
    found = [f for f in _doctor(repo) if f["kind"] == "protected-moved"]
    assert len(found) == 1 and "main moved outside an integration" in found[0]["detail"]
    git(repo, "reset", "-q", "--hard", integrated)
    assert _kinds(repo) == set()
    # an integration whose signature does not verify
    cand = ready["candidate"]
    msg = _integration_message(ready["id"], cand, ready["baseline"])
    forged = _merge(repo, integrated, cand, msg, *_foreign_key(setup.tmp))
    git(repo, "update-ref", "refs/heads/main", forged)
    assert {"bad-signature", "protected-moved"} <= _kinds(repo)
    git(repo, "update-ref", "refs/heads/main", integrated)
    # the pre-push hook changed, then missing
    hook = repo / ".git" / "hooks" / "pre-push"
    original = hook.read_text()
    hook.write_text("#!/bin/sh\nexit 0\n")
    assert "hook-changed" in _kinds(repo)
    hook.unlink()
    assert "hook-missing" in _kinds(repo)
    hook.write_text(original)
    hook.chmod(0o755)
    assert _kinds(repo) == set()
    # sup.* settings changed
    git(repo, "config", "--add", "sup.trustRoot", git(repo, "rev-parse", "HEAD"))
    git(repo, "config", "sup.pushTags", "allow")
    changed = [f["detail"] for f in _doctor(repo) if f["kind"] == "config-changed"]
    assert any(d.startswith("sup.trustroot:") for d in changed), changed
    assert any(d.startswith("sup.pushtags:") for d in changed), changed
    # `git sup init` (a person's act) takes the current settings as the new baseline
    assert run_sup(repo, "init").returncode == 0
    assert _kinds(repo) == set()


@pytest.mark.parametrize("verify", [True, False], ids=["hook", "server"])
def test_a_task_still_pushes_nothing(setup: Setup, ready: dict[str, Any], verify: bool) -> None:
    _integrate(setup.repo, ready["id"])
    res = push(
        setup.repo,
        *([] if verify else ["--no-verify"]),
        "origin",
        "main",
        env={"GITSUP_TASK": ready["id"]},
    )
    rejected(res, "inside task")


def test_the_users_own_ssh_key_signs_when_configured(repo: Path, tmp: Path) -> None:
    from gitsup.boundary.signing import default_signing_key
    from tests.boundary.conftest import make_bare, make_task

    key = tmp / "user_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    git(repo, "config", "gpg.format", "ssh")
    git(repo, "config", "user.signingKey", str(key))
    assert run_sup(repo, "init").returncode == 0
    assert not Path(default_signing_key()).exists()  # no dedicated key needed
    signers = Path(git(repo, "config", "gpg.ssh.allowedSignersFile")).read_text()
    assert (tmp / "user_key.pub").read_text().split()[1] in signers
    origin = make_bare(tmp, "origin", repo, review=True)
    git(repo, "remote", "add", "origin", str(origin))
    rec = make_task(Setup(repo, origin, origin, tmp))
    _integrate(repo, rec["id"])
    fingerprint = subprocess.run(
        ["ssh-keygen", "-lf", str(key)], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert git(repo, "log", "-1", "--format=%G? %GF", "main") == f"G {fingerprint}"
    accepted(push(repo, "origin", "main"))


def test_gate_install_does_not_copy_settings_a_task_could_have_written(
    setup: Setup, tmp: Path
) -> None:
    """A worker shares .git/config: it may point the allowed-signers file at its own key or
    add its commit as a trust root. `gate install` refuses to carry either to a server."""
    bare = tmp / "new.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    evil = tmp / "evil_signers"
    evil.write_text("x@example.invalid ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBogus\n")
    git(setup.repo, "config", "gpg.ssh.allowedSignersFile", str(evil))
    res = run_sup(setup.repo, "gate", "install", str(bare))
    assert res.returncode == 2 and "gpg.ssh.allowedsignersfile changed" in res.stderr, res.stderr
    assert git(bare, "config", "--get-all", "sup.allowedSigner", check=False) == ""
    git(setup.repo, "config", "--unset", "gpg.ssh.allowedSignersFile")
    assert run_sup(setup.repo, "init").returncode == 0  # the person's own change: re-recorded
    smuggled = _commit(setup.repo, "smuggled", "main")
    git(setup.repo, "config", "--add", "sup.trustRoot", smuggled)
    res = run_sup(setup.repo, "gate", "install", str(bare))
    assert res.returncode == 2 and "sup.trustroot changed" in res.stderr, res.stderr
    assert smuggled not in git(bare, "config", "--get-all", "sup.trustRoot", check=False)
