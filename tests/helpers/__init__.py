"""Shared helpers for the foundation tests (workers, specs, waiting, process checks)."""
