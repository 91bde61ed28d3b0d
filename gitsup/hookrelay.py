"""`python3 -P -m gitsup.hookrelay`: the command registered in Claude Code settings.

The relay itself lives in gitsup/workers/claude/relay.py; this name stays so that settings
written by earlier versions (and by hand) keep working. Standard library only, like the relay.
"""

from gitsup.workers.claude.relay import main

if __name__ == "__main__":
    raise SystemExit(main())
