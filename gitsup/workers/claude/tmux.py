"""The `tmux` worker: the interactive Claude Code TUI in a private tmux server.

One tmux server per task (its socket in the task directory, or a short path under
/tmp when that is too long for a unix socket), one pane running ``claude`` in the
worktree. People can watch and type (`git sup attach ID`); the task survives a
supervisor restart (`git sup recover ID --takeover` re-adopts the pane after checking
its identity).

Supervision is by Claude Code hooks, never by reading the screen for decisions: a
per-task settings file (``--settings``; the user's own configuration is untouched)
registers ``http`` hooks for PreToolUse, PermissionRequest, Stop, UserPromptSubmit,
Notification, SessionStart and SessionEnd, pointing at a loopback endpoint served by
this adapter with a per-task secret header (`gitsup.workers.claude.hooks`). The PreToolUse
answer is the enforced boundary: a deny blocks the call even when the tool is
pre-allowed. Allowed calls get "no decision", so Claude Code's own mode applies, and a
later PermissionRequest is answered from the same policy.

The screen is read (capture-pane) only at startup: to accept Claude Code's
workspace-trust dialog for the task's own worktree (recorded as the event
`workspace_trust_accepted`) and to wait for a stable input prompt. Task input is
pasted: ``load-buffer`` + bracketed ``paste-buffer -p`` + Enter, no shell; control
bytes are refused and CRLF is normalised. ``pipe-pane`` appends everything the pane
shows to ``pane.log`` in the task directory.

Capabilities: repairable and persistent. Stop of a session this adapter started kills
the tmux server and verifies that the pane's processes are gone; a session re-adopted
after a supervisor restart is detached (hooks closed), never killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gitsup import faults
from gitsup.errors import GitsupError
from gitsup.host import proc
from gitsup.host.procid import same_start
from gitsup.names import TASK_MARKER
from gitsup.store.eventtypes import WorkspaceTrustAccepted
from gitsup.workers.base import (
    Capabilities,
    PermissionAnswer,
    WorkerAdapter,
    WorkerError,
    WorkerExited,
    WorkerIdentity,
    WorkerNote,
    WorkerOutput,
    WorkerSetup,
)
from gitsup.workers.claude.hooks import (
    DEFAULT_BOUND,
    SECRET_ENV,
    HookBridge,
    HookServer,
    hook_settings,
    private_dir,
)
from gitsup.workers.claude.relay import socket_path_for
from gitsup.workers.claude.tmux_screen import (
    input_prompt_ready,
    trust_dialog,
    trust_dialog_path_matches,
    trust_yes_selected,
)
from gitsup.workers.claude.tmux_setup import (
    check_tmux_settings,
    clean_input,
    merge_settings,
    split_arguments,
    tmux_socket_path,
)
from gitsup.workers.claude.worker import find_claude, loaded_settings_files, read_settings_files

SESSION = "gitsup"
WIDTH, HEIGHT = 200, 50
STARTUP_TIMEOUT = 60.0
TMUX_TIMEOUT = 10.0  # seconds any one tmux command may take


# --- the adapter ------------------------------------------------------------------------


class TmuxWorker(WorkerAdapter):
    kind = "tmux"
    capabilities = Capabilities(repairable=True, persistent=True)

    def __init__(self, ctx: WorkerSetup) -> None:
        super().__init__(ctx)
        self._bound = self._hook_bound()
        self.bridge = HookBridge(
            ctx.inbox, bound=self._bound, max_text=ctx.max_output_bytes, on_session=self._on_session
        )
        self.hooks: HookServer | None = None
        self._socket: Path | None = None
        self._pane_id: str | None = None
        self._pane_pid: int | None = None
        self._owned = False
        self._detached = False
        self._stopping = False
        self._exited = threading.Event()
        self._monitor: threading.Thread | None = None
        self._sent_keys: set[str] = set()
        self._send_lock = threading.Lock()
        self._paste_n = 0
        self._identity: WorkerIdentity | None = None

    # --- settings -------------------------------------------------------------------------

    def _startup_timeout(self) -> float:
        value = self.ctx.options.startup_timeout
        return STARTUP_TIMEOUT if value is None else value

    def _hook_bound(self) -> float:
        value = self.ctx.options.hook_timeout or self.ctx.env.get("GITSUP_HOOK_TIMEOUT")
        try:
            return float(value) if value else DEFAULT_BOUND
        except (TypeError, ValueError):
            return DEFAULT_BOUND

    def _secret_file(self) -> Path:
        return self.ctx.task_dir / "hook-secret"

    def _settings_file(self) -> Path:
        return self.ctx.task_dir / "claude-settings.json"

    def _log_file(self) -> Path:
        return self.ctx.task_dir / "pane.log"

    def _hook_socket(self) -> str:
        wt = os.path.realpath(self.ctx.worktree)
        from gitsup.workers.claude.relay import locate

        found = locate(wt)
        common = found[0] if found is not None else str(self.ctx.task_dir.parents[2])
        return socket_path_for(common, wt)

    def _spec_extra(self) -> tuple[list[str], str | None]:
        spec = self.ctx.options.spec
        if spec is None:
            return list(self.ctx.options.extra_args), None
        return list(spec.worker.extra_args), spec.worker.model

    def preflight(self) -> tuple[list[str], list[Any]]:
        extra, _model = self._spec_extra()
        rest, user_settings = split_arguments(list(self.ctx.argv[1:]) + extra)
        # Only the user's settings files load (`--setting-sources user`): a worktree's
        # .claude/settings*.json can set disableAllHooks, which switches gitsup's hooks off,
        # and the worker could write one during the session (measured with 2.1.328).
        for f, data in read_settings_files(
            loaded_settings_files(self.ctx.worktree, self.ctx.env)[:2]
        ):
            check_tmux_settings(data, str(f))
        return rest, user_settings

    # --- tmux -----------------------------------------------------------------------------

    def _tmux(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> list[str]:
        """Run one tmux command on the task's server, bounded by `timeout` (the client is
        killed then): a wedged tmux never wedges the supervisor. Its output lines, or
        WorkerError."""
        timeout = TMUX_TIMEOUT if timeout is None else timeout
        try:
            res = proc.run(
                ["tmux", "-S", str(self._socket), "-f", "/dev/null", *args],
                input=input,
                env=env,
                timeout=timeout,
            )
        except GitsupError as exc:
            raise WorkerError(f"tmux {args[0]} failed: {exc}") from exc
        if not res.ok:
            why = f"timed out after {timeout:g}s" if res.timed_out else res.output.strip()[:500]
            raise WorkerError(f"tmux {args[0]} failed: {why}")
        return res.output.splitlines()

    def _cmd(self, *args: str) -> list[str]:
        return self._tmux(*args)

    def _server_alive(self) -> bool:
        if self._socket is None:
            return False
        try:
            self._tmux("list-sessions")
        except WorkerError:
            return False
        return True

    def _server_pids(self) -> list[int]:
        """The pid of the tmux server on our socket: asked from tmux, else found by the
        socket path on a process's command line (a server that does not answer)."""
        import psutil

        with contextlib.suppress(WorkerError, ValueError, IndexError):
            return [int(self._tmux("display-message", "-p", "#{pid}")[0])]
        sock = str(self._socket)
        found = []
        for p in psutil.process_iter(["pid", "name", "cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                cmd = p.info["cmdline"] or []
                if p.info["name"] == "tmux" and sock in cmd and p.pid != os.getpid():
                    found.append(p.pid)
        return found

    def _pane_info(self) -> dict[str, str]:
        fmt = "#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_current_path}"
        target = self._pane_id or f"{SESSION}:0.0"
        out = self._cmd("display-message", "-p", "-t", target, fmt)
        parts = (out[0] if out else "").split("\t")
        keys = ("pane_id", "pane_pid", "pane_dead", "pane_dead_status", "pane_current_path")
        return dict(zip(keys, parts + [""] * (len(keys) - len(parts)), strict=True))

    def capture(self, *, lines: int = HEIGHT) -> str:
        """The visible pane text (startup detection and display only)."""
        if self._pane_id is None:
            return ""
        try:
            return "\n".join(self._cmd("capture-pane", "-p", "-t", self._pane_id))
        except WorkerError:
            return ""

    # --- start ----------------------------------------------------------------------------

    def start(self, goal: str) -> WorkerIdentity:
        rest, user_settings = self.preflight()
        _extra, model = self._spec_extra()
        base = find_claude(self.ctx.argv[:1], self.ctx.env)
        goal = clean_input(goal)
        task_dir = self.ctx.task_dir
        task_dir.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(32)
        fd = os.open(self._secret_file(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret)
        try:
            self.hooks = HookServer(
                self.bridge.handle, secret=secret, unix_path=self._hook_socket()
            ).start()
        except OSError as exc:
            raise WorkerError(f"cannot serve hooks: {exc}") from exc
        # Whatever fails from here (a tmux command, the TUI, the trust dialog, an
        # interrupt) stops the tmux server and removes its socket before the error goes up:
        # a failed start leaves no private tmux server behind.
        try:
            ident = self._launch(secret, base, rest, user_settings, model)
        except BaseException as exc:
            try:
                self.stop(grace=1.0)
            except WorkerError as leak:
                raise WorkerError(f"{exc}; and after it: {leak}") from exc
            if isinstance(exc, (OSError, ValueError)):
                raise WorkerError(f"starting the Claude Code TUI failed: {exc}") from exc
            raise
        self._identity = ident
        self._start_monitor()
        self.send_turn(goal, key="goal")
        return ident

    def _launch(
        self,
        secret: str,
        base: Sequence[str],
        rest: Sequence[str],
        user_settings: list[Any],
        model: str | None,
    ) -> WorkerIdentity:
        assert self.hooks is not None
        task_dir = self.ctx.task_dir
        settings = merge_settings(
            user_settings, hook_settings(self.hooks.url, timeout=self._bound + 5)
        )
        self._settings_file().write_text(json.dumps(settings, indent=1) + "\n")
        argv = [*base, "--settings", str(self._settings_file())]
        if not any(a.split("=", 1)[0] == "--setting-sources" for a in rest):
            argv += ["--setting-sources", "user"]
        if not any(a.split("=", 1)[0] == "--permission-mode" for a in rest):
            argv += ["--permission-mode", "default"]
        if model:
            argv += ["--model", model]
        argv += rest
        gate = self.ctx.options.egress
        if gate is not None:  # the TUI in its namespace reaches its http hooks through the gate
            gate.add_forward(self.hooks.port)
        wrap = self.ctx.options.wrap
        if wrap is not None:
            argv = list(wrap(argv))
        self._socket = tmux_socket_path(task_dir, self.ctx.task_id)
        if self._socket.parent != task_dir:
            private_dir(self._socket.parent)
        env = {k: v for k, v in self.ctx.env.items() if k != "CLAUDECODE"}
        env[SECRET_ENV] = secret
        env[TASK_MARKER] = self.ctx.task_id
        env.setdefault("TERM", "xterm-256color")
        log = self._log_file()
        # The raw terminal recording is not redacted (docs/tmux.md): only its owner reads it.
        os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        self._owned = True  # from here on a tmux server may exist
        self._tmux(
            "start-server", ";",
            "set-option", "-g", "remain-on-exit", "on", ";",
            "set-option", "-g", "history-limit", "20000", ";",
            "new-session", "-d", "-s", SESSION, "-x", str(WIDTH), "-y", str(HEIGHT),
            "-c", str(self.ctx.worktree), "--", *argv, ";",
            "pipe-pane", "-O", "-t", f"{SESSION}:0.0", f"cat >> {shlex.quote(str(log))}",
            env=env,
        )  # fmt: skip
        faults.fail("tmux_server_started")
        info = self._pane_info()
        self._pane_id = info["pane_id"]
        self._pane_pid = int(info["pane_pid"])
        self._wait_ready()
        ident = self._make_identity(argv)
        return ident

    def _wait_ready(self) -> None:
        """Accept the trust dialog for our own worktree; wait for a stable input prompt."""
        end = time.monotonic() + self._startup_timeout()
        previous = None
        trust_done = False
        abort = self.ctx.options.abort
        while time.monotonic() < end:
            if abort is not None and abort.is_set():
                raise WorkerError("stop requested while the Claude Code TUI was starting")
            info = self._pane_info()
            if info.get("pane_dead") == "1":
                raise WorkerError(
                    f"claude exited at startup (status {info.get('pane_dead_status')}): "
                    + self.capture()[-1500:]
                )
            screen = self.capture()
            if trust_dialog(screen):
                if not trust_dialog_path_matches(screen, self.ctx.worktree):
                    raise WorkerError(
                        "Claude Code asks to trust a folder that is not the task's worktree: "
                        + screen[-800:]
                    )
                if not trust_done:
                    self._accept_trust()
                    trust_done = True
                    previous = None
                    continue
            elif input_prompt_ready(screen):
                if screen == previous:
                    return
                previous = screen
            else:
                previous = None
            time.sleep(0.25)
        raise WorkerError(
            "the Claude Code TUI did not show its input prompt within "
            f"{self._startup_timeout()}s "
            "(gitsup answers no dialog but workspace trust). Screen:\n" + self.capture()[-1500:]
        )

    def _accept_trust(self) -> None:
        assert self._pane_id is not None
        for _ in range(4):
            screen = self.capture()
            if trust_yes_selected(screen):
                break
            self._cmd("send-keys", "-t", self._pane_id, "Down")
            time.sleep(0.2)
        else:
            raise WorkerError("could not select 'Yes, I trust this folder' in the trust dialog")
        self._cmd("send-keys", "-t", self._pane_id, "Enter")
        self.ctx.inbox.put(
            WorkerNote(
                WorkspaceTrustAccepted(
                    path=str(self.ctx.worktree), how="trust dialog answered in the pane"
                )
            )
        )

    def _make_identity(self, argv: Sequence[str]) -> WorkerIdentity:
        import psutil

        assert self._pane_pid is not None and self._pane_id is not None
        try:
            p = psutil.Process(self._pane_pid)
            start_time = p.create_time()
            cmdline = p.cmdline()
            cwd = p.cwd()
        except psutil.Error as exc:
            raise WorkerError(f"the pane's process is gone: {exc}") from exc
        server_pid = None
        with contextlib.suppress(WorkerError, ValueError, IndexError):
            server_pid = int(self._cmd("display-message", "-p", "#{pid}")[0])
        extra = {
            "socket": str(self._socket),
            "session": SESSION,
            "pane_id": self._pane_id,
            "pane_pid": self._pane_pid,
            "pane_start_time": start_time,
            "cwd": cwd,
            "command": cmdline,
            "tmux_server_pid": server_pid,
            "hook_port": self.hooks.port if self.hooks else None,
            "hook_socket": self.hooks.unix_path if self.hooks else None,
            "settings": str(self._settings_file()),
            "log": str(self._log_file()),
        }
        return WorkerIdentity(
            pid=self._pane_pid, start_time=start_time, pgid=self._pane_pid, extra=extra
        )

    def _on_session(self, payload: Mapping[str, Any]) -> None:
        with contextlib.suppress(OSError):
            (self.ctx.task_dir / "claude-session.json").write_text(
                json.dumps(
                    {
                        "session_id": payload.get("session_id"),
                        "transcript_path": payload.get("transcript_path"),
                    }
                )
            )

    # --- input ----------------------------------------------------------------------------

    def send_turn(self, message: str, *, key: str) -> bool:
        text = clean_input(message)
        with self._send_lock:
            if key in self._sent_keys:
                return False
            if self.bridge.turn_active and key != "goal":
                raise WorkerError("a turn is active; a new one can be sent only after Stop")
            if not self.alive:
                raise WorkerError("the worker is gone")
            self._sent_keys.add(key)
            self.bridge.expect_prompt(text)
            try:
                self._paste(text)
            except WorkerError:
                self._sent_keys.discard(key)
                self.bridge.forget_prompt(text)
                with self.bridge._lock:
                    self.bridge.turn_active = False
                raise
        return True

    def _paste(self, text: str) -> None:
        assert self._pane_id is not None
        self._paste_n += 1
        name = f"gitsup-{os.getpid()}-{self._paste_n}"
        self._tmux("load-buffer", "-b", name, "-", input=text.encode("utf-8"))
        self._cmd("paste-buffer", "-p", "-d", "-b", name, "-t", self._pane_id)
        # Let the TUI take the bracketed paste in before the Enter that submits it.
        time.sleep(0.15)
        self._cmd("send-keys", "-t", self._pane_id, "Enter")
        if not self.bridge.prompt_seen.wait(5.0):
            # A long paste can need a moment; one more Enter if the prompt still waits.
            self._cmd("send-keys", "-t", self._pane_id, "Enter")

    def answer(self, request_id: str, answer: PermissionAnswer) -> None:
        self.bridge.answer(request_id, answer)

    def interrupt(self) -> None:
        if self._pane_id is not None:
            with contextlib.suppress(WorkerError):
                self._cmd("send-keys", "-t", self._pane_id, "Escape")

    # --- exit monitor ---------------------------------------------------------------------

    def _start_monitor(self) -> None:
        self._monitor = threading.Thread(target=self._watch, daemon=True)
        self._monitor.start()

    def _watch(self) -> None:
        while not self._exited.is_set():
            time.sleep(0.5)
            if self._stopping or self._exited.is_set():
                return
            status: int | None = None
            try:
                info = self._pane_info()
                if info.get("pane_dead") != "1":
                    continue
                with contextlib.suppress(ValueError):
                    status = int(info.get("pane_dead_status") or "")
            except WorkerError:
                pass  # the server is gone
            if self._stopping:
                return
            self._exited.set()
            self.bridge.cancel_all()
            mid_turn = self.bridge.turn_active
            how = "exited_without_result" if mid_turn else ("exited" if status == 0 else "error")
            self.ctx.inbox.put(WorkerExited(returncode=status, classification=how))
            return

    # --- adoption ---------------------------------------------------------------------------

    def adopt(self, identity: Mapping[str, Any]) -> WorkerIdentity:
        import psutil

        extra = identity.get("extra")
        if not isinstance(extra, Mapping) or not extra.get("socket") or not extra.get("pane_id"):
            raise WorkerError("the persisted worker identity has no tmux pane")
        self._socket = Path(str(extra["socket"]))
        if not self._socket.exists():
            raise WorkerError(f"the tmux socket {self._socket} is gone")
        if not self._server_alive():
            raise WorkerError(f"no tmux server answers on {self._socket}")
        self._pane_id = str(extra["pane_id"])
        try:
            info = self._pane_info()
        except WorkerError as exc:
            raise WorkerError(f"pane {self._pane_id} is gone: {exc}") from exc
        problems = []
        if info.get("pane_id") != self._pane_id:
            problems.append(f"pane id {info.get('pane_id')} != {self._pane_id}")
        if info.get("pane_dead") == "1":
            problems.append("the pane's process exited")
        try:
            pid = int(info.get("pane_pid") or -1)
        except ValueError:
            pid = -1
        if pid != extra.get("pane_pid") or pid != identity.get("pid"):
            problems.append(f"pane pid {pid} != persisted {extra.get('pane_pid')}")
        else:
            try:
                p = psutil.Process(pid)
                if not same_start(float(extra.get("pane_start_time") or 0), p.create_time()):
                    problems.append("the pane's process has another start time (pid reused)")
                if p.cmdline() != list(extra.get("command") or []):
                    problems.append("the pane's command differs")
                if os.path.realpath(p.cwd()) != os.path.realpath(str(extra.get("cwd") or "")):
                    problems.append(f"the pane's cwd {p.cwd()} differs")
                if os.path.realpath(p.cwd()) != os.path.realpath(self.ctx.worktree):
                    problems.append("the pane does not run in the task's worktree")
            except psutil.Error as exc:
                problems.append(f"pane process {pid}: {exc}")
        if problems:
            raise WorkerError("refusing to re-adopt the tmux pane: " + "; ".join(problems))
        self._pane_pid = pid
        try:
            secret = self._secret_file().read_text().strip()
        except OSError as exc:
            raise WorkerError(f"the task's hook secret is gone: {exc}") from exc
        port = extra.get("hook_port")
        try:
            self.hooks = HookServer(
                self.bridge.handle,
                secret=secret,
                port=int(port) if isinstance(port, int) else 0,
                unix_path=self._hook_socket(),
            ).start()
        except OSError as exc:
            raise WorkerError(f"cannot serve the pane's hook endpoint again: {exc}") from exc
        gate = self.ctx.options.egress
        if gate is not None:
            gate.add_forward(self.hooks.port)
        self._owned = False  # adopted: detached at the end, never killed
        if extra.get("started_by") == "user":  # `adopt-tmux`: a session gitsup did not start
            self.bridge.learn_session = True
        else:
            with contextlib.suppress(OSError, ValueError):
                sess = json.loads((self.ctx.task_dir / "claude-session.json").read_text())
                if isinstance(sess, dict) and isinstance(sess.get("session_id"), str):
                    self.bridge.session_id = sess["session_id"]
        # A turn is assumed active: its Stop arrives here now (one lost while no supervisor
        # listened cannot be replayed; the watchdog covers that case).
        with self.bridge._lock:
            self.bridge.turn_active = True
            self.bridge.turn_origin = "takeover"
        self._sent_keys.add("goal")
        ident = WorkerIdentity(
            pid=pid,
            start_time=float(extra.get("pane_start_time") or 0.0),
            pgid=int(identity.get("pgid") or pid),
            extra={**extra, "adopted": True},
        )
        self._identity = ident
        self._start_monitor()
        self.ctx.inbox.put(
            WorkerOutput("hook", f"re-adopted tmux pane {self._pane_id} (pid {pid})")
        )
        return ident

    # --- stopping ---------------------------------------------------------------------------

    def _close_hooks(self) -> None:
        self.bridge.cancel_all()
        if self.hooks is not None:
            self.hooks.close()

    def detach(self) -> str:
        self._detached = True
        self._stopping = True
        self._exited.set()
        self._close_hooks()
        return f"detached from tmux pane {self._pane_id} (left running on {self._socket})"

    def stop(self, *, grace: float = 5.0) -> str:
        if self._socket is None:
            self._close_hooks()
            return "not started"
        if not self._owned:
            return self.detach()
        self._stopping = True
        self._exited.set()
        self._close_hooks()
        import psutil

        procs: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error, TypeError):
            if self._pane_pid is not None:
                root = psutil.Process(self._pane_pid)
                procs = [root, *root.children(recursive=True)]
        server_pid = self._identity.extra.get("tmux_server_pid") if self._identity else None
        server_pids = [server_pid] if isinstance(server_pid, int) else self._server_pids()
        for pid in server_pids:  # with its panes' processes (the pane pid may be unknown yet)
            with contextlib.suppress(psutil.Error):
                server = psutil.Process(pid)
                procs += [p for p in server.children(recursive=True) if p not in procs]
                procs.append(server)
        with contextlib.suppress(WorkerError):
            self._cmd("kill-server")
        _gone, alive = psutil.wait_procs(procs, timeout=grace)
        how = "killed tmux server"
        if alive:
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            _gone, alive = psutil.wait_procs(alive, timeout=grace)
            how += f" (SIGKILL to {len(procs) - len(_gone)} process(es))"
        if self._pane_pid is not None:
            proc.signal_group(self._pane_pid, signal.SIGKILL)
        still = self._server_alive()
        if alive or still:
            raise WorkerError(
                f"the tmux server on {self._socket} did not stop ({len(alive)} process(es) left)"
            )
        with contextlib.suppress(OSError):
            self._socket.unlink()
        return how + ", verified gone"

    @property
    def alive(self) -> bool:
        return self._pane_id is not None and not self._exited.is_set()

    @property
    def detached(self) -> bool:
        """True once an adopted session was let go (it keeps running; never swept)."""
        return self._detached

    @property
    def socket(self) -> Path | None:
        return self._socket

    @property
    def pane_id(self) -> str | None:
        return self._pane_id
