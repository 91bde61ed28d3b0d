"""The task machine (pure) and the supervisor loop that executes its effects
through small collaborators: journal, launcher, gate, verifier, finaliser."""
