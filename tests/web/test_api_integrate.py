"""Integrate and queue through the API: the same use cases as `git sup integrate` and
`git sup queue add` (re-run checks, a signed merge), and the page shows the integration; a
best-of-N group's attempts side by side."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import git, run_sup
from tests.helpers.sup import FIX_AND_COMMIT, start_json, write_worker
from tests.web.server import bearer, request, serving

OTHER = """
import pathlib, subprocess
pathlib.Path("other.txt").write_text("other\\n")
subprocess.run(["git", "add", "other.txt"], check=True)
subprocess.run(["git", "commit", "-qm", "other"], check=True)
"""


def test_integrate_and_queue_through_the_api(repo: Path, tmp: Path) -> None:
    git(repo, "config", "user.email", "integrator@example.invalid")
    assert run_sup(repo, "init").returncode == 0
    worker = write_worker(tmp, FIX_AND_COMMIT)
    rc, first, err = start_json(repo, "fix", "--worker", worker, "--review", "none")
    assert rc == 0, err
    other = write_worker(tmp, OTHER, "other.py")
    rc, second, err = start_json(repo, "add a file", "--worker", other, "--review", "none")
    assert rc == 0, err
    before = git(repo, "rev-parse", "main")
    with serving(repo) as s:
        api = f"{s.base}/api/tasks/{first['id']}"
        got = request(api + "/integrate", method="POST", headers=bearer(s), body=b"{}")
        assert got.status == 400 and "'into'" in got.json()["error"]
        assert git(repo, "rev-parse", "main") == before
        body = json.dumps({"into": "main"}).encode()
        got = request(api + "/integrate", method="POST", headers=bearer(s), body=body)
        assert got.status == 200, got
        result = got.json()["result"]
        merge = git(repo, "rev-parse", "main")
        assert merge != before and result["integrated"] is True
        assert "integrator@example.invalid" in git(repo, "log", "-1", "--format=%GS %G?", merge)
        # Integrated once: a second time is refused, the target untouched.
        again = request(api + "/integrate", method="POST", headers=bearer(s), body=body)
        assert again.status == 400 and again.json()["error"], again  # as exit 2
        assert git(repo, "rev-parse", "main") == merge
        page = request(f"{s.base}/task/{first['id']}", headers=bearer(s))
        assert f"main as {merge}" in page.body
        assert "integrator@example.invalid: good signature" in page.body
        got = request(
            f"{s.base}/api/tasks/{second['id']}/queue",
            method="POST",
            headers=bearer(s),
            body=json.dumps({"into": "main"}).encode(),
        )
        assert got.status == 200, got
    res = run_sup(repo, "queue", "--json")
    assert second["id"] in res.stdout, res.stdout


def test_a_best_of_n_group_side_by_side(repo: Path, tmp: Path) -> None:
    import sys

    def argv(body: str, name: str) -> str:
        return json.dumps([sys.executable, write_worker(tmp, body, name).split()[-1]])

    spec = tmp / "task.toml"
    spec.write_text(
        'goal = "fix <b>add</b>"\n[review]\nkind = "none"\n'
        '[worker]\nkind = "process"\nargv = ["true"]\n[attempts]\nn = 2\n'
        f'[[attempts.workers]]\nkind = "process"\nargv = {argv(FIX_AND_COMMIT, "fix.py")}\n'
        f'[[attempts.workers]]\nkind = "process"\nargv = {argv(OTHER, "other.py")}\n'
    )
    res = run_sup(repo, "start", "--spec", str(spec), "--json", "-q", timeout=600)
    assert res.returncode == 0, res.stderr
    g = json.loads(res.stdout)
    with serving(repo) as s:
        index = request(s.base + "/", headers=bearer(s))
        assert f'href="/group/{g["group"]}"' in index.body
        page = request(f"{s.base}/group/{g['group']}", headers=bearer(s))
        assert page.status == 200
        for t in g["members"]:
            assert f'href="/task/{t}"' in page.body
        assert "fix &lt;b&gt;add&lt;/b&gt;" in page.body
        assert request(f"{s.base}/group/g20990101-000000", headers=bearer(s)).status == 404
