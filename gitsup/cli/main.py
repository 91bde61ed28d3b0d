"""`git sup`: a thin typer layer. Each command parses, calls the core, renders."""

from __future__ import annotations

import sys
from typing import Any

import typer

from gitsup.errors import Exit, GitsupError

app = typer.Typer(
    name="git-sup",
    help="Run coding agents unattended, one task per Git worktree.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: rendering it with rich costs more than the command
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from gitsup import __version__

        sys.stdout.write(f"git-sup {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version, help="Print the version and exit."
    ),
) -> None:
    """Run coding agents unattended, one task per Git worktree.

    `git sup --help` opens the manual (git runs `git help sup`, i.e. `man git-sup`);
    `git sup -h` and `git sup COMMAND -h` print the usage.
    """


def _coerce_lazily() -> None:
    """typer checks every parameter's value with a pydantic TypeAdapter that it builds before
    it looks at the value: the first one imports pydantic's validators (about 100 ms, more
    than a read command's own work), and each costs a few milliseconds more. A value that
    needs no conversion needs no adapter: an option not given (typer's own code answers it
    before any conversion), a `str` or `bool` the parser already gave as that type, a
    `list[str]` given as strings. Only other values get the adapter, built when first
    needed. Without typer's internals as expected this does nothing (all values go to
    pydantic)."""
    try:
        from typer import core
        from typer._coercion import PassThroughRuntimeParam, build_runtime_param
    except ImportError:  # pragma: no cover - another typer
        return
    param_cls = getattr(core, "_TyperParameter", None)
    if param_cls is None or not hasattr(param_cls, "get_runtime_param"):  # pragma: no cover
        return

    class AsGiven(PassThroughRuntimeParam):
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is self.annotation:
                return value
            if (
                self.annotation == list[str]
                and type(value) in (tuple, list)
                and all(type(v) is str for v in value)
            ):
                return list(value)
            full = build_runtime_param(param.type_descriptor)
            param._runtime_param = full
            return full._coerce_value(value, param=param, ctx=ctx)

    original = param_cls.get_runtime_param

    def get_runtime_param(self: Any) -> Any:
        desc = self.type_descriptor
        if self._runtime_param is None and desc.file_annotation is None:
            return AsGiven(annotation=desc.annotation, parameter_info=desc.parameter_info)
        return original(self)

    param_cls.get_runtime_param = get_runtime_param


_coerce_lazily()

COMMAND_MODULES = (  # the task commands' three modules first
    "tasks_cmd",
    "start_cmd",
    "manage_cmd",
    "policy_cmd",
    "demo_cmd",
    "boundary_cmd",
    "tmux_cmd",
    "pool_cmd",
    "attention_cmd",
    "queue_cmd",
    "env_cmd",
    "human_cmd",
    "review_cmd",
    "record_cmd",
    "cluster_cmd",
)


# The module that defines each top-level command: running one command builds only its module's
# commands (typer inspects every registered command's signature on each run). A name not
# here (a command spread over modules, or one added without an entry) registers them all.
COMMAND_MODULE = {
    # in the order the usage lists them
    "init": "tasks_cmd",
    "start": "start_cmd",
    **dict.fromkeys(("show", "ls", "log"), "tasks_cmd"),
    **dict.fromkeys(
        ("stop", "discard", "prune", "wait", "recover", "repair", "doctor", "resume-auto"),
        "manage_cmd",
    ),
    **dict.fromkeys(("watch", "cost", "report", "serve"), "attention_cmd"),
    "integrate": "boundary_cmd",
    "gate": "boundary_cmd",
    "policy": "policy_cmd",
    "pool": "pool_cmd",
    "attach": "tmux_cmd",
    "adopt-tmux": "tmux_cmd",
    "hooks": "tmux_cmd",
    "demo": "demo_cmd",
    "queue": "queue_cmd",
    "env": "env_cmd",
    **dict.fromkeys(("answer", "send", "continue", "pause", "resume"), "human_cmd"),
    **dict.fromkeys(("comment", "revise"), "review_cmd"),
    **dict.fromkeys(("publish", "fetch-task", "adopt-remote"), "record_cmd"),
    **dict.fromkeys(("cluster", "host"), "cluster_cmd"),
}


def _register(argv: list[str] | None = None) -> None:
    """Command modules register themselves on `app` when imported: all of them, or only the
    one that defines the command named in `argv` (the arguments after the program name)."""
    one = COMMAND_MODULE.get(argv[0]) if argv else None
    for name in (one,) if one else COMMAND_MODULES:
        # an import statement's machinery, which `python -X importtime` reports
        __import__(f"gitsup.cli.{name}")
    if not one:
        # The usage lists the task commands first, in their own order (three modules define
        # them), then every other command in the order its module registered it.
        order = {name: i for i, name in enumerate(COMMAND_MODULE)}

        def key(c: Any) -> tuple[int, int]:
            mod = (c.callback.__module__ if c.callback else "").rsplit(".", 1)[-1]
            return (0, order.get(c.name or "", 0)) if mod in COMMAND_MODULES[:3] else (1, 0)

        app.registered_commands.sort(key=key)


def run() -> None:
    """Console-script entry: one handler maps errors to exit codes."""
    try:
        _run()
    except SystemExit as exc:
        if "temporalio.bridge" in sys.modules and _a_process_of_its_own():
            # A cluster command: the threads of Temporal's client core (Rust) can abort the
            # interpreter's own shutdown, so leave without it once the output is out.
            import os

            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        raise


def _a_process_of_its_own() -> bool:
    """Whether this process is the command (`git-sup`, `python -m gitsup`), which may end
    the interpreter: not a program that called `run()` (a test runner, an embedding), whose
    process must go on."""
    import os

    main = sys.modules.get("__main__")
    script = os.path.basename(str(getattr(main, "__file__", "") or ""))
    if script.startswith("git-sup"):
        return True
    return script == "__main__.py" and getattr(main, "__package__", None) == "gitsup"


def _run() -> None:
    _register(sys.argv[1:])
    try:
        rc = app(standalone_mode=False)
    except GitsupError as exc:
        sys.stderr.write(f"git sup: error: {exc.message}\n")
        if exc.hint:
            sys.stderr.write(f"hint: {exc.hint}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("git sup: interrupted\n")
        sys.exit(Exit.INTERRUPTED)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(Exit.INTERRUPTED)
    except Exception as exc:  # usage errors of the (vendored) click parser, and anything unforeseen
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
            show()
            sys.exit(Exit.BAD_INPUT)
        import traceback

        sys.stderr.write("git sup: internal error (a bug in gitsup); details follow\n")
        traceback.print_exc()
        sys.exit(Exit.INTERNAL)
    sys.exit(rc if isinstance(rc, int) else 0)
