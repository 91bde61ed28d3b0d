"""Stage 1 of the shell policy: a command string to a `Script` of parts and words (the fast path
for plain commands, tree-sitter-bash for the rest). Imports nothing of the later stages."""
