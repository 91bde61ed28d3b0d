"""The worker bootstrap: join a cgroup and/or a network namespace, then exec the command.

    python -m gitsup.bootstrap [--cgroup DIR] [--netns PATH] -- ARGV...

Runs before the real command executes, so no descendant of it can start outside the
cgroup or the namespace. Standard library only; exits 126 when it cannot contain.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNET = 0x40000000


def _fail(msg: str) -> None:
    sys.stderr.write(f"gitsup bootstrap: {msg}\n")
    sys.stderr.flush()
    os._exit(126)


def main(argv: list[str]) -> None:
    cgroup = netns = None
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--cgroup" and i + 1 < len(argv):
            cgroup = argv[i + 1]
            i += 2
        elif argv[i] == "--netns" and i + 1 < len(argv):
            netns = argv[i + 1]
            i += 2
        else:
            _fail(f"unknown argument {argv[i]!r}")
    cmd = argv[i + 1 :]
    if not cmd:
        _fail("no command")
    if cgroup is not None:
        try:
            fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError as exc:
            _fail(f"cannot join cgroup {cgroup}: {exc.strerror}")
    if netns is not None:
        try:
            fd = os.open(netns, os.O_RDONLY)
        except OSError as exc:
            _fail(f"cannot open network namespace {netns}: {exc.strerror}")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            _fail(f"cannot enter network namespace {netns}: {os.strerror(ctypes.get_errno())}")
        os.close(fd)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"gitsup bootstrap: cannot run {cmd[0]!r}: {exc.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
