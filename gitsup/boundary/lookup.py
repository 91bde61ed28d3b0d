"""What the gate asks Git, for the hook path (no pygit2: a push pays milliseconds).

`RepoConfig` holds the boundary's settings read in one `git config` process. `GitLookup`
answers the evaluator's questions with few processes (through gitrun): one `cat-file --batch`
walk for fast-forwards (`merge-base --is-ancestor` only for what it cannot settle), and
`trust.TrustCheck` for what protected branches gain.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from gitsup.boundary import gitrun
from gitsup.boundary.evaluate import Allowance, PushPolicy, RefUpdate, Untrusted
from gitsup.boundary.gitrun import GitCli
from gitsup.boundary.trust import TrustCheck
from gitsup.protected import effective, is_protected


class RepoConfig:
    """The boundary's settings: `sup.*` plus remote URLs (for review-remote matching)."""

    def __init__(self, values: Mapping[str, Sequence[str]]) -> None:
        self.values = values

    @classmethod
    def read(cls, git: GitCli) -> RepoConfig:
        return cls(
            git.config(r"^(sup\..*|remote\..*\.(url|pushurl)|gpg\.ssh\.allowedsignersfile)$")
        )

    def get(self, key: str) -> str | None:
        vals = self.values.get(key.lower())
        return vals[-1] if vals else None

    def get_all(self, key: str) -> list[str]:
        return list(self.values.get(key.lower(), []))

    def policy(self) -> PushPolicy:
        return PushPolicy(
            protected=effective(self.get_all("sup.protected")),
            tags=_allowance(self.get("sup.pushTags")),
            other=_allowance(self.get("sup.pushOther")),
        )

    def is_true(self, key: str) -> bool:
        return (self.get(key) or "").strip().lower() in ("true", "yes", "on", "1")

    def trust_roots(self) -> list[str]:
        return [r.strip() for r in self.get_all("sup.trustRoot") if r.strip()]

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


def protected_tips(git: GitCli, patterns: Sequence[str]) -> dict[str, str]:
    """Ref -> tip of every branch `patterns` protect (one `for-each-ref`)."""
    out = git.out("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/")
    tips: dict[str, str] = {}
    for line in (out or "").splitlines():
        oid, _, ref = line.partition(" ")
        if is_protected(ref, patterns):
            tips[ref] = oid
    return tips


class GitLookup:
    """`CandidateLookup` over plain git; `trust` judges what protected branches gain."""

    def __init__(self, git: GitCli, trust: TrustCheck) -> None:
        self.git = git
        self.trust = trust
        self._ancestry: dict[tuple[str, str], bool | None] = {}
        self._untrusted: dict[str, Untrusted | None] = {}

    def prefetch(self, ancestry: Iterable[tuple[str, str]], protected: Sequence[RefUpdate]) -> None:
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
        todo = [u for u in protected if u.ref not in self._untrusted]
        if todo:
            # Only fast-forwards need the (costlier) trust check.
            ff = [u for u in todo if u.is_create or self._ancestry.get((u.old, u.new))]
            self._untrusted.update(self.trust.check([(u.ref, u.old, u.new) for u in ff]))

    def untrusted(self, update: RefUpdate) -> Untrusted | None:
        if update.ref not in self._untrusted:
            self.prefetch([], [update])
        # Fail closed: an update the check did not judge is not trusted.
        return self._untrusted.get(
            update.ref, Untrusted(update.new, "could not be checked (not a fast-forward?)", 1)
        )

    def _walk(
        self, pairs: Sequence[tuple[str, str]], max_steps: int = 64
    ) -> dict[tuple[str, str], bool]:
        """Pairs proven fast-forward by walking at most `max_steps` commits back from new."""
        found: dict[tuple[str, str], bool] = {}
        try:
            cat = gitrun.start(
                ["git", "cat-file", "--batch"],
                cwd=self.git.cwd,
                env=self.git.env,
                stdin=gitrun.PIPE,
                stdout=gitrun.PIPE,
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

    def is_ancestor(self, ancestor: str, descendant: str) -> bool | None:
        key = (ancestor, descendant)
        if key not in self._ancestry:
            self.prefetch([key], [])
        return self._ancestry[key]

    def _is_ancestor(self, ancestor: str, descendant: str) -> bool | None:
        res = self.git.run("merge-base", "--is-ancestor", ancestor, descendant)
        if res.returncode == 0:
            return True
        if res.returncode == 1:
            return False
        return None  # 128: an object is missing here
