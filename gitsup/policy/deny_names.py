"""The program names the deny scan judges in code, in one table.

Every name-specific step of the deny scan reads its set from here before it looks at a program:
the rule dispatch of `deny.py` (git, destructive commands, hooks writers, executors), the
subscript evaluation, the state updates of `deny_state.py`, the variable collection of
`context.py` and the wrappers `unwrap.py` handles in code. The inert-part shortcut
(`deny_inert.py`) skips only programs outside `JUDGED` and outside the policy's own tables
(shells, interpreters, downloaders, HTTP clients, forges, registries, wrappers), so a program a
step judges cannot be skipped: a program missing here is not judged with or without the shortcut.
`tests/policy/test_deny_names.py` reads the source of those modules and fails on a program name
compared in code that is in neither this table nor the default policy's tables.
"""

from __future__ import annotations

import re

# git's rules (deny.git_rules); `git-*` programs too.
GIT = frozenset({"git", "hub"})
GIT_PREFIX = "git-"

# deny_writes._destructive; `mkfs*` programs too.
DESTRUCTIVE = frozenset(
    {"rm", "find", "chmod", "chown", "chgrp", "wipefs", "shred", "dd", "blkdiscard", "badblocks"}
)
MKFS_PREFIX = "mkfs"

# Programs that change files through their operands (deny_writes._hooks, allow side too).
MUTATORS = frozenset(
    {
        "rm",
        "rmdir",
        "unlink",
        "mv",
        "cp",
        "ln",
        "chmod",
        "chown",
        "chgrp",
        "truncate",
        "touch",
        "mkdir",
        "tee",
        "install",
        "shred",
        "rsync",
        "sed",
        "chattr",
        "setfacl",
        "patch",
    }
)

# deny_writes._hooks: mutators and read-looking tools that write through an option or operand.
HOOK_WRITERS = frozenset({"uniq", "sort", "tree", "base64", "go", "dd"} | MUTATORS)

# deny._execution, besides the policy's shells and interpreters and programs named by a path.
EXECUTORS = frozenset(
    {"eval", "source", ".", "sudo", "xargs", "alias", "su", "runuser", "ssh", "mosh"}
)

# deny._subscript_code: builtins whose name operands or operands bash evaluates as arithmetic
# (code in an array subscript runs even when the word is quoted: `[[ -v 'a[$(cmd)]' ]]`).
SUBSCRIPT_EVALUATORS = frozenset(
    {
        "test",
        "[",
        "printf",
        "read",
        "mapfile",
        "readarray",
        "let",
        "unset",
        "getopts",
        "wait",
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
    }
)

# deny_state.update_state, besides the policy's downloaders: copies and writes of literal data,
# and git switching HEAD.
STATE = frozenset({"tee", "cp", "mv", "install", "git"})

# context.ScanState.collect_variables: `printf -v X ...` and `read X <<< ...` assign variables.
VARIABLE_SETTERS = frozenset({"printf", "read"})

# unwrap.unwrap, besides the policy's wrappers: wrappers handled in code.
UNWRAPPED = frozenset({"xargs", "find", "parallel"})

# Interpreters judged by name shape (python, python3, python3.12), besides the policy's list.
PYTHON = re.compile(r"^python(\d(\.\d+)?)?$")

JUDGED = (
    GIT
    | DESTRUCTIVE
    | HOOK_WRITERS
    | EXECUTORS
    | SUBSCRIPT_EVALUATORS
    | STATE
    | VARIABLE_SETTERS
    | UNWRAPPED
)
PREFIXES = (GIT_PREFIX, MKFS_PREFIX)
