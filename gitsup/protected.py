"""What `sup.protected` means, everywhere: the default branches plus the configured additions.

One definition, shared by the shell-policy classifier, the client `pre-push` hook, the server
`pre-receive` gate and `git sup gate install`. Configured values only *add* (names, `release/*`
globs, or full `refs/heads/...` patterns); the defaults stay protected. Standard library only:
the hook path imports this on every push.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_PROTECTED: tuple[str, ...] = ("main", "master", "trunk", "develop", "integration")

_HEADS = "refs/heads/"


def effective(additions: Iterable[str] = ()) -> tuple[str, ...]:
    """The defaults, then each configured addition once (`refs/heads/x` is `x`)."""
    out: list[str] = []
    for name in (*DEFAULT_PROTECTED, *additions):
        name = name.strip()
        if name.startswith(_HEADS):
            name = name[len(_HEADS) :]
        if name and name not in out:
            out.append(name)
    return tuple(out)


def is_protected(ref: str, patterns: Iterable[str]) -> bool:
    """Does `ref` (`main`, `refs/heads/main`, `+refs/heads/main`) name a protected branch?

    Only branches are protected: a ref under `refs/` other than `refs/heads/` never is."""
    ref = ref.lstrip("+")
    if ref.startswith(_HEADS):
        name = ref[len(_HEADS) :]
    elif ref.startswith("refs/"):
        return False
    else:
        name = ref
    for pat in patterns:
        pat = pat.strip()
        if pat.startswith(_HEADS):
            pat = pat[len(_HEADS) :]
        if not pat:
            continue
        if name == pat:
            return True
        if any(c in pat for c in "*?["):
            import fnmatch  # only for patterns: it imports `re`

            if fnmatch.fnmatchcase(name, pat):
                return True
    return False
