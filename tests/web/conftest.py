"""The real Claude Code worker's fixtures (scripted model), for the page's action tests."""

from tests.workers.claude.conftest import claude_bin, scripted_model

__all__ = ["claude_bin", "scripted_model"]
