"""A candidate that changes `.gitsup/` is flagged everywhere a person or the reviewer looks,
and integrate and the queue refuse it unless a person consents (`--allow-policy-change`),
which the signed integration commit records as a trailer."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import PYTHON, git, run_sup
from tests.helpers.sup import start_json, write_worker

WIDEN = """
import pathlib, subprocess
p = pathlib.Path(".gitsup/policy.toml")
p.parent.mkdir(exist_ok=True)
p.write_text('[sandbox]\\nwrite = ["~/.config"]\\n')
c = pathlib.Path("calc.py")
c.write_text(c.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "fix add; let tools keep their settings"], check=True)
"""

# a command reviewer that keeps the evidence it was given and passes
JUDGE = """
import json, os, pathlib, sys
bundle = json.loads(sys.stdin.read())
pathlib.Path(os.environ["TMPDIR"], "evidence.json").write_text(json.dumps(bundle))
print(json.dumps({"verdict": "pass", "findings": []}))
"""


def _start(repo: Path, tmp: Path, name: str) -> dict[str, Any]:
    worker = write_worker(tmp, WIDEN, f"{name}.py")
    judge = tmp / "judge.py"
    judge.write_text(JUDGE)
    spec = tmp / f"{name}.toml"
    spec.write_text(
        'goal = "fix add"\n'
        f'[worker]\nkind = "process"\nargv = {json.dumps(shlex.split(worker))}\n'
        f'[review]\nkind = "command"\nargv = {json.dumps([PYTHON, str(judge)])}\n'
    )
    rc, rec, err = start_json(repo, "--spec", str(spec), timeout=180)
    assert rc == 0, (rec.get("reasons"), err)
    assert rec["status"] == "ready" and rec["candidate"], rec
    return rec


def test_a_policy_change_is_flagged_and_needs_consent(repo: Path, tmp: Path) -> None:
    assert run_sup(repo, "init").returncode == 0
    rec = _start(repo, tmp, "widen")
    tid, cand = rec["id"], rec["candidate"]
    changed = [".gitsup/policy.toml"]
    # show, text and JSON
    shown = json.loads(run_sup(repo, "show", tid, "--json").stdout)
    assert shown["policy_change"] == changed
    text = run_sup(repo, "show", tid).stdout
    assert "POLICY    changes .gitsup/: .gitsup/policy.toml" in text, text
    # the candidate note
    note = json.loads(git(repo, "notes", "--ref=sup", "show", cand))
    assert note["policy_change"] == changed
    # the report page
    page = tmp / "page.html"
    assert run_sup(repo, "report", tid, "--output", str(page)).returncode == 0
    html = page.read_text()
    assert "id='policy-change'" in html and ".gitsup/policy.toml" in html
    # the reviewer was told
    box = repo / ".git" / "sup" / "tasks" / tid / "sandbox" / "tmp"
    evidence = json.loads((box / "evidence.json").read_text())
    assert evidence["policy_change"] == changed
    assert "security change" in evidence["policy_change_note"]

    # integrate refuses without consent: exit 2, one line naming the path, main untouched
    before = git(repo, "rev-parse", "main")
    res = run_sup(repo, "integrate", tid, "--into", "main")
    assert res.returncode == 2, res.stderr
    first = res.stderr.splitlines()[0]
    assert first == (
        f"git sup: error: candidate {cand[:12]} of task {tid} changes gitsup's policy: "
        ".gitsup/policy.toml"
    ), res.stderr
    assert "--allow-policy-change" in res.stderr
    assert git(repo, "rev-parse", "main") == before
    # so does the queue
    res = run_sup(repo, "queue", "add", tid, "--into", "main")
    assert res.returncode == 2 and "changes gitsup's policy: .gitsup/policy.toml" in res.stderr
    assert tid not in run_sup(repo, "queue", "--json").stdout

    # with consent: integrated, and the signed commit records it
    res = run_sup(repo, "integrate", tid, "--into", "main", "--allow-policy-change", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["integrated"] is True and out["policy_change"] == changed
    body = git(repo, "log", "-1", "--format=%B", "main")
    assert "Sup-Policy-Change: .gitsup/policy.toml" in body, body
    assert f"Sup-Candidate: {cand}" in body
    verify = subprocess.run(["git", "verify-commit", "main"], cwd=repo, capture_output=True)
    assert verify.returncode == 0, verify.stderr


def test_the_queue_integrates_a_policy_change_only_with_consent(repo: Path, tmp: Path) -> None:
    assert run_sup(repo, "init").returncode == 0
    rec = _start(repo, tmp, "widen")
    tid = rec["id"]
    res = run_sup(repo, "queue", "add", tid, "--into", "main")
    assert res.returncode == 2, res.stderr
    res = run_sup(repo, "queue", "add", tid, "--into", "main", "--allow-policy-change", "--json")
    assert res.returncode == 0, res.stderr
    entry = json.loads(res.stdout)["entries"][-1]
    assert entry["task"] == tid and entry["policy_change"] == [".gitsup/policy.toml"]
    ran = run_sup(repo, "queue", "run", "--into", "main", "--json", timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)[0]["integrated"] == [tid]
    body = git(repo, "log", "-1", "--format=%B", "main")
    assert "Sup-Policy-Change: .gitsup/policy.toml" in body and "Sup-Queue: main" in body, body


def test_a_change_outside_gitsup_dir_is_not_flagged(repo: Path, tmp: Path) -> None:
    assert run_sup(repo, "init").returncode == 0
    worker = write_worker(
        tmp,
        "import pathlib, subprocess\n"
        "pathlib.Path('gitsup-notes.md').write_text('not policy\\n')\n"
        "c = pathlib.Path('calc.py')\n"
        "c.write_text(c.read_text().replace('a - b', 'a + b'))\n"
        "subprocess.run(['git', 'add', '-A'], check=True)\n"
        "subprocess.run(['git', 'commit', '-q', '-m', 'fix'], check=True)\n",
    )
    rc, rec, err = start_json(repo, "fix add", "--worker", worker, "--review", "none")
    assert rc == 0, (rec.get("reasons"), err)
    assert json.loads(run_sup(repo, "show", rec["id"], "--json").stdout)["policy_change"] == []
    res = run_sup(repo, "integrate", rec["id"], "--into", "main")
    assert res.returncode == 0, res.stderr
    assert "Sup-Policy-Change" not in git(repo, "log", "-1", "--format=%B", "main")
