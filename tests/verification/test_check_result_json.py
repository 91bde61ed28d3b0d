"""A check result's repair round is `repair_round` in Python and "round" in every JSON form."""

from __future__ import annotations

import json

from gitsup.store.record import CheckResult


def test_repair_round_is_round_in_json_and_reads_back() -> None:
    c = CheckResult(name="tests", argv=["true"], repair_round=2)
    assert c.model_dump()["round"] == 2 and "repair_round" not in c.model_dump()
    assert json.loads(c.model_dump_json())["round"] == 2
    assert CheckResult.model_validate_json(c.model_dump_json()).repair_round == 2
    # records written before the rename read back the same
    old = {"name": "tests", "argv": ["true"], "round": 3}
    assert CheckResult.model_validate(old).repair_round == 3
