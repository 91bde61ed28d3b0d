"""The Claude Code worker: the CLI's safety rules, headless stream-json,
the hook server and relay, and the interactive tmux worker."""
