"""The network of each process a task runs (docs/containment.md): agents reach only their
model API (and the allowed `egress` endpoints) through the gate; process workers and checks
get loopback only (plus the `egress` endpoints); `network = "host"` opts out."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gitsup.errors import GitsupError
from gitsup.git import GitRepo
from gitsup.spec import TaskSpec
from gitsup.store import eventtypes as et
from gitsup.store.eventtypes import EmitFn


@dataclass(frozen=True)
class Net:
    """Where a process runs: `netns` (None: the host network), what its env needs, the gate."""

    netns: str | None
    env: dict[str, str]
    gate: Any
    describe: dict[str, Any]


class TaskNet:
    def __init__(
        self,
        repo: GitRepo,
        spec: TaskSpec,
        task: str,
        emit: EmitFn,
    ) -> None:
        self.repo = repo
        self.spec = spec
        self.task = task
        self.emit = emit
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
    ) -> Net:
        """The network a worker, reviewer, decider or check gets, closed with `stack`; an
        agent reaches the model API of its kind (`egress.model_endpoint`)."""
        mode = self.spec.isolation.network
        if mode == "host":
            return Net(None, {}, None, {"mode": "host", "reason": 'network = "host"'})
        from gitsup.host.contain import isolated_netns
        from gitsup.host.egress import gated_namespace, model_endpoint, parse_endpoint

        extra = self._allowed()
        # a configuration error fails the task; it never falls back to the host network
        for e in extra:
            parse_endpoint(e)
        model = model_endpoint(env, model_kind) if agent else None

        def refused(host: str, port: int, reason: str) -> None:
            self.emit(et.EgressRefused(who=who, host=host, port=port, reason=reason))

        try:
            if agent or extra:
                an = stack.enter_context(
                    gated_namespace(
                        self.task, env, extra, refused, model=agent, model_kind=model_kind
                    )
                )
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
        """A re-adopted worker's namespace outlived its supervisor, the gate did not:
        serve the same namespace again (closed with `stack`; the namespace stays with the
        detached worker)."""
        extra = (record.worker or {}).get("extra") or {}
        ns = extra.get("netns") if isinstance(extra, dict) else None
        if not isinstance(ns, str) or not os.path.exists(ns):
            return None
        from gitsup.host.egress import EgressGate, make_plan, model_endpoint, parse_endpoint

        try:
            model = model_endpoint(env, self.spec.worker.kind)
            plan = make_plan([model, *(parse_endpoint(e) for e in self._allowed())])
        except GitsupError:
            return None

        def refused(host: str, port: int, reason: str) -> None:
            self.emit(et.EgressRefused(who="worker", host=host, port=port, reason=reason))

        port = extra.get("egress_proxy_port")
        try:
            gate = EgressGate(ns, plan, refused, port if isinstance(port, int) else None).start()
        except GitsupError as exc:  # the worker keeps its namespace, without a way out
            self.emit(et.ProtocolNoise(error=f"egress gate not served again: {exc.message}"))
            return None
        stack.callback(gate.close)
        self.describe = {"mode": "gated", "netns": ns, **plan.as_dict()}
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
