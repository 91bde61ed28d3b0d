"""Outbound notifications: a command and/or an HTTP webhook, never a control channel.

Configured by `[notify]` in the spec, else by `sup.notify.*` in git config (the spec wins
key by key). Fired on ready, parked, failed, stopped and needs-human, at most once per
task and event (a marker file `notified/<event>` in the task directory, created
exclusively before delivery, so a recovered supervisor does not send again).

Delivery runs on its own thread: timeouts, bounded retries with backoff, the payload
redacted (gitsup/redact.py), an optional HMAC-SHA256 signature in `X-Gitsup-Signature`.
Every delivery attempt ends in a `notification` event; a notifier that fails changes
nothing else about the task. Only the standard library is needed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitsup.attention.fold import BudgetLimits, Tracker
from gitsup.names import RECORD_FILE

NOTIFY_EVENTS = ("ready", "parked", "failed", "stopped", "needs-human")
SIGNATURE_HEADER = "X-Gitsup-Signature"
DELIVERY_HEADER = "X-Gitsup-Delivery"
PAYLOAD_SCHEMA = "gitsup.attention.notify/1"


@dataclass(frozen=True)
class NotifyConfig:
    webhook: str | None = None
    command: tuple[str, ...] = ()
    apprise: tuple[str, ...] = ()  # service URLs for the optional apprise library
    events: tuple[str, ...] = NOTIFY_EVENTS
    secret_env: str | None = None
    timeout: float = 5.0
    retries: int = 3
    backoff: float = 0.5

    @property
    def enabled(self) -> bool:
        return bool(self.webhook or self.command or self.apprise)


def load_config(spec_notify: Mapping[str, Any] | None, git_config: Any) -> NotifyConfig:
    """The spec's `[notify]` table over `sup.notify.*` in git config.

    `git_config(key) -> list[str]` returns every value of a key (multi-valued
    `sup.notify.command` is the argv, `sup.notify.events` may repeat)."""
    s = dict(spec_notify or {})

    def one(key: str) -> str | None:
        vals = git_config(f"sup.notify.{key}")
        return vals[-1] if vals else None

    webhook = s.get("webhook") or one("webhook")
    command = s.get("command") or git_config("sup.notify.command") or []
    if isinstance(command, str):
        import shlex

        command = shlex.split(command)
    events = s.get("events") or [
        e for v in git_config("sup.notify.events") for e in v.replace(",", " ").split()
    ]
    bad = [e for e in events if e not in NOTIFY_EVENTS]
    if bad:
        from gitsup.errors import GitsupError

        raise GitsupError(
            f"notify: unknown event(s) {', '.join(bad)}",
            hint="events are " + ", ".join(NOTIFY_EVENTS),
        )
    timeout = s.get("timeout") or one("timeout")
    retries = s.get("retries") if s.get("retries") is not None else one("retries")
    if webhook and not str(webhook).startswith(("http://", "https://")):
        from gitsup.errors import GitsupError

        raise GitsupError(f"notify: webhook {webhook!r} is not an http(s) URL")
    apprise_urls = s.get("apprise") or git_config("sup.notify.apprise") or []
    return NotifyConfig(
        webhook=str(webhook) if webhook else None,
        command=tuple(str(a) for a in command),
        apprise=tuple(str(u) for u in apprise_urls),
        events=tuple(events) or NOTIFY_EVENTS,
        secret_env=s.get("secret_env") or one("secretEnv") or one("secret_env"),
        timeout=float(timeout) if timeout else 5.0,
        retries=max(0, min(10, int(retries))) if retries is not None else 3,
    )


def sign(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


@dataclass
class Notifier:
    """Fed every event the supervisor emits (`on_event`); sends what is configured."""

    config: NotifyConfig
    task: str
    task_dir: Path
    events_path: Path
    tracker: Tracker
    threads: list[threading.Thread] = field(default_factory=list)
    # The task's record as its supervisor holds it (else task.json is read): at
    # `task_finished` the record on disk is not yet in its terminal state.
    current: Callable[[], Mapping[str, Any]] | None = None

    @classmethod
    def for_task(
        cls,
        spec: Any,
        git_config: Any,
        task_dir: Path,
        events_path: Path,
        task: str,
        current: Callable[[], Mapping[str, Any]] | None = None,
    ) -> Notifier | None:
        notify = getattr(spec, "notify", None)
        raw = notify.model_dump(exclude_none=True) if notify is not None else {}
        config = load_config(raw, git_config)
        if not config.enabled:
            return None
        budget = BudgetLimits.from_spec(spec.model_dump(mode="json"))
        return cls(
            config, task, task_dir, events_path, Tracker(task, budget=budget), current=current
        )

    def on_event(self, ev: Any) -> None:
        d = ev.as_dict() if hasattr(ev, "as_dict") else dict(ev)
        if d.get("type") == "notification":
            return
        before = set(_kinds(self.tracker.attention(d.get("ts"))))
        self.tracker.feed(d)
        if d.get("type") == "task_finished":
            status = str((d.get("data") or {}).get("status") or "")
            if status in NOTIFY_EVENTS:
                self.fire(status, d)
            return
        now_reasons = self.tracker.attention(d.get("ts"))
        for reason in now_reasons:
            kind = _kind(reason)
            if kind not in before and kind != "parked":
                self.fire("needs-human", d, reason=reason, key=f"needs-human.{kind}")

    def finish_late(self, events: Sequence[Mapping[str, Any]]) -> None:
        """The end of a task whose supervisor died as it ended (`git sup recover`): its log
        (`events`, as dicts) is fed to the tracker without sending anything for it, then the
        `task_finished` notification is sent unless the log records its delivery. A marker
        left by a delivery the dead supervisor began and never recorded does not stop it."""
        sent = {
            str((d.get("data") or {}).get("event"))
            for d in events
            if d.get("type") == "notification"
        }
        finished: Mapping[str, Any] | None = None
        for d in events:
            if d.get("type") == "notification":
                continue
            self.tracker.feed(d)
            if d.get("type") == "task_finished":
                finished = d
        if finished is None:
            return
        status = str((finished.get("data") or {}).get("status") or "")
        if status in NOTIFY_EVENTS and status not in sent:
            with contextlib.suppress(OSError):
                (self.task_dir / "notified" / status).unlink()
            self.fire(status, finished)

    def fire(self, event: str, ev: Mapping[str, Any], *, reason: str = "", key: str = "") -> None:
        if event not in self.config.events:
            return
        marker = self.task_dir / "notified" / (key or event)
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return  # sent before (deduplicated per task and event)
        except OSError:
            return
        payload = self.payload(event, ev, reason, delivery=f"{self.task}/{key or event}")
        t = threading.Thread(target=self._deliver, args=(event, payload), name=f"notify-{event}")
        t.start()  # not a daemon: a process that ends waits for the bounded delivery
        self.threads.append(t)

    def payload(
        self, event: str, ev: Mapping[str, Any], reason: str, *, delivery: str = ""
    ) -> dict[str, Any]:
        """The JSON body. `delivery` names the notification, not the attempt: a delivery sent
        again (by `recover`, after a supervisor died before recording it) carries the same
        id, so a receiver can drop the repeat."""
        from gitsup.redact import redact

        rec: Mapping[str, Any] = {}
        with contextlib.suppress(Exception):
            raw = (
                self.current()
                if self.current is not None
                else json.loads((self.task_dir / RECORD_FILE).read_bytes())
            )
            rec = raw if isinstance(raw, Mapping) else {}
        tr = self.tracker
        body = {
            "schema": PAYLOAD_SCHEMA,
            "task": self.task,
            "event": event,
            "delivery": delivery or f"{self.task}/{event}",
            "reason": reason,
            "state": rec.get("state", tr.state),
            "status": rec.get("status", tr.status),
            "goal": str(rec.get("goal") or tr.goal).splitlines()[0][:200]
            if (rec.get("goal") or tr.goal)
            else "",
            "candidate": rec.get("candidate"),
            "branch": rec.get("branch"),
            "reasons": list(rec.get("reasons") or [])[-5:],
            "turns": tr.turns,
            "cost_usd": tr.cost,
            "attention": tr.attention(),
            "seq": ev.get("seq"),
            "ts": time.time(),
        }
        redacted: dict[str, Any] = redact(body)
        return redacted

    def _deliver(self, event: str, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        results: list[dict[str, Any]] = []
        channels: list[tuple[str, Any]] = []
        if self.config.command:
            channels.append(("command", lambda: self._run_command(body)))
        if self.config.webhook:
            channels.append(
                ("webhook", lambda: self._post(body, str(payload.get("delivery") or "")))
            )
        if self.config.apprise:
            channels.append(("apprise", lambda: self._apprise(event, payload)))
        for name, send in channels:
            try:
                results.append(send())
            except Exception as exc:  # recorded, never raised into anything else
                results.append({"channel": name, "ok": False, "error": f"{type(exc).__name__}"})
        from gitsup.ids import TaskId
        from gitsup.store.events import EventLog
        from gitsup.store.eventtypes import Notification

        with contextlib.suppress(Exception), EventLog(self.events_path, TaskId(self.task)) as log:
            for r in results:
                log.append(Notification(event=event, result=r))

    def _run_command(self, body: bytes) -> dict[str, Any]:
        from gitsup.errors import GitsupError
        from gitsup.host.proc import run

        try:
            res = run(self.config.command, input=body, timeout=self.config.timeout * 2)
        except GitsupError as exc:
            return {"channel": "command", "ok": False, "error": exc.message}
        ok = res.returncode == 0
        return {
            "channel": "command",
            "ok": ok,
            "exit_code": res.returncode,
            "timed_out": res.timed_out,
            **({} if ok else {"output_tail": res.output[-500:]}),
        }

    def _post(self, body: bytes, delivery: str = "") -> dict[str, Any]:
        cfg = self.config
        assert cfg.webhook is not None
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "gitsup-notify/1",
        }
        if delivery:
            headers[DELIVERY_HEADER] = delivery
        secret = os.environ.get(cfg.secret_env) if cfg.secret_env else None
        if cfg.secret_env and not secret:
            return _webhook_result(cfg.webhook, False, 0, f"${cfg.secret_env} is not set", None)
        if secret:
            headers[SIGNATURE_HEADER] = sign(secret.encode(), body)
        error = ""
        code: int | None = None
        attempts = 0
        for attempt in range(cfg.retries + 1):
            attempts = attempt + 1
            req = urllib.request.Request(cfg.webhook, data=body, headers=headers, method="POST")
            try:
                opener = urllib.request.build_opener(_NoRedirect)
                with opener.open(req, timeout=cfg.timeout) as resp:
                    code = int(resp.status)
                if 200 <= code < 300:
                    return _webhook_result(cfg.webhook, True, attempts, "", code)
                error = f"HTTP {code}"
            except urllib.error.HTTPError as exc:
                code, error = exc.code, f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the receiver refused this payload: retrying cannot help
            except (OSError, ValueError) as exc:  # refused, timed out, reset
                code, error = None, f"{type(exc).__name__}: {exc}"
            if attempt < cfg.retries:
                time.sleep(cfg.backoff * (2**attempt))
        return _webhook_result(cfg.webhook, False, attempts, error, code)

    def _apprise(self, event: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Push services (mail, chat, phones…) through apprise, when it is installed."""
        try:
            import apprise
        except ImportError:
            return {
                "channel": "apprise",
                "ok": False,
                "error": "apprise is not installed (pip install 'gitsup[notify]')",
            }
        from gitsup.redact import redact_text

        # Sequential, not apprise's thread pool: delivery may run while the interpreter
        # shuts down, when no new pool work is accepted.
        asset = apprise.AppriseAsset(service_timeout=self.config.timeout)
        asset.async_mode = False
        a = apprise.Apprise(asset=asset)
        added = sum(1 for url in self.config.apprise if a.add(url))
        if not added:
            return {"channel": "apprise", "ok": False, "error": "no usable apprise URL"}
        lines = [
            f"{payload.get('goal') or ''}",
            f"state {payload.get('state')}, status {payload.get('status')}",
            *(f"reason: {r}" for r in payload.get("reasons") or []),
        ]
        if payload.get("reason"):
            lines.insert(1, f"needs a human: {payload['reason']}")
        try:
            ok = bool(a.notify(title=f"gitsup: task {self.task} {event}", body="\n".join(lines)))
        except Exception as exc:  # a library failure is a failed delivery, nothing more
            return {"channel": "apprise", "ok": False, "error": redact_text(str(exc))[:300]}
        return {"channel": "apprise", "ok": ok, "services": added}

    def join(self, timeout: float | None = None) -> None:
        for t in self.threads:
            t.join(timeout)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A webhook is one POST to one URL: redirects are failures, never followed."""

    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None


def _webhook_result(
    url: str, ok: bool, attempts: int, error: str, code: int | None
) -> dict[str, Any]:
    from gitsup.redact import redact_text

    out: dict[str, Any] = {
        "channel": "webhook",
        "url": redact_text(_strip_userinfo(url)),
        "ok": ok,
        "attempts": attempts,
        "status_code": code,
    }
    if error:
        out["error"] = redact_text(error)[:300]
    return out


def _strip_userinfo(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    p = urlsplit(url)
    if p.username or p.password:
        host = p.hostname or ""
        if p.port:
            host += f":{p.port}"
        p = p._replace(netloc=host)
    return urlunsplit(p._replace(query="[query hidden]" if p.query else ""))


def _kind(reason: str) -> str:
    if reason.startswith("needs human:"):
        # each ask (and each budget pause) is news of its own
        import hashlib

        return "ask-" + hashlib.sha256(reason.encode("utf-8", "replace")).hexdigest()[:12]
    head = reason.split(":", 1)[0].strip().lower()
    return head.split()[0] if head else "attention"


def _kinds(reasons: list[str]) -> list[str]:
    return [_kind(r) for r in reasons]


def notifier_for(
    repo: Any,
    layout: Any,
    spec: Any,
    task: str,
    current: Callable[[], Mapping[str, Any]] | None = None,
) -> Notifier | None:
    """The task's notifier, or None when nothing is configured. A configuration that
    cannot be used is recorded as a failed `notification` event; the task runs on.
    `current`: the record as the task's supervisor holds it."""
    from gitsup.ids import TaskId

    tid = TaskId(task)
    try:
        return Notifier.for_task(
            spec, repo.config_get_all, layout.task_dir(tid), layout.events(tid), task, current
        )
    except Exception as exc:  # never a reason for the task to fail
        from gitsup.store.events import EventLog
        from gitsup.store.eventtypes import Notification

        with contextlib.suppress(Exception), EventLog(layout.events(tid), tid) as log:
            log.append(
                Notification(
                    event="setup", result={"ok": False, "error": getattr(exc, "message", str(exc))}
                )
            )
        return None
