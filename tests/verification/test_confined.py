"""The confinement a composition of several tasks' checks gets, and the names of the
cgroups and namespaces the confined runner makes (the real runs: tests/boundary/
test_confined_checks.py)."""

from __future__ import annotations

from gitsup.spec import TaskSpec, spec_from_mapping
from gitsup.verification.confined import Confinement, runner_of


def _spec(**isolation: object) -> TaskSpec:
    return spec_from_mapping({"goal": "g", "isolation": isolation}, "test")


def test_a_composition_gets_the_strictest_isolation_of_its_tasks() -> None:
    host, auto, none = _spec(network="host"), _spec(), _spec(network="none", cgroup="required")
    assert Confinement.of([]) == Confinement()
    assert Confinement.of([None]) == Confinement()
    assert Confinement.of([host, host]).network == "host"
    assert Confinement.of([host, auto]).network == "auto"  # host only when every task says so
    assert Confinement.of([host, none]) == Confinement(network="none", cgroup="required")
    off = _spec(cgroup="off")
    assert Confinement.of([off, off]).cgroup == "off"
    assert Confinement.of([off, auto]).cgroup == "auto"
    a, b = _spec(egress=["127.0.0.1:1", "x:2"]), _spec(egress=["x:2", "y:3"])
    assert Confinement.of([a, b]).egress == ("127.0.0.1:1", "x:2", "y:3")


def test_runner_names() -> None:
    assert runner_of("integrate-123-abcdef01") == ("integrate", 123)
    assert runner_of("queue-9-00") == ("queue", 9)
    for name in ("20261201-a1b2c3-w1", "20261201-a1b2c3-cdeadbe", "integrate-x-ab", "queue-1"):
        assert runner_of(name) is None, name
