"""Repository sandbox rules cannot open credentials or gitsup's own keys.

A repository's `.gitsup/policy.toml` asks for `read = ["~"]`, `read = ["~/.ssh/id_rsa"]`, a
symlink into `~/.ssh`, `write = ["~/.config"]` and `env = ["AWS_*", "*"]`. A hostile process
worker then tries to read the integration signing key, the SSH key and AWS credentials, to
append its own key to `allowed_signers` and to plant a file in gitsup's config dir, and commits
whatever it got. Every attempt must fail, the files must be byte-identical afterwards and the
candidate must hold no key material; what the rules legitimately open (another tool's config
in the home) stays usable, so the rules did apply.

The home lives under /var/lib, not /tmp: the task's mount namespace hides /tmp, /home and
/root wholesale, so a home there would prove nothing about the rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, run_sup
from tests.helpers.net import Listener
from tests.helpers.require import requires
from tests.helpers.sup import start_json, write_worker

pytestmark = requires("root", "landlock", "mountns", "seccomp")

SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKE-SSH-KEY-d41f\n"
AWS = "[default]\naws_secret_access_key = FAKE-AWS-SECRET-93ac\n"

HOSTILE = """
import json, os, pathlib, socket, subprocess, sys
home = pathlib.Path(sys.argv[1])
cfg = pathlib.Path(sys.argv[2])  # gitsup's config dir
r = {}
loot = []

def attempt(name, fn):
    try:
        out = fn()
        r[name] = "ESCAPED"
        if isinstance(out, str):
            loot.append(out)
    except OSError as exc:
        r[name] = "blocked: " + (exc.strerror or str(exc))

attempt("read_signing_key", lambda: (cfg / "signing" / "id_ed25519").read_text())
attempt("list_gitsup_config", lambda: " ".join(os.listdir(cfg)))
attempt("read_ssh_key", lambda: (home / ".ssh" / "id_rsa").read_text())
attempt("read_ssh_key_by_link", lambda: (home / "link-to-ssh" / "id_rsa").read_text())
attempt("read_ssh_key_by_inner_link", lambda: (home / ".config" / "tool" / "keylink").read_text())
attempt("read_aws", lambda: (home / ".aws" / "credentials").read_text())
attempt("read_signing_key_by_worktree_link",
        lambda: (pathlib.Path("cfglink") / "signing" / "id_ed25519").read_text())
attempt("read_claude_login", lambda: (home / ".claude" / ".credentials.json").read_text())
attempt("append_allowed_signers",
        lambda: open(cfg / "allowed_signers", "a").write("evil@x namespaces=\\"git\\" ssh-ed25519 AAAA\\n"))
attempt("plant_in_gitsup_config", lambda: (cfg / "planted").write_text("planted\\n"))
attempt("replace_signing_key", lambda: (cfg / "signing" / "id_ed25519").write_text("evil\\n"))
attempt("write_ssh_dir", lambda: (home / ".ssh" / "authorized_keys").write_text("evil\\n"))

def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(path))
    s.close()
    return "connected"

attempt("connect_gpg_agent", lambda: connect(home / ".gnupg" / "S.gpg-agent"))
# what the rules do open: another tool's config (read ~, write ~/.config)
allowed = {}
try:
    allowed["read_tool_config"] = (home / ".config" / "tool" / "settings").read_text()
    (home / ".config" / "tool" / "written").write_text("by the task\\n")
    allowed["write_tool_config"] = "ok"
except OSError as exc:
    allowed["error"] = str(exc)
env = {k: v for k, v in os.environ.items()
       if k in ("AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "GITHUB_TOKEN", "HARMLESS_SETTING")}
pathlib.Path(os.environ["TMPDIR"], "hostile.json").write_text(
    json.dumps({"attempts": r, "allowed": allowed, "env": env}))
pathlib.Path("loot.txt").write_text(json.dumps(loot + list(env.values())) + "\\n")
p = pathlib.Path("calc.py")
p.write_text(p.read_text().replace("a - b", "a + b"))
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "fix add"], check=True)
"""

POLICY = """\
[sandbox]
read = ["~", "~/.ssh/id_rsa", "~/link-to-ssh"]
write = ["~/.config"]
env = ["AWS_*", "*"]
"""


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def var_home(hermetic_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home outside /tmp, /home and /root, with planted secrets."""
    monkeypatch.delenv("GITSUP_SANDBOX_EXTRA_WRITE", raising=False)
    home = Path(f"/var/lib/gitsup-test-{os.urandom(4).hex()}")
    home.mkdir(mode=0o700)
    try:
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
        (home / ".ssh").mkdir(mode=0o700)
        (home / ".ssh" / "id_rsa").write_text(SSH_KEY)
        (home / "link-to-ssh").symlink_to(home / ".ssh")
        (home / ".aws").mkdir()
        (home / ".aws" / "credentials").write_text(AWS)
        tool = home / ".config" / "tool"
        tool.mkdir(parents=True)
        (tool / "settings").write_text("tool settings\n")
        (tool / "keylink").symlink_to(home / ".ssh" / "id_rsa")
        (home / ".claude").mkdir()
        (home / ".claude" / ".credentials.json").write_text('{"token": "FAKE-CLAUDE-LOGIN"}')
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "FAKE-AWS-ENV-7e21")
        monkeypatch.setenv("GITHUB_TOKEN", "FAKE-GH-TOKEN-55aa")
        monkeypatch.setenv("SSH_AUTH_SOCK", str(home / "agent.sock"))
        monkeypatch.setenv("HARMLESS_SETTING", "passes")
        (home / ".gnupg").mkdir(mode=0o700)
        agent = Listener(str(home / ".gnupg" / "S.gpg-agent"))
        try:
            yield home
        finally:
            agent.close()
            # nothing reached the GnuPG agent's socket (counted from outside)
            assert agent.reached == 0, "a task connected to ~/.gnupg/S.gpg-agent"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_repository_rules_cannot_open_secrets(repo: Path, tmp: Path, var_home: Path) -> None:
    home = var_home
    assert run_sup(repo, "init").returncode == 0
    signing = home / ".config" / "gitsup" / "signing" / "id_ed25519"
    assert signing.is_file(), "git sup init creates the integration key in the home"
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "policy.toml").write_text(POLICY)
    git(repo, "add", ".gitsup")
    git(repo, "commit", "-q", "-m", "sandbox rules")
    secrets = {
        "gitsup": digests(home / ".config" / "gitsup"),
        "ssh": digests(home / ".ssh"),
        "aws": digests(home / ".aws"),
        "claude": digests(home / ".claude"),
    }
    cfg = home / ".config" / "gitsup"
    worker = write_worker(tmp, HOSTILE, "hostile.py") + f" {home} {cfg}"
    rc, rec, err = start_json(repo, "fix add", "--worker", worker, "--review", "none", timeout=180)
    assert rc == 0, (rec.get("reasons"), err)
    sb = rec["sandbox"]
    assert sb["enforced"] is True, sb
    box = repo / ".git" / "sup" / "tasks" / rec["id"] / "sandbox" / "tmp"
    seen: dict[str, Any] = json.loads((box / "hostile.json").read_text())
    escaped = {k: v for k, v in seen["attempts"].items() if not v.startswith("blocked")}
    assert not escaped, escaped
    assert len(seen["attempts"]) == 13
    # the rules did apply where they may: the rest of the home is readable, ~/.config writable
    assert seen["allowed"] == {"read_tool_config": "tool settings\n", "write_tool_config": "ok"}
    assert (home / ".config" / "tool" / "written").read_text() == "by the task\n"
    assert seen["env"] == {"HARMLESS_SETTING": "passes"}
    # from outside: the secrets are byte-identical, nothing was planted
    after = {
        "gitsup": digests(home / ".config" / "gitsup"),
        "ssh": digests(home / ".ssh"),
        "aws": digests(home / ".aws"),
        "claude": digests(home / ".claude"),
    }
    assert after == secrets
    assert not (home / ".config" / "gitsup" / "planted").exists()
    # the candidate holds no key material
    cand = rec["candidate"]
    tree = git(repo, "ls-tree", "-r", "--name-only", cand).split()
    assert "loot.txt" in tree
    blob = "".join(git(repo, "show", f"{cand}:{p}") for p in tree)
    private = signing.read_text()
    for secret in (
        "FAKE-SSH-KEY",
        "FAKE-AWS",
        "FAKE-GH-TOKEN",
        "FAKE-CLAUDE-LOGIN",
        "PRIVATE KEY",
        private.strip(),
    ):
        assert secret not in blob, secret
    # the record says which rules were not applied
    refused = "\n".join(sb["refused"])
    assert "read ~/.ssh/id_rsa: a protected path" in refused, refused
    assert "read ~/link-to-ssh: a protected path" in refused, refused
    assert "read ~: applied without the protected paths below it" in refused, refused
    assert "write ~/.config: applied without the protected paths below it" in refused, refused
    assert "env AWS_*: names protected variables" in refused, refused


def test_gitsup_config_under_xdg_config_home_is_protected_too(
    repo: Path, tmp: Path, var_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gitsup keeps its key where XDG_CONFIG_HOME says; a rule opening that directory's
    parent (read and write) still does not reach it."""
    home = var_home
    xdg = home / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert run_sup(repo, "init").returncode == 0
    cfg = xdg / "gitsup"
    assert (cfg / "signing" / "id_ed25519").is_file()
    (xdg / "tool").mkdir()
    (xdg / "tool" / "settings").write_text("tool settings\n")
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "policy.toml").write_text('[sandbox]\nwrite = ["~/xdg"]\n')
    before = digests(cfg)
    worker = write_worker(tmp, HOSTILE, "hostile.py") + f" {home} {cfg}"
    rc, rec, err = start_json(repo, "fix add", "--worker", worker, "--review", "none", timeout=180)
    assert rc == 0, (rec.get("reasons"), err)
    box = repo / ".git" / "sup" / "tasks" / rec["id"] / "sandbox" / "tmp"
    seen: dict[str, Any] = json.loads((box / "hostile.json").read_text())
    for name in ("read_signing_key", "list_gitsup_config", "append_allowed_signers",
                 "plant_in_gitsup_config", "replace_signing_key"):  # fmt: skip
        assert seen["attempts"][name].startswith("blocked"), (name, seen["attempts"])
    assert digests(cfg) == before and not (cfg / "planted").exists()
    refused = "\n".join(rec["sandbox"]["refused"])
    assert "write ~/xdg: applied without the protected paths below it" in refused, refused


@pytest.mark.parametrize("layers", ["all", "without seccomp"])
def test_a_home_outside_tmp_home_and_root_is_hidden(
    repo: Path, tmp: Path, var_home: Path, monkeypatch: pytest.MonkeyPatch, layers: str
) -> None:
    """Without rules, a home under /var/lib is hidden like one under /home: nothing in it can
    be read, listed or connected to. Landlock does not govern connecting to a UNIX socket and
    the system call filter refuses AF_UNIX sockets; without the filter (a host without
    seccomp) the mount namespace alone keeps the GnuPG agent's socket out of reach."""
    home = var_home
    if layers == "without seccomp":
        monkeypatch.setenv("GITSUP_SANDBOX_REFUSE", "seccomp")
    assert run_sup(repo, "init").returncode == 0
    cfg = home / ".config" / "gitsup"
    worker = write_worker(tmp, HOSTILE, "hostile.py") + f" {home} {cfg}"
    rc, rec, err = start_json(repo, "fix add", "--worker", worker, "--review", "none", timeout=180)
    assert rc == 0, (rec.get("reasons"), err)
    assert rec["sandbox"]["seccomp"] is (layers == "all"), rec["sandbox"]
    assert str(home) in rec["sandbox"]["hidden"], rec["sandbox"]
    box = repo / ".git" / "sup" / "tasks" / rec["id"] / "sandbox" / "tmp"
    seen: dict[str, Any] = json.loads((box / "hostile.json").read_text())
    escaped = {k: v for k, v in seen["attempts"].items() if not v.startswith("blocked")}
    assert not escaped, escaped
    for name in ("read_ssh_key", "connect_gpg_agent", "read_aws", "read_signing_key"):
        assert seen["attempts"][name].startswith("blocked"), (name, seen["attempts"])
    # not even what a rule could open is there: the home is an empty directory inside
    assert "error" in seen["allowed"], seen["allowed"]
    assert not (home / ".config" / "tool" / "written").exists()


GITSUP_CONFIG_ATTACKS = (
    "read_signing_key",
    "read_signing_key_by_worktree_link",
    "list_gitsup_config",
    "append_allowed_signers",
    "plant_in_gitsup_config",
    "replace_signing_key",
)


@pytest.mark.parametrize(
    "rules",
    [
        'read = ["~/.config"]',
        'read = ["~"]',
        'write = ["~/.config"]',
        'read = ["~/.config/gitsup/.."]',
    ],
)
def test_no_rule_opens_gitsup_config_dir(repo: Path, tmp: Path, var_home: Path, rules: str) -> None:
    """gitsup's own config dir (the integration signing key, the allowed signers) is denied
    whatever a repository rule widens: the directory above it, the whole home, write access,
    a path that only resolves there; and a symlink committed in the worktree that points
    into it reads nothing either."""
    home = var_home
    assert run_sup(repo, "init").returncode == 0
    cfg = home / ".config" / "gitsup"
    (repo / "cfglink").symlink_to(cfg)
    (repo / ".gitsup").mkdir()
    (repo / ".gitsup" / "policy.toml").write_text(f"[sandbox]\n{rules}\n")
    git(repo, "add", "cfglink", ".gitsup")
    git(repo, "commit", "-q", "-m", "sandbox rules and a link")
    before = digests(cfg)
    worker = write_worker(tmp, HOSTILE, "hostile.py") + f" {home} {cfg}"
    rc, rec, err = start_json(repo, "fix add", "--worker", worker, "--review", "none", timeout=180)
    assert rc == 0, (rec.get("reasons"), err)
    box = repo / ".git" / "sup" / "tasks" / rec["id"] / "sandbox" / "tmp"
    seen: dict[str, Any] = json.loads((box / "hostile.json").read_text())
    for name in GITSUP_CONFIG_ATTACKS:
        assert seen["attempts"][name].startswith("blocked"), (name, seen["attempts"])
    assert digests(cfg) == before and not (cfg / "planted").exists()
    # the rule did apply to the rest of ~/.config
    assert seen["allowed"].get("read_tool_config") == "tool settings\n", seen["allowed"]
