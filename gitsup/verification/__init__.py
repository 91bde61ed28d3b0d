"""Acceptance checks and the independent model judges: the reviewer and the
permission decider, each one read-only agent call."""
