"""The use cases the CLI calls: create, start, list, stop and discard tasks, the pool,
the integration queue, best-of-N attempts, the candidate page. Never prints."""
