"""The network of each process a task runs (docs/containment.md): agents reach only their
model API (and the allowed `egress` endpoints) through the gate; process workers and checks
get loopback only (plus the `egress` endpoints); `network = "host"` opts out."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsup.errors import GitsupError
from gitsup.store import eventtypes as et
from gitsup.supervision.context import TaskContext


@dataclass(frozen=True)
class Net:
    """Where a process runs: `netns` (None: the host network), what its env needs, the gate."""

    netns: str | None
    env: dict[str, str]
    gate: Any
    describe: dict[str, Any]


class TaskNet:
    def __init__(self, ctx: TaskContext) -> None:
        self.repo, self.spec, self.task, self.emit = ctx.repo, ctx.spec, ctx.task, ctx.emit
        self.task_dir = ctx.task_dir  # where the gates log (egress-<who>-<hex>.log)
        self.describe: dict[str, Any] = {"mode": "host"}  # the worker's network

    def _allowed(self) -> list[str]:
        return [*self.spec.isolation.egress, *self.repo.config_get_all("sup.egress")]

    def network_for(
        self,
        who: str,
        stack: contextlib.ExitStack,
        env: Mapping[str, str],
        *,
        agent: bool,
        model_kind: str = "claude",
        also: Sequence[str] = (),
        gated: bool = False,
    ) -> Net:
        """The network a worker, reviewer, decider or check gets, closed with `stack`; an
        agent reaches the model API of its kind (`egress.model_endpoint`); `also`: more
        endpoints for this process alone (the setup phase's `setup_egress`). A process that is
        not an agent and goes through a gate (`gated`: always) gets the gate's CONNECT proxy
        too, which refuses what is not allowed at once, naming the setting that allows it."""
        mode = self.spec.isolation.network
        if mode == "host":
            return Net(None, {}, None, {"mode": "host", "reason": 'network = "host"'})
        from gitsup.host.contain import isolated_netns
        from gitsup.host.egress import model_endpoint, parse_endpoint
        from gitsup.host.egress_gate import gated_namespace

        extra = list(dict.fromkeys([*self._allowed(), *also]))
        # a configuration error fails the task; it never falls back to the host network
        for e in extra:
            parse_endpoint(e)
        model = model_endpoint(env, model_kind) if agent else None

        def refused(host: str, port: int, reason: str) -> None:
            self.emit(et.EgressRefused(who=who, host=host, port=port, reason=reason))

        try:
            if agent or extra or gated:
                log = self.task_dir / f"egress-{who}-{os.urandom(3).hex()}.log"
                an = stack.enter_context(
                    gated_namespace(
                        self.task, env, extra, refused, model=agent, model_kind=model_kind,
                        log=log, refuse_by_proxy=not agent,
                    )
                )  # fmt: skip
                gate = an.gate
                stack.callback(
                    lambda: self.emit(
                        et.EgressSummary(who=who, connections=gate.forwarded, refused=gate.refused)
                    )
                )
                described = an.describe()
                if model is not None:  # the model API it reaches (the cost ledger reads it)
                    described["model"] = str(model)
                    described["model_local"] = model.loopback
                return Net(an.netns, an.env, an.gate, described)
            ns = stack.enter_context(isolated_netns(self.task))
            return Net(ns, {}, None, {"mode": "loopback", "netns": ns})
        except GitsupError as exc:
            if mode == "none":
                raise
            return Net(None, {}, None, {"mode": "host", "reason": f"auto: {exc.message}"})

    def regate(self, record: Any, env: Mapping[str, str], stack: contextlib.ExitStack) -> Any:
        """A re-adopted worker's namespace outlived its supervisor, and so did its gate (a
        process of its own): find that gate again, or serve the namespace with a new one on
        the same ports when it is gone. Stopped with `stack`."""
        extra = (record.worker or {}).get("extra") or {}
        ns = extra.get("netns") if isinstance(extra, dict) else None
        if not isinstance(ns, str) or not os.path.exists(ns):
            return None
        from gitsup.host.egress import make_plan, model_endpoint, parse_endpoint
        from gitsup.host.egress_gate import GateProcess

        try:
            model = model_endpoint(env, self.spec.worker.kind)
            plan = make_plan([model, *(parse_endpoint(e) for e in self._allowed())])
        except GitsupError:
            return None

        def refused(host: str, port: int, reason: str) -> None:
            self.emit(et.EgressRefused(who="worker", host=host, port=port, reason=reason))

        ident = extra.get("egress_gate")
        gate = GateProcess.attach(ident, plan, refused) if isinstance(ident, dict) else None
        if gate is None:
            port = extra.get("egress_proxy_port")
            hook = extra.get("hook_port")
            if isinstance(hook, int):  # the tmux worker's hook endpoint, served again
                plan = make_plan(
                    [model, *(parse_endpoint(e) for e in self._allowed()),
                     parse_endpoint(f"127.0.0.1:{hook}")]
                )  # fmt: skip
            log = self.task_dir / f"egress-worker-{os.urandom(3).hex()}.log"
            try:
                gate = GateProcess.start(
                    ns, plan, log, refused, task=self.task,
                    proxy_port=port if isinstance(port, int) else None,
                )  # fmt: skip
            except GitsupError as exc:  # the worker keeps its namespace, without a way out
                self.emit(et.ProtocolNoise(error=f"egress gate not served again: {exc.message}"))
                return None
        stack.callback(
            lambda: self.emit(
                et.EgressSummary(who="worker", connections=gate.forwarded, refused=gate.refused)
            )
        )
        stack.callback(gate.close)  # first: the summary counts what its log says at the end
        self.describe = {"mode": "gated", "netns": ns, **gate.plan.as_dict()}
        return gate

    def agent_network(
        self, who: str, model_kind: str = "claude"
    ) -> Callable[[Mapping[str, str]], Any]:
        """For the agent reviewer and decider: a fresh gated namespace per call."""

        @contextlib.contextmanager
        def factory(env: Mapping[str, str]) -> Iterator[Net]:
            with contextlib.ExitStack() as stack:
                yield self.network_for(who, stack, env, agent=True, model_kind=model_kind)

        return factory
