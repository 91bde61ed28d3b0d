"""Stage 5 of the shell policy: the allow judges (the allow list in plain form, and the sandboxed
mode, which the classifier passes in as a strategy). Imports only the earlier stages."""
