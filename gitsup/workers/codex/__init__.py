"""The Codex worker over `codex app-server`."""
