"""Trusted integration: signing keys, repository set-up, integrating a
candidate into a protected branch."""
