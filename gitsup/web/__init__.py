"""The interactive page and JSON API of `git sup serve` (the `web` extra)."""
