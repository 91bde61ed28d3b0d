"""Control requests (gitsup/store/control.py): a request is taken once, and only a regular
file its owner alone can read, written by the supervisor's own user; anything else planted
in the control dir is refused and removed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gitsup.store import control


def test_a_request_is_written_atomically_and_taken_once(tmp_path: Path) -> None:
    ref = control.submit(tmp_path, "answer", {"request_id": "r1", "decision": "allow"})
    d = control.control_dir(tmp_path)
    assert [p.name for p in d.iterdir()] == [f"{ref}.json"]
    assert (d / f"{ref}.json").stat().st_mode & 0o777 == 0o600
    assert d.stat().st_mode & 0o777 == 0o700
    [req] = control.take(tmp_path)
    assert req.refused is None and req.kind == "answer" and req.ref == ref
    assert req.data["request_id"] == "r1"
    assert control.take(tmp_path) == [] and list(d.iterdir()) == []


def _plant(tmp_path: Path, name: str, body: dict[str, object], mode: int = 0o600) -> Path:
    d = control.control_dir(tmp_path)
    d.mkdir(exist_ok=True)
    p = d / f"{name}.json"
    p.write_text(json.dumps(body))
    p.chmod(mode)
    return p


def test_what_is_not_the_supervisors_own_request_is_refused(tmp_path: Path) -> None:
    body = {"kind": "answer", "ref": "a", "request_id": "r1", "decision": "allow"}
    _plant(tmp_path, "a", body, 0o644)  # others can read it
    target = _plant(tmp_path, "b", {**body, "ref": "b"})
    os.link(target, tmp_path / "elsewhere")  # a second link
    (control.control_dir(tmp_path) / "c.json").symlink_to(tmp_path / "elsewhere")
    other = _plant(tmp_path, "d", {**body, "ref": "d"})
    os.chown(other, 65534, 65534)  # another user's
    _plant(tmp_path, "e", {**body, "ref": "not-e"})  # a ref that is not its name
    _plant(tmp_path, "f", {**body, "ref": "f", "kind": "stop"})  # not a request kind
    taken = {r.ref: r.refused for r in control.take(tmp_path)}
    assert set(taken) == {"a", "b", "c", "d", "e", "f"}
    assert all(taken.values()), taken
    assert "others" in str(taken["a"]) and "links" in str(taken["b"])
    assert "cannot open" in str(taken["c"]) and "uid 65534" in str(taken["d"])
    assert list(control.control_dir(tmp_path).iterdir()) == []
