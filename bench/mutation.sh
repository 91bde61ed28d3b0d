#!/usr/bin/env bash
# Mutation testing of the core modules named in pyproject.toml ([tool.mutmut]).
# Developer workflow only, not part of CI's time budget (minutes per module on 2 cores).
#
#   bash bench/mutation.sh            # run, then print the score and the survivors
#   bash bench/mutation.sh results    # the survivors of the last run
#   .venv/bin/mutmut show NAME        # the diff of one survivor
#
# A surviving mutant in the supervisor, boundary, policy or store modules is a missing test.
set -euo pipefail
cd "$(dirname "$0")/.."
MUTMUT="${MUTMUT:-.venv/bin/mutmut}"
if [ "${1:-run}" = results ]; then
    exec "$MUTMUT" results
fi
"$MUTMUT" run "$@" || true
"$MUTMUT" export-cicd-stats >/dev/null 2>&1 || true
if [ -f mutants/mutmut-cicd-stats.json ]; then
    python3 - <<'PY'
import json
s = json.load(open("mutants/mutmut-cicd-stats.json"))
killed = s.get("killed", 0) + s.get("timeout", 0) + s.get("segfault", 0)
scored = killed + s.get("survived", 0) + s.get("suspicious", 0)
print(f"mutation score: {killed}/{scored} killed ({100 * killed / max(scored, 1):.1f}%);", s)
PY
fi
"$MUTMUT" results
