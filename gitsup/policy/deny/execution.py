"""What the execution scanner reads off a command: downloads piped or substituted into it and
the script file a shell runs (docs/policy.md, "Deny: D1-D4")."""

from __future__ import annotations

from gitsup.policy.facts import ScanState
from gitsup.policy.normalise.expand import basename
from gitsup.policy.parse.script import Part


# -- execution of payloads and downloads ---------------------------------------------------
def downloads_in(part: Part | None, st: ScanState) -> bool:
    """Is some earlier stage of the pipeline feeding this part a downloader?"""
    seen = 0
    while part is not None and seen < 32:
        if part.words and any(basename(w.src) in st.policy.downloaders for w in part.words[:6]):
            return True
        part = part.pipe_prev
        seen += 1
    return False


def subst_downloads(part: Part, st: ScanState) -> bool:
    for w in part.words:
        for s in w.segs:
            if s.inner and any(
                p.words and any(basename(x.src) in st.policy.downloaders for x in p.words[:6])
                for p in s.inner
            ):
                return True
    for r in part.redirects:
        if r.target is not None:
            for s in r.target.segs:
                if s.inner and any(
                    p.words and basename(p.words[0].src) in st.policy.downloaders for p in s.inner
                ):
                    return True
    return False


def shell_script_arg(args: list[str]) -> tuple[str | None, str | None, bool]:
    """(-c script, script file, reads stdin) for a shell's arguments."""
    i = 0
    command_mode = False
    while i < len(args):
        a = args[i]
        if a == "--" or a == "-":
            i += 1
            break
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if a.startswith("--command="):
            return a.split("=", 1)[1], None, False
        if a == "--command":
            return (args[i + 1] if i + 1 < len(args) else None), None, False
        if a.startswith("--"):
            i += 1
            continue
        if (a.startswith("-") or a.startswith("+")) and len(a) > 1:
            if "c" in a[1:]:
                command_mode = True
            i += 1
            continue
        break
    rest = args[i:]
    if command_mode:
        return (rest[0] if rest else None), None, False
    if rest:
        return None, rest[0], False
    return None, None, True
