"""The candidate page: one self-contained HTML file per task (no script, no network).

Built from the same data as `git sup show --json` (the task record), the task's events
(sealed in Git, then the write-ahead log), the candidate note and the diff against the
baseline. Everything shown is escaped; a Content-Security-Policy forbids scripts and
every fetch, so even a page that an attacker shaped cannot run code or call out.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitsup.store import eventtypes as et
from gitsup.store.payload import given, payload_of

if TYPE_CHECKING:
    from gitsup.store.suprepo import SupRepo

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
MAX_DIFF_BYTES = 16 * 1024 * 1024

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2125;background:#fafbfc}
header{background:#24292f;color:#fff;padding:12px 20px}
header h1{font-size:18px;margin:0 0 4px}
nav{padding:6px 20px;background:#eaeef2;position:sticky;top:0}
nav a{margin-right:14px}
main{padding:4px 20px 40px}
section{margin:18px 0}
h2{font-size:16px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #eaeef2;padding:3px 6px;vertical-align:top;text-align:left}
td.t{white-space:nowrap;color:#57606a;font-family:monospace}
td.k{white-space:nowrap;font-weight:600}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;margin:4px 0;font-size:12px}
code{background:#eaeef2;padding:1px 4px;border-radius:3px}
.repro{color:#57606a;font-size:12px}
.ok{color:#1a7f37}.bad{color:#cf222e}.warn{color:#9a6700}
.ready{background:#dafbe1}.parked,.stopped{background:#fff8c5}.failed{background:#ffebe9}\n.integrated{background:#ddf4ff}
.badge{padding:2px 8px;border-radius:10px;font-weight:600;color:#1d2125}
tr.state_changed td.k{color:#0969da}tr.permission_decided td.k{color:#8250df}
tr.acceptance_result td.k,tr.review_result td.k{color:#9a6700}
tr.repair_requested td.k{color:#cf222e}
.diff{font-family:monospace;font-size:12px;white-space:pre;background:#fff;border:1px solid #d0d7de;overflow-x:auto;padding:0}
.diff{padding:0 6px}.diff span{display:block;margin:0 -6px;padding:0 6px}
.diff .a{background:#e6ffec}.diff .d{background:#ffebe9}.diff .h{background:#ddf4ff;color:#0550ae}
.diff .f{background:#f6f8fa;font-weight:700;border-top:1px solid #d0d7de}
"""


@dataclass
class PageData:
    show: dict[str, Any]
    events: list[dict[str, Any]]
    note: dict[str, Any] | None
    diff: str
    diff_from: str
    diff_to: str | None
    diff_truncated: bool
    cost: dict[str, Any]
    signature: tuple[str, str] = ("N", "")


def collect(ctx: SupRepo, task: str) -> PageData:
    from gitsup.ids import Oid
    from gitsup.store.ledger import sealed_events, task_cost
    from gitsup.tasks.lifecycle import show_dict

    record = ctx.store.load(task)
    show = show_dict(ctx, record)
    events = sealed_events(ctx, record.id)
    note = None
    if record.candidate:
        text = ctx.repo.read_note(Oid(record.candidate))
        if text:
            try:
                loaded = json.loads(text)
                note = loaded if isinstance(loaded, dict) else None
            except ValueError:
                note = None
    target = record.candidate or record.wip or ctx.repo.branch_target(record.branch)
    diff, truncated = "", False
    if target and record.baseline and target != record.baseline:
        diff, truncated = _diff(ctx, record.baseline, target)
    return PageData(
        show=show,
        events=events,
        note=note,
        diff=diff,
        diff_from=record.baseline,
        diff_to=target,
        diff_truncated=truncated,
        cost=task_cost(record.id, events).breakdown(),
        signature=(
            ctx.repo.signature(Oid(note["integration_commit"]))
            if note and isinstance(note.get("integration_commit"), str)
            else ("N", "")
        ),
    )


def _diff(ctx: SupRepo, a: str, b: str) -> tuple[str, bool]:
    from gitsup.host.proc import run

    res = run(
        ["git", "-C", str(ctx.repo.common_dir), "diff", "--no-color", "--no-ext-diff", a, b],
        timeout=60,
        max_output=MAX_DIFF_BYTES,
        merge_stderr=False,
    )
    return res.output, res.truncated


# --- rendering --------------------------------------------------------------------------------


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _when(ts: Any) -> str:
    if not isinstance(ts, int | float):
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _repro(cmd: list[str]) -> str:
    return f'<p class="repro">reproduce: <code>{e(shlex.join(cmd))}</code></p>'


def _summary(t: str, d: Mapping[str, Any]) -> str:
    """One escaped HTML cell for an event."""
    match payload_of(t, d):
        case et.StateChanged() as p:
            s = f"{e(p.from_)} &rarr; <b>{e(p.to)}</b>"
            return s + (f" ({e(p.reason)})" if p.reason else "")
        case et.TurnCompleted() as p:
            usage = given(p.usage) or {}
            toks = ", ".join(f"{k} {v}" for k, v in usage.items() if isinstance(v, int))
            cost = given(p.cost_usd) or 0.0
            s = f"{e(p.subtype)}; cost ${cost:.4f}; round {e(given(p.repair_round, 0))}" + (
                f"; tokens: {e(toks)}" if toks else ""
            )
            if p.result:
                s += f"<pre>{e(p.result[:2000])}</pre>"
            return s
        case et.PermissionDecided() as p:
            if given(p.cancelled):
                return "cancelled"
            answer = given(p.answer)
            cls = "ok" if answer == "allow" else "bad"
            inp = json.dumps(given(p.input) or {}, ensure_ascii=False)[:400]
            message = given(p.message)
            return (
                f"{e(given(p.tool))}: <span class='{cls}'>{e(answer)}</span> "
                f"(verdict {e(given(p.verdict))}, rule <code>{e(given(p.rule))}</code>)"
                f"<pre>{e(inp)}</pre>" + (f"<div>{e(message)}</div>" if message else "")
            )
        case et.AcceptanceResult() as p:
            s = (
                f"{e(p.name)}: <span class='{'ok' if p.passed else 'bad'}'>"
                f"{'passed' if p.passed else 'FAILED'}</span> (exit {e(p.exit_code)}, "
                f"{e(p.duration)}s) <code>{e(shlex.join(map(str, p.argv)))}</code>"
            )
            if p.output_tail:
                s += f"<pre>{e(p.output_tail[-4000:])}</pre>"
            return s
        case et.ReviewResult() as p:
            if p.error:
                return f"attempt {e(given(p.attempt))}: <span class='bad'>{e(p.error)}</span>"
            return f"verdict <b>{e(given(p.verdict))}</b>" + _findings(given(p.findings))
        case et.RepairRequested() as p:
            probs = "".join(f"<li>{e(x)}</li>" for x in p.problems)
            return f"<b>repair round {e(p.repair_round)}</b><ul>{probs}</ul>"
        case et.Decision() as p:
            if given(p.error):
                return f"<span class='bad'>{e(given(p.on))}: {e(given(p.error))}</span>"
            reason = given(p.reason)
            return f"{e(given(p.action))}" + (f": {e(reason)}" if reason else "")
        case et.ModelCall() as p:
            return f"{e(p.role)}: ${float(p.cost_usd or 0):.4f}"
        case et.WorkerOutput() as p:
            return f"<pre>{e(p.text[-2000:])}</pre>"
    text = json.dumps(d, ensure_ascii=False, default=str)
    return e(text if len(text) <= 400 else text[:400] + "…")


def _findings(findings: Any) -> str:
    if not isinstance(findings, list) or not findings:
        return ""
    items = []
    for f in findings:
        if not isinstance(f, Mapping):
            continue
        where = f"{f.get('path')}:{f.get('line')}" if f.get("path") else ""
        items.append(
            f"<li><b>{e(f.get('severity'))}</b> {e(f.get('title'))}"
            + (f" <code>{e(where)}</code>" if where else "")
            + (f"<div>{e(f['detail'])}</div>" if f.get("detail") else "")
            + "</li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def render_diff(diff: str) -> tuple[str, list[tuple[str, str]]]:
    """The diff as one preformatted block with classed lines, and (anchor, escaped path)
    for each file. The whole text is escaped once (escaping keeps each line's first
    character, which is all the classification reads); unchanged lines carry no markup."""
    out: list[str] = []
    files: list[tuple[str, str]] = []
    add = out.append
    for line in html.escape(diff, quote=True).split("\n"):
        c = line[:1]
        if c == " " or not c:
            add(line + "\n")
        elif c == "+" and not line.startswith("+++ "):
            add(f'<span class="a">{line}</span>')
        elif c == "-" and not line.startswith("--- "):
            add(f'<span class="d">{line}</span>')
        elif c == "@" and line.startswith("@@"):
            add(f'<span class="h">{line}</span>')
        elif c == "d" and line.startswith("diff --git "):
            anchor = f"file-{len(files) + 1}"
            files.append((anchor, line.split(" b/", 1)[-1] if " b/" in line else line[11:]))
            add(f'<span class="f" id="{anchor}">{line}</span>')
        else:
            add(line + "\n")
    return "".join(out), files


_COST_LABELS = (
    ("total_usd", "total"),
    ("worker_usd", "worker"),
    ("reviewer_usd", "reviewer"),
    ("decider_usd", "decider"),
)


def _round_label(key: str) -> str:
    return f"round {key}" if key.isdigit() else key.replace("_", " ")


def _integration_rows(data: PageData) -> list[tuple[str, Any]]:
    """The integration commit and who signed it, when the candidate was integrated."""
    note = data.note or {}
    commit = note.get("integration_commit")
    if not commit:
        return []
    rows: list[tuple[str, Any]] = [
        ("integrated into", f"{note.get('integrated_into') or '?'} as {commit}")
    ]
    status, signer = data.signature
    good = {"G": "good signature", "U": "good signature (untrusted key)"}.get(status)
    rows.append(("signed by", f"{signer or '?'}: {good}" if good else f"signature: {status}"))
    return rows


def comments_section(comments: list[Mapping[str, Any]], task: str) -> str:
    """The review comments (`show --json`: `comments`), each with its status; every word
    of them escaped."""
    if not comments:
        return ""
    from gitsup.supervision.prompts import printable

    def t(v: object) -> str:  # a person's text: control characters shown as escapes
        return e(printable(str(v), keep="\t\n"))

    rows = []
    for c in comments:
        st = str(c.get("status"))
        out = c.get("outcome") if isinstance(c.get("outcome"), Mapping) else None
        cls = {"addressed": "ok", "not addressed": "bad"}.get(str((out or c).get("status")), "warn")
        status = e(st) + (f" &rarr; {e(out.get('task'))}: {e(out.get('status'))}" if out else "")
        origin = f" (task {e(c.get('task'))})" if c.get("task") != task else ""
        rows.append(
            f"<tr class='comment' id='comment-{e(c.get('task'))}-{e(c.get('id'))}'>"
            f"<td class='k'>{e(c.get('id'))}{origin}</td>"
            f"<td><code>{t(c.get('path'))}:{e(c.get('line'))}</code> "
            f"<span class='{cls}'>{status}</span> {t(c.get('why') or '')}"
            f"<div class='repro'>{t(c.get('by'))}, {e(_when(c.get('at')))} UTC, "
            f"on {e(str(c.get('commit'))[:12])}</div>"
            f"<pre>{t(c.get('line_text') or '')}</pre>"
            f"<div class='message'><pre>{t(c.get('message') or '')}</pre></div></td></tr>"
        )
    return (
        "<section id='comments'><h2>Review comments</h2><table>"
        + "".join(rows)
        + "</table>"
        + _repro(["git", "sup", "comment", task, "--list"])
        + "</section>"
    )


def render(data: PageData, *, index_href: str | None = None) -> str:
    s = data.show
    tid = str(s.get("id"))
    status = str(s.get("status"))
    p: list[str] = []
    w = p.append
    w("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>")
    w(f'<meta http-equiv="Content-Security-Policy" content="{CSP}">')
    w(f"<title>gitsup task {e(tid)}</title><style>{_CSS}</style></head><body>")
    goal = str(s.get("goal") or "")
    w(
        f"<header><h1>task {e(tid)} <span class='badge {e(status)}' id='status'>{e(status)}</span>"
        f"</h1><div id='goal'>{e(goal.splitlines()[0] if goal else '')}</div></header>"
    )
    links = [
        ("summary", "Summary"),
        ("timeline", "Timeline"),
        ("checks", "Checks"),
        ("review", "Review"),
        ("diff", "Diff"),
        ("cost", "Cost"),
    ]
    if s.get("comments"):
        links.insert(1, ("comments", "Comments"))
    nav = "".join(f"<a href='#{a}'>{t}</a>" for a, t in links)
    if index_href:
        nav = f"<a href='{e(index_href)}' id='index-link'>All tasks</a>" + nav
    w(f"<nav>{nav}</nav><main>")
    # summary
    cand = s.get("candidate")
    base = str(s.get("baseline") or "")
    w("<section id='summary'><h2>Summary</h2><table>")
    rows = [
        ("state", f"{s.get('state')} ({status})"),
        ("goal", goal),
        (
            "baseline",
            base + (f" (from {s.get('source_branch')})" if s.get("source_branch") else ""),
        ),
        ("branch", s.get("branch")),
        ("candidate", cand or "-"),
        ("wip", s.get("wip") or "-"),
        *_integration_rows(data),
        ("turns", s.get("turns")),
        ("repair rounds", s.get("repair_rounds")),
        ("cost", f"${data.cost['total_usd']:.4f}"),
        ("events", len(data.events)),
    ]
    for k, v in rows:
        w(
            f"<tr><td class='k'>{e(k)}</td><td>{e(v) if k != 'goal' else '<pre>' + e(v) + '</pre>'}</td></tr>"
        )
    for r in s.get("reasons") or []:
        w(f"<tr><td class='k'>reason</td><td>{e(r)}</td></tr>")
    policy = s.get("policy_change") or []
    if policy:
        w(
            "<tr id='policy-change'><td class='k bad'>policy change</td><td class='bad'>"
            f"changes gitsup's policy for every later task: {e(', '.join(policy))}; "
            "review it as a security change (integrate needs <code>--allow-policy-change</code>)"
            "</td></tr>"
        )
    w("</table>")
    w(_repro(["git", "sup", "show", tid, "--json"]))
    if cand:
        w(_repro(["git", "notes", "--ref=sup", "show", str(cand)]))
    w("</section>")
    w(comments_section(s.get("comments") or [], tid))
    # timeline
    w("<section id='timeline'><h2>Timeline</h2><table>")
    for ev in data.events:
        t = str(ev.get("type"))
        d = ev.get("data") or {}
        w(
            f"<tr class='{e(t)}'><td class='t'>{e(ev.get('seq'))} {_when(ev.get('ts'))}</td>"
            f"<td class='k'>{e(t)}</td><td>{_summary(t, d if isinstance(d, Mapping) else {})}</td></tr>"
        )
    w("</table>")
    w(_repro(["git", "sup", "log", tid, "--json"]))
    w(_repro(["git", "log", "-p", f"refs/sup/{tid}/log"]))
    w("</section>")
    # checks
    w("<section id='checks'><h2>Checks</h2>")
    qe = s.get("queue_evidence")
    if isinstance(qe, Mapping):
        w("<div id='queue-evidence'><h3 class='bad'>Sent back by the integration queue</h3>")
        if qe.get("conflicts"):
            w(f"<p>conflicts with the target in: <code>{e(', '.join(qe['conflicts']))}</code></p>")
        for f in qe.get("failed") or []:
            composed = str(qe.get("composed_on") or "")[:12]
            w(
                f"<div><b class='bad'>FAIL</b> {e(f.get('name'))} on the composed tree"
                + (f" (onto {e(composed)})" if composed else "")
                + "</div>"
            )
            if f.get("output_tail"):
                w(f"<pre>{e(f['output_tail'])}</pre>")
        w("</div><h3>On the task's own tree</h3>")
    checks = s.get("checks") or []
    if not checks:
        w("<p>no checks recorded</p>")
    for c in checks:
        ok = c.get("passed")
        w(
            f"<div><b class='{'ok' if ok else 'bad'}'>{'pass' if ok else 'FAIL'}</b> {e(c.get('name'))} "
            f"(round {e(c.get('round'))}, exit {e(c.get('exit_code'))}) "
            f"<code>{e(shlex.join(map(str, c.get('argv') or [])))}</code>"
        )
        if c.get("output_tail"):
            w(f"<pre>{e(c['output_tail'])}</pre>")
        w("</div>")
    w("</section>")
    # review
    w("<section id='review'><h2>Review</h2>")
    rv = s.get("review")
    if isinstance(rv, Mapping) and (rv.get("kind") == "none" or rv.get("verdict") is None):
        why = "not reviewed (review kind none)" if rv.get("kind") == "none" else "no verdict"
        w(f"<p>{e(why)}</p>")
        if rv.get("error"):
            w(f"<p class='bad'>{e(rv['error'])}</p>")
    elif isinstance(rv, Mapping):
        w(
            f"<p>{e(rv.get('kind'))}: verdict <b>{e(rv.get('verdict'))}</b> after {e(rv.get('attempts'))} attempt(s)"
        )
        if rv.get("error"):
            w(f" <span class='bad'>{e(rv['error'])}</span>")
        w("</p>" + _findings(rv.get("findings")))
    else:
        w("<p>no review</p>")
    w("</section>")
    # diff
    w("<section id='diff'><h2>Diff</h2>")
    if data.diff_to:
        body, files = render_diff(data.diff)
        w(f"<p>{len(files)} file(s), {e(base[:12])}..{e(str(data.diff_to)[:12])}</p>")
        if files:
            w(
                "<ul id='files'>"
                + "".join(f"<li><a href='#{a}'>{f}</a></li>" for a, f in files)
                + "</ul>"
            )
        if data.diff_truncated:
            w(f"<p class='warn'>diff cut at {MAX_DIFF_BYTES} bytes</p>")
        w(f"<div class='diff' id='diff-body'>{body}</div>")
        w(_repro(["git", "diff", base, str(data.diff_to)]))
    else:
        w("<p>no changes against the baseline</p>")
    w("</section>")
    # cost
    c = data.cost
    w("<section id='cost'><h2>Cost</h2><table>")
    for k, label in _COST_LABELS:
        w(f"<tr><td class='k'>{e(label)}</td><td>${float(c[k]):.4f}</td></tr>")
    if c.get("stand_in_usd"):
        w(
            "<tr><td class='k'>of which a model API on this machine (a stand-in or a local "
            "gateway)</td>"
            f"<td>${float(c['stand_in_usd']):.4f}</td></tr>"
        )
    for k, v in c["rounds"].items():
        w(f"<tr><td class='k'>{e(_round_label(k))}</td><td>${float(v):.4f}</td></tr>")
    for k, v in c["tokens"].items():
        w(f"<tr><td class='k'>{e(k.replace('_', ' '))}</td><td>{e(v)}</td></tr>")
    w("</table>")
    w(_repro(["git", "sup", "cost", "--json"]))
    w("</section></main></body></html>")
    return "".join(p)


def render_task(ctx: SupRepo, task: str, *, index_href: str | None = None) -> str:
    return render(collect(ctx, task), index_href=index_href)


def render_index(ctx: SupRepo) -> str:
    from gitsup.attention.fold import Board

    rows = Board(ctx.layout).refresh()
    p = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>gitsup tasks</title><style>{_CSS}</style></head><body>",
        f"<header><h1>gitsup tasks</h1><div>{e(ctx.repo.main_workdir)}</div></header><main>",
        "<table id='tasks'><tr><th>task</th><th>status</th><th>state</th><th>cost</th>"
        "<th>needs</th><th>goal</th></tr>",
    ]
    for r in rows:
        p.append(
            f"<tr><td><a href='/task/{e(r.id)}'>{e(r.id)}</a></td>"
            f"<td><span class='badge {e(r.status)}'>{e(r.status)}</span></td><td>{e(r.state)}</td>"
            f"<td>${r.cost_usd:.4f}</td><td class='warn'>{e('; '.join(r.attention))}</td>"
            f"<td>{e(r.goal)}</td></tr>"
        )
    p.append("</table></main></body></html>")
    return "".join(p)
