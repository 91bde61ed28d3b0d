"""The scripted worker of `git sup demo`: reads the goal on stdin, fixes the bug, adds a
test, commits. Stands in for an agent so the demo needs no network and no API key."""

import pathlib
import subprocess
import sys

goal = sys.stdin.readline().strip()
print(f"demo worker: goal is {goal!r}")
calc = pathlib.Path("calc.py")
print("demo worker: reading calc.py")
src = calc.read_text()
calc.write_text(src.replace("return a - b", "return a + b"))
print("demo worker: fixed add() (it subtracted)")
test = pathlib.Path("test_more.py")
test.write_text(
    "import unittest\n\nfrom calc import add\n\n\n"
    "class MoreTest(unittest.TestCase):\n"
    "    def test_negative(self):\n"
    "        self.assertEqual(add(-2, 5), 3)\n"
)
print("demo worker: added test_more.py")
subprocess.run(["git", "add", "calc.py", "test_more.py"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "Fix add() and cover negative numbers"], check=True)
print("demo worker: committed")
