"""Git through `subprocess`, for the hook path (no pygit2: a push pays milliseconds).

`GitCli` runs plain `git` in the hook's environment, so in a `pre-receive` hook
it sees the quarantined objects of the push under way. `GitLookup` answers the
evaluator's questions with few processes: one `ls-tree` of the notes tree, one
`cat-file --batch` for the notes needed, and `merge-base --is-ancestor` per pair
(run concurrently).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence

from gitsup.boundary.evaluate import DEFAULT_PROTECTED, NOTES_REF, Allowance, Policy, is_zero


class GitCli:
    def __init__(self, cwd: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.cwd = cwd
        self.env = env

    def run(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["git", *args],
            cwd=self.cwd,
            env=None if self.env is None else dict(self.env),
            input=input,
            capture_output=True,
            check=False,
        )

    def out(self, *args: str) -> str | None:
        """stdout of a successful command (stripped), or None."""
        res = self.run(*args)
        if res.returncode != 0:
            return None
        return res.stdout.decode("utf-8", "replace").strip()

    def config(self, pattern: str) -> dict[str, list[str]]:
        """All config values whose key matches `pattern` (lower-cased keys), one process."""
        res = self.run("config", "-z", "--get-regexp", pattern)
        values: dict[str, list[str]] = {}
        if res.returncode != 0:
            return values
        for entry in res.stdout.decode("utf-8", "replace").split("\0"):
            if not entry:
                continue
            key, _, value = entry.partition("\n")
            values.setdefault(key.lower(), []).append(value)
        return values


class RepoConfig:
    """The boundary's settings: `sup.*` plus remote URLs (for review-remote matching)."""

    def __init__(self, values: Mapping[str, Sequence[str]]) -> None:
        self.values = values

    @classmethod
    def read(cls, git: GitCli) -> RepoConfig:
        return cls(git.config(r"^(sup\..*|remote\..*\.(url|pushurl))$"))

    def get(self, key: str) -> str | None:
        vals = self.values.get(key.lower())
        return vals[-1] if vals else None

    def get_all(self, key: str) -> list[str]:
        return list(self.values.get(key.lower(), []))

    def policy(self) -> Policy:
        protected = tuple(self.get_all("sup.protected")) or DEFAULT_PROTECTED
        return Policy(
            protected=protected,
            tags=_allowance(self.get("sup.pushTags")),
            other=_allowance(self.get("sup.pushOther")),
        )

    def is_true(self, key: str) -> bool:
        return (self.get(key) or "").strip().lower() in ("true", "yes", "on", "1")

    def remote_urls(self, name: str) -> list[str]:
        return self.get_all(f"remote.{name}.url") + self.get_all(f"remote.{name}.pushurl")


def _allowance(value: str | None) -> Allowance:
    # Unknown values deny: a typo must not open the gate.
    if value is None or value.strip().lower() == "allow":
        return "allow"
    return "deny"


def _norm_url(url: str) -> str:
    u = url.strip()
    if u.startswith("file://"):
        u = u[len("file://") :]
    if u.startswith("/") or u.startswith("."):
        u = os.path.realpath(u)
    return u.rstrip("/").removesuffix("/.git")


def is_review_remote(cfg: RepoConfig, remote: str, url: str) -> bool:
    """Does this push go to `sup.reviewRemote` (a remote name or a URL)?"""
    wanted = cfg.get("sup.reviewRemote")
    if not wanted:
        return False
    if wanted == remote:
        return True
    targets = {_norm_url(url), _norm_url(remote)} - {""}
    candidates = [wanted, *cfg.remote_urls(wanted)]
    return any(_norm_url(c) in targets for c in candidates)


class GitLookup:
    """`CandidateLookup` over plain git. `notes_commit` overrides refs/notes/sup
    (pre-receive: the notes commit arriving in the same push)."""

    def __init__(self, git: GitCli, notes_commit: str | None = None) -> None:
        self.git = git
        self.notes_commit = notes_commit
        self._status: dict[str, str | None] = {}
        self._ancestry: dict[tuple[str, str], bool | None] = {}

    def prefetch(self, notes: Iterable[str], ancestry: Iterable[tuple[str, str]]) -> None:
        wanted = [o for o in dict.fromkeys(notes) if o not in self._status]
        pairs = [p for p in dict.fromkeys(ancestry) if p not in self._ancestry]
        if pairs:
            # Fast-forwards are usually a few commits long: walk parents through one
            # `cat-file --batch`; only what that cannot settle costs a merge-base each.
            self._ancestry.update(self._walk(pairs))
            rest = [p for p in pairs if p not in self._ancestry]
            if len(rest) == 1:
                self._ancestry[rest[0]] = self._is_ancestor(*rest[0])
            elif rest:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=min(8, len(rest))) as pool:
                    for pair, result in zip(
                        rest, pool.map(lambda p: self._is_ancestor(*p), rest), strict=True
                    ):
                        self._ancestry[pair] = result
        if wanted:
            self._status.update(self._read_statuses(wanted))

    def _walk(
        self, pairs: Sequence[tuple[str, str]], max_steps: int = 64
    ) -> dict[tuple[str, str], bool]:
        """Pairs proven fast-forward by walking at most `max_steps` commits back from new."""
        found: dict[tuple[str, str], bool] = {}
        try:
            cat = subprocess.Popen(
                ["git", "cat-file", "--batch"],
                cwd=self.git.cwd,
                env=None if self.git.env is None else dict(self.git.env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            return found
        assert cat.stdin is not None and cat.stdout is not None
        stdin, stdout = cat.stdin, cat.stdout
        parents: dict[str, list[str] | None] = {}

        def parents_of(oid: str) -> list[str] | None:
            if oid not in parents:
                stdin.write(f"{oid}\n".encode())
                stdin.flush()
                header = stdout.readline().split()
                if len(header) != 3:
                    parents[oid] = None  # missing
                else:
                    body = stdout.read(int(header[2]) + 1)
                    if header[1] != b"commit":
                        parents[oid] = None
                    else:
                        head = body.split(b"\n\n", 1)[0]
                        parents[oid] = [
                            line[7:].decode()
                            for line in head.split(b"\n")
                            if line.startswith(b"parent ")
                        ]
            return parents[oid]

        try:
            for old, new in pairs:
                todo, seen, steps = [new], {new}, 0
                while todo and steps < max_steps:
                    oid = todo.pop(0)
                    steps += 1
                    ps = parents_of(oid)
                    if ps is None:
                        break
                    if old in ps:
                        found[(old, new)] = True
                        break
                    for p in ps:
                        if p not in seen:
                            seen.add(p)
                            todo.append(p)
        except (OSError, ValueError):
            pass
        finally:
            stdin.close()
            cat.wait()
        return found

    def note_status(self, oid: str) -> str | None:
        if oid not in self._status:
            self.prefetch([oid], [])
        return self._status.get(oid)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool | None:
        key = (ancestor, descendant)
        if key not in self._ancestry:
            self.prefetch([], [key])
        return self._ancestry[key]

    def _is_ancestor(self, ancestor: str, descendant: str) -> bool | None:
        res = self.git.run("merge-base", "--is-ancestor", ancestor, descendant)
        if res.returncode == 0:
            return True
        if res.returncode == 1:
            return False
        return None  # 128: an object is missing here

    def _read_statuses(self, oids: Sequence[str]) -> dict[str, str | None]:
        """One `cat-file --batch` for every note needed: each note is looked up at the
        paths notes fan-out may put it (flat, `ab/cdef...`, `ab/cd/ef...`)."""
        out: dict[str, str | None] = dict.fromkeys(oids)
        commit = self.notes_commit or NOTES_REF
        if is_zero(commit):
            return out
        queries: list[tuple[str, str]] = []
        for oid in oids:
            for path in (oid, f"{oid[:2]}/{oid[2:]}", f"{oid[:2]}/{oid[2:4]}/{oid[4:]}"):
                queries.append((oid, f"{commit}:{path}"))
        res = self.git.run(
            "cat-file", "--batch", input="".join(f"{q}\n" for _, q in queries).encode()
        )
        data, pos = res.stdout, 0
        for oid, _query in queries:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            header = data[pos:nl].split()
            pos = nl + 1
            if len(header) != 3:  # "<query> missing"
                continue
            size = int(header[2])
            body = data[pos : pos + size]
            pos += size + 1
            if header[1] == b"blob" and out[oid] is None:
                out[oid] = _status_of(body)
        return out


def _status_of(body: bytes) -> str | None:
    import json

    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not str(obj.get("schema", "")).startswith("gitsup.candidate/"):
        return None
    status = obj.get("status")
    return status if isinstance(status, str) else None
