"""Stage 4 of the shell policy: the deny scanners (D1-D4) over the normalised form, with payload
recursion. Imports only the earlier stages (parse, normalise, facts)."""
