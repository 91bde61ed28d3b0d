"""The boundary: code reaches a remote or a protected branch only through here.

One ref-update evaluator (`evaluate`) is shared by the client-side `pre-push`
hook and the server-side `pre-receive` gate; `integrate` is the person/CI side
that turns a ready candidate into a protected-branch commit. The hook path
(`hook`, `hookio`, `gitrun`, `lookup`, `trust`, `signing`, `pusher`, `evaluate`) imports only the standard
library, so a push pays milliseconds. See docs/boundary.md.
"""
