"""gitsup: run coding agents unattended, one task per Git worktree."""

__version__ = "0.1.0"
