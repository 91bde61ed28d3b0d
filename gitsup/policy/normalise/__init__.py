"""Stage 2 of the shell policy: what the parsed words stand for (expansion of literal variables,
quotes, braces and `~`, paths in normal form) and the commands wrappers run. Imports only the
parse stage (and the policy's data)."""
