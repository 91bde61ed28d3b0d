"""Shared fixtures for the policy tests: the fixed context of docs/policy.md
("The fixed context")."""

from __future__ import annotations

import pytest

from gitsup.policy import Policy, load_policy

W = "/home/dev/repo"
HOME = "/home/dev"


@pytest.fixture(scope="session")
def policy() -> Policy:
    return load_policy()
