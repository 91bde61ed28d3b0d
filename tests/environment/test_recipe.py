"""The environment recipe: `.gitsup/environment.toml` of the main checkout, the spec's
`[environment]` over it key by key, and what each refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsup.environment.recipe import ENVIRONMENT_FILE, load_recipe, merge, parse_file
from gitsup.errors import GitsupError
from gitsup.spec import Environment, spec_from_mapping


def _write(root: Path, text: str) -> Path:
    path = root / ENVIRONMENT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return root


def test_no_file_no_spec_is_the_default(tmp_path: Path) -> None:
    r = load_recipe(tmp_path)
    assert r.include == () and r.setup == () and r.cache == () and r.refused == ()
    assert r.setup_timeout == 600.0
    assert set(r.sources.values()) == {"default"}


def test_file_keys_and_shell_words(tmp_path: Path) -> None:
    _write(
        tmp_path,
        '[environment]\ninclude = ["node_modules/", "./.venv"]\n'
        'setup = ["npm ci", ["pip", "install", "-e", "."]]\n'
        'setup_egress = ["npm", "127.0.0.1:4873"]\ncache = ["npm"]\nsetup_timeout = "5m"\n',
    )
    r = load_recipe(tmp_path)
    assert r.include == ("node_modules", ".venv")
    assert r.setup == (("npm", "ci"), ("pip", "install", "-e", "."))
    assert r.setup_egress == ("npm", "127.0.0.1:4873") and r.cache == ("npm",)
    assert r.setup_timeout == 300.0
    assert r.sources["include"] == ENVIRONMENT_FILE


def test_spec_wins_key_by_key(tmp_path: Path) -> None:
    _write(tmp_path, '[environment]\ninclude = ["node_modules"]\ncache = ["npm"]\n')
    spec = spec_from_mapping({"goal": "g", "environment": {"include": []}})
    r = load_recipe(tmp_path, spec.environment)
    assert r.include == ()  # the spec said: nothing
    assert r.cache == ("npm",)  # the spec did not say: the file's
    assert r.sources == {
        "include": "spec",
        "setup": "default",
        "setup_egress": "default",
        "cache": ENVIRONMENT_FILE,
        "setup_timeout": "default",
    }
    # a spec without the table leaves the file's
    assert load_recipe(tmp_path, spec_from_mapping({"goal": "g"}).environment).include == (
        "node_modules",
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[environment\n", "not valid TOML"),
        ("[environment]\nincludes = []\n", "key 'environment.includes': unknown key"),
        ("[other]\nx = 1\n", "key 'other': unknown key"),
        ("environment = 3\n", "must be a table"),
        ('[environment]\ninclude = "node_modules"\n', "environment.include"),
        ('[environment]\ninclude = ["/abs/node_modules"]\n', "must be relative"),
        ('[environment]\ninclude = ["~/x"]\n', "must be relative"),
        ('[environment]\ninclude = ["a/../../x"]\n', "must not contain '..'"),
        ('[environment]\ninclude = [".."]\n', "must not contain '..'"),
        ('[environment]\ninclude = ["."]\n', "the whole checkout"),
        ('[environment]\ninclude = ["a//b"]\n', "not a plain path"),
        ('[environment]\ninclude = ["packages/*/node_modules"]\n', "globs are not supported"),
        ('[environment]\nsetup_timeout = "0s"\n', "environment.setup_timeout"),
    ],
)
def test_bad_file_is_one_clear_error(tmp_path: Path, text: str, says: str) -> None:
    _write(tmp_path, text)
    with pytest.raises(GitsupError) as err:
        load_recipe(tmp_path)
    assert says in err.value.message
    assert str(tmp_path / ENVIRONMENT_FILE) in err.value.message
    assert "\n" not in err.value.message


def test_bad_spec_table_is_a_spec_error() -> None:
    with pytest.raises(GitsupError) as err:
        spec_from_mapping({"goal": "g", "environment": {"include": ["/etc"]}})
    assert "environment.include" in err.value.message
    with pytest.raises(GitsupError) as err:
        spec_from_mapping({"goal": "g", "environment": {"bogus": 1}})
    assert "environment.bogus: unknown key" in err.value.message


def test_git_dirs_and_policy_are_refused_and_listed() -> None:
    env = Environment(include=[".git", "vendor/x/.git/hooks", ".gitsup", "node_modules"])
    r = merge(env, None)
    assert r.include == ("node_modules",)
    assert r.refused == (
        "include .git: a Git directory is never included; not applied",
        "include vendor/x/.git/hooks: a Git directory is never included; not applied",
        "include .gitsup: gitsup's policy directory is never included; not applied",
    )


def test_nested_and_repeated_entries_collapse() -> None:
    r = merge(Environment(include=["vendor", "vendor/a", "vendor", "node_modules"]), None)
    assert r.include == ("vendor", "node_modules")


def test_oversized_file_refused() -> None:
    with pytest.raises(GitsupError, match="the limit is 256 KiB"):
        parse_file(b"#" * (300 * 1024), "f")


def test_recipe_round_trips_as_data(tmp_path: Path) -> None:
    _write(tmp_path, '[environment]\ninclude = ["node_modules"]\nsetup = ["npm ci"]\n')
    d = load_recipe(tmp_path).to_data()
    assert d["include"] == ["node_modules"] and d["setup"] == [["npm", "ci"]]
    assert d["refused"] == []
