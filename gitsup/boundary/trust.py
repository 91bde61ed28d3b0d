"""Is every commit a protected branch gains integrated? The check both gates and
`git sup integrate` make, with few processes (standard library only).

A commit a protected branch gains (reachable from the new tip, not from the old tip, a trust
root or anything else excluded) is accepted when it is
- an integration: a merge with `Sup-Task`/`Sup-Candidate`/`Sup-Baseline` trailers whose second
  parent is the named candidate, signed by an allowed signer; or
- inside the candidate range (`baseline..candidate`) that such an integration names.

Processes: one `rev-list --parents` for every ref at once, one `cat-file --batch` for the merge
commits among the new ones, and one `ssh-keygen -Y verify` per signature not verified before
(in parallel).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gitsup.boundary.evaluate import Untrusted
from gitsup.boundary.gitrun import CompletedProcess, GitCli
from gitsup.boundary.signing import Commit, cached, parse_commit, remember, verify


class TrustCheck:
    def __init__(
        self,
        cwd: str | None,
        env: Mapping[str, str] | None,
        *,
        roots: Iterable[str] = (),
        allowed_signers: str = "",
        exclude: Iterable[str] = (),
        cache: bool = True,
    ) -> None:
        self.cwd = cwd
        self.env = env
        self.roots = [r for r in roots if r]
        self.allowed = allowed_signers
        self.exclude = [e for e in exclude if e]
        self.cache = cache
        self.verified: set[str] = set()
        self.shaped: set[str] = set()  # integration-shaped commits seen (verified or not)

    def _git(self, *args: str, input: bytes | None = None) -> CompletedProcess[bytes]:
        return GitCli(self.cwd, self.env).run(*args, input=input)

    def check(self, updates: Sequence[tuple[str, str, str]]) -> dict[str, Untrusted | None]:
        """`updates` are `(key, old, new)`; old may be all zeros (a new branch).
        Returns per key None (everything it adds is integrated) or why not."""
        out: dict[str, Untrusted | None] = {k: None for k, _, _ in updates}
        news = list(dict.fromkeys(n for _, _, n in updates))
        if not news:
            return out
        olds = [o for _, o, _ in updates if o.strip("0")]
        nots = list(dict.fromkeys([*olds, *self.roots, *self.exclude]))
        res = self._git("rev-list", "--parents", "--ignore-missing", *news, "--not", *nots)
        if res.returncode != 0:
            err = res.stderr.decode("utf-8", "replace").strip().splitlines()
            why = f"cannot list its commits ({err[-1] if err else 'git rev-list failed'})"
            return {k: Untrusted(n, why, 1) for k, _, n in updates}
        graph: dict[str, tuple[str, ...]] = {}
        for line in res.stdout.decode().split("\n"):
            if line:
                oid, *parents = line.split()
                graph[oid] = tuple(parents)
        merges = [o for o, ps in graph.items() if len(ps) >= 2]
        commits = self._read(merges)
        shaped = [c for c in commits.values() if c.is_integration]
        known = cached(self.allowed, self.env) if self.cache else set()
        fresh = [c for c in shaped if c.oid not in known]
        good = {c.oid for c in shaped if c.oid in known} | verify(fresh, self.allowed)
        if self.cache:
            remember([c.oid for c in fresh if c.oid in good], self.allowed, self.env)
        self.verified |= good
        self.shaped |= {c.oid for c in shaped}

        def reach(start: str) -> set[str]:
            seen: set[str] = set()
            todo = [start] if start in graph else []
            while todo:
                oid = todo.pop()
                if oid in seen:
                    continue
                seen.add(oid)
                todo.extend(p for p in graph[oid] if p in graph and p not in seen)
            return seen

        covered: dict[str, set[str]] = {}
        for oid in good:
            t = commits[oid].trailers
            covered[oid] = {oid} | (reach(t["Sup-Candidate"]) - reach(t["Sup-Baseline"]))
        for key, _old, new in updates:
            gained = reach(new)
            ok: set[str] = set()
            for oid in gained & good:
                ok |= covered[oid]
            bad = gained - ok
            if bad:
                worst = _explain(sorted(bad, key=lambda o: (o not in commits, o)), commits)
                out[key] = Untrusted(worst[0], worst[1], len(bad))
        return out

    def _read(self, oids: Sequence[str]) -> dict[str, Commit]:
        if not oids:
            return {}
        res = self._git("cat-file", "--batch", input="".join(f"{o}\n" for o in oids).encode())
        data, pos, out = res.stdout, 0, {}
        for oid in oids:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            header = data[pos:nl].split()
            pos = nl + 1
            if len(header) != 3:
                continue
            size = int(header[2])
            body = data[pos : pos + size]
            pos += size + 1
            if header[1] == b"commit":
                out[oid] = parse_commit(oid, body)
        return out


def _explain(bad: Sequence[str], commits: Mapping[str, Commit]) -> tuple[str, str]:
    """One offending commit and why (integration-shaped ones first: they say the most)."""
    oid = bad[0]
    c = commits.get(oid)
    if c is not None and c.is_integration:
        if c.signature is None:
            return oid, "is shaped like an integration but is not signed"
        return oid, "is shaped like an integration but its signature is not by an allowed signer"
    if c is not None and c.trailers.get("Sup-Task"):
        return oid, "has Sup-* trailers but is not a well-formed integration merge"
    return oid, "is neither a signed integration nor inside the candidate range of one"
