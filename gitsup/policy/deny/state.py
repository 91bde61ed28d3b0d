"""What one part leaves behind for the deny scan of later parts (docs/policy.md, "Decision order", step 3): files
written with literal content, downloaded files, and whether HEAD is protected."""

from __future__ import annotations

from gitsup.policy import facts
from gitsup.policy.deny.writes import file_operands
from gitsup.policy.facts import STATE, ScanState
from gitsup.policy.normalise.expand import basename
from gitsup.policy.parse.script import Part


def update_state(argv: list[str], part: Part, st: ScanState) -> None:
    """Record what this part leaves behind for later parts: files written with literal content,
    downloaded files, copies of either, and whether HEAD is now a protected branch."""
    prog = basename(argv[0]) if argv else ""
    args = argv[1:]
    is_download = prog in st.policy.downloaders
    for r in part.redirects:
        if r.op in (">", ">>", ">|", "&>", "&>>") and r.target is not None:
            path = st.path(st.expander().value(r.target))
            if is_download:
                st.downloaded.add(path)
                continue
            content = st.stdout_of(part)
            if content is not None:
                st.files[path] = (st.files.get(path, "") if r.op in (">>", "&>>") else "") + content
    if is_download:
        for i, a in enumerate(args):
            nxt = args[i + 1] if i + 1 < len(args) else ""
            if (
                a in ("-o", "--output", "-O", "--output-document")
                and nxt
                and not (prog == "curl" and a == "-O")
            ):
                if nxt != "-":
                    st.downloaded.add(st.path(nxt))
            elif a.startswith("--output=") or a.startswith("--output-document="):
                st.downloaded.add(st.path(a.split("=", 1)[1]))
            elif a.startswith("-o") and len(a) > 2 and prog == "curl":
                st.downloaded.add(st.path(a[2:]))
            elif (
                a.startswith("-")
                and not a.startswith("--")
                and len(a) > 2
                and nxt
                and a[-1] in ("o" if prog == "curl" else "O")
            ):
                st.downloaded.add(st.path(nxt))
        urls = [a for a in args if "://" in a]
        remote_name = prog == "wget" and not any(
            a.startswith("-O") or a.startswith("--output-document") for a in args
        )
        remote_name = remote_name or (
            prog == "curl"
            and any(
                a in ("-O", "--remote-name")
                or (a.startswith("-") and not a.startswith("--") and "O" in a)
                for a in args
            )
        )
        if remote_name:
            for u in urls:
                name = u.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                if name:
                    st.downloaded.add(st.path(name))
    if prog not in STATE:
        return
    if prog == "tee":
        data = st.stdin_of(part)
        for op in file_operands(args):
            if data is not None:
                st.files[st.path(op)] = data
    if prog in ("cp", "mv", "install") and len(file_operands(args)) == 2:
        src_, dst = (st.path(x) for x in file_operands(args))
        if src_ in st.files:
            st.files[dst] = st.files[src_]
        if src_ in st.downloaded:
            st.downloaded.add(dst)
    if prog == "git" and ("checkout" in argv or "switch" in argv):
        call = facts.parse_git(argv)
        if not any(name == "-C" for name, _ in call.options):
            state = facts.switches_to(call, st.policy)
            if state is not None:
                st.head_protected = state
