"""gitsup.preload: imports run in a background thread during the body and are done after it;
and the modules a task start preloads are the ones it then imports."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

from gitsup.spec import spec_from_mapping
from gitsup.tasks.lifecycle import TASK_MODULES, after_checkout
from gitsup.workers.kinds import KINDS


def _run(tmp_path: Path, body: str) -> str:
    """`body` in a fresh interpreter with three modules of its own on the path: `slow`
    (waits, up to 10 s, for the file GO to exist; records whether it saw it and the thread
    that imported it), `broken` (raises) and `fine`. GO is the body's to create."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "slow.py").write_text(
        "import os, threading, time\n"
        f"GO = {str(tmp_path / 'go')!r}\n"
        "end = time.monotonic() + 10\n"
        "while not os.path.exists(GO) and time.monotonic() < end:\n"
        "    time.sleep(0.01)\n"
        "SAW_GO = os.path.exists(GO)\n"
        "THREAD = threading.current_thread().name\n"
    )
    (mods / "broken.py").write_text("raise RuntimeError('broken on import')\n")
    (mods / "fine.py").write_text("VALUE = 1\n")
    code = (
        f"import sys\nsys.path.insert(0, {str(mods)!r})\nGO = {str(tmp_path / 'go')!r}\n"
        + textwrap.dedent(body)
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_imports_run_in_another_thread_during_the_body_and_are_done_after_it(
    tmp_path: Path,
) -> None:
    out = _run(
        tmp_path,
        """
        import pathlib, threading
        from gitsup.preload import preloading
        with preloading(["slow", "fine"]):
            names = [th.name for th in threading.enumerate()]
            pathlib.Path(GO).touch()  # `slow` finishes only after the body got here
        assert "gitsup-preload" in names, names
        slow = sys.modules["slow"]
        assert slow.SAW_GO and slow.THREAD == "gitsup-preload", vars(slow)
        assert "fine" in sys.modules
        assert [th.name for th in threading.enumerate()] == ["MainThread"]
        print("ok")
        """,
    )
    assert out.strip() == "ok"


def test_a_failing_import_is_left_to_the_callers_own_import(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        """
        from gitsup.preload import preloading
        with preloading(["broken", "fine", "no_such_module_here"]):
            pass
        assert "broken" not in sys.modules and "fine" in sys.modules
        try:
            import broken
        except RuntimeError as exc:
            print("raised:", exc)
        try:
            import no_such_module_here
        except ModuleNotFoundError:
            print("not found")
        """,
    )
    assert out.splitlines() == ["raised: broken on import", "not found"]


def test_nothing_to_import_starts_no_thread(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        """
        import threading
        import fine
        from gitsup.preload import preloading
        with preloading(["fine", "sys"]):
            print(len(threading.enumerate()))
        """,
    )
    assert out.strip() == "1"


def test_the_body_raising_still_waits_for_the_imports(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        """
        import pathlib
        from gitsup.preload import preloading
        try:
            with preloading(["slow"]):
                pathlib.Path(GO).touch()
                raise KeyError("checkout failed")
        except KeyError:  # the module is in sys.modules while it runs: it has run to its end
            print(getattr(sys.modules.get("slow"), "THREAD", None))
        """,
    )
    assert out.strip() == "gitsup-preload"


def test_each_kind_preloads_the_module_its_adapter_lives_in() -> None:
    for kind in KINDS.values():
        assert importlib.util.find_spec(kind.module) is not None, kind.module
        spec = spec_from_mapping({"goal": "g", "worker": {"kind": kind.name, "argv": "true"}})
        assert kind.module in after_checkout(spec)


def test_the_task_modules_exist_and_pyroute2_comes_with_a_namespace() -> None:
    for name in TASK_MODULES:
        assert importlib.util.find_spec(name) is not None, name
    isolated = spec_from_mapping({"goal": "g", "worker": {"kind": "process", "argv": "true"}})
    host = spec_from_mapping(
        {
            "goal": "g",
            "worker": {"kind": "process", "argv": "true"},
            "isolation": {"network": "host"},
        }
    )
    assert "pyroute2" in after_checkout(isolated)
    assert "pyroute2" not in after_checkout(host)
