"""A task's environment: what its worktree gets besides the checkout (docs/environments.md)."""
