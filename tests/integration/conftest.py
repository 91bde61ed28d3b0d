"""Fixtures of the integration package's tests: a repository with its gates installed and a
ready candidate, shared with the boundary's tests (tests/boundary/conftest.py)."""

from tests.boundary.conftest import ready, setup

__all__ = ["ready", "setup"]
