"""The command line's edge: every usage mistake is one line on stderr and exit 2, never a traceback; ``--version``
and shell completion; literal error text; read commands refuse a warehouse that is not there; the cheap commands
import neither numba nor the simulator."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from synthtrace.pipelines.cli import main
from testing.traces import JACOBI, PRIME, copy_trace, ingested, tree_digest


def synthtrace(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """``synthtrace ARGS`` in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env={**os.environ, "COLUMNS": "100", **(env or {})},
                          check=False)


def one_error_line(p: subprocess.CompletedProcess) -> str:
    """The single ``error:`` line a mistake prints (asserting exit 2, nothing more on stderr, no traceback)."""
    lines = p.stderr.splitlines()  # not stripped: a blank line left by a progress bar is one line too many
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    """A warehouse holding the prime trace."""
    return ingested(tmp_path_factory.mktemp("edge"), "prime", PRIME)


@pytest.mark.parametrize(("args", "says"), [
    (["ingets", "x"], "No such command 'ingets'. Did you mean 'ingest'?"),  # unknown command
    (["ingest"], "Missing argument"),                                        # missing argument
    (["simulate", "out", "--runs", "many"], "Invalid value for '--runs'"),   # bad option value
    (["export", "e", "--format", "pdf"], "Invalid value for '--format'"),    # bad choice
    (["runs", "--bogus"], "No such option: --bogus"),                        # unknown option
    (["--bogus"], "No such option: --bogus"),                                # unknown option of the root
    (["runs", "move", "r1"], "Missing option '--experiment'"),               # missing required option
    (["sql"], "Missing argument 'QUERY'"),
    (["serve", "--drop", ".", "--cron", "61 2 * * *"], '--cron: Invalid cron string: "61 2 * * *" (5 fields'),
    (["serve", "--drop", ".", "--timezone", "Mars/Olympus"], '--timezone: Invalid timezone: "Mars/Olympus"'),
])
def test_usage_mistake_is_one_line_exit_2(tmp_path, args, says):
    line = one_error_line(synthtrace(*args, cwd=tmp_path))
    assert says in line and "Traceback" not in line
    assert not (tmp_path / "synthtrace-warehouse").exists()


def test_version_and_bare_command(tmp_path):
    from synthtrace import __version__

    p = synthtrace("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"synthtrace {__version__}" and not p.stderr
    bare = synthtrace()
    assert bare.returncode == 0 and "Usage: synthtrace" in bare.stdout and "ingest" in bare.stdout


def complete(words: str, shell: str = "bash") -> list[str]:
    """What the program answers a shell asking to complete ``words`` (the shell named explicitly: nothing is
    detected from the processes above the test, which CI may not have)."""
    env = {"_SYNTHTRACE_COMPLETE": f"complete_{shell}", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1), "_TYPER_COMPLETE_ARGS": words}
    p = synthtrace(env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_shell_completion():
    """typer's completion: commands, subcommands, options and option values; and the bash script, sourced in a
    real bash, completes through the installed console script."""
    assert complete("synthtrace ex") == ["export"]
    assert complete("synthtrace runs r") == ["rm"]
    assert complete("synthtrace sql --fo") == ["--format"]
    assert complete("synthtrace sql x --format c") == ["csv"]
    assert "rm" in " ".join(complete("synthtrace runs r", shell="zsh"))
    script = synthtrace("--show-completion", "bash")  # the shell named: nothing to detect
    assert script.returncode == 0 and "complete_bash" in script.stdout
    assert "complete_zsh" in synthtrace("--show-completion", "zsh").stdout
    bash = shutil.which("bash")
    if bash is None:
        return
    asked = subprocess.run([bash, "--norc", "--noprofile", "-c", script.stdout + textwrap.dedent("""
        COMP_WORDS=(synthtrace runs mo); COMP_CWORD=2; _synthtrace_completion synthtrace; echo "${COMPREPLY[@]}"
        """)], capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert asked.stdout.split() == ["move"], asked.stderr


@pytest.mark.parametrize("found", [None, "tcsh"])
def test_install_completion_without_a_known_shell_is_one_line(monkeypatch, tmp_path, capsys, found):
    """A cron job or a container has no shell above synthtrace (or one typer cannot serve): one line naming
    --show-completion, exit 2, and nothing written to the start-up files."""
    import shellingham

    def detect_shell() -> tuple[str, str]:
        if found is None:
            raise shellingham.ShellDetectionFailure()
        return found, f"/bin/{found}"

    monkeypatch.setattr(shellingham, "detect_shell", detect_shell)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["--install-completion"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--show-completion bash" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["ingest", "{long}"], ["runs", "-w", "{long}"], ["sql", "SELECT 1", "-w", "{long}"],
                                  ["sql", "SELECT 1", "-w", "{wh}", "-f", "csv", "-o", "{long}.csv"],
                                  ["plan", "-c", "PAPI_L1_DCM", "-o", "{long}.txt"]])
def test_os_error_on_a_user_path_is_one_line(wh, tmp_path, args):
    """An OSError on a path no check foresaw (here a name longer than the file system takes) is one line naming
    the path and the reason, exit 2."""
    long = tmp_path / ("x" * 300)
    line = one_error_line(synthtrace(*(a.format(long=long, wh=wh) for a in args), cwd=tmp_path))
    assert "File name too long" in line and "x" * 300 in line


def test_a_failed_write_leaves_no_partial_file(wh, tmp_path, monkeypatch, capsys):
    """The disk fills up while `sql -o` writes its CSV: one line, exit 2, and no truncated file that looks valid
    (nor a hidden part file) is left; an older file of that name is kept as it was."""
    real_open = Path.open

    class Filling:  # a file whose first write stores half its bytes, then finds the disk full
        def __init__(self, f):
            self.f = f

        def write(self, data: bytes) -> int:
            self.f.write(data[: len(data) // 2])
            raise OSError(28, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.f.close()

    def open_filling(path: Path, mode: str = "r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return Filling(f) if "w" in mode else f

    old = tmp_path / "old.csv"
    old.write_text("kept\n")
    monkeypatch.setattr(Path, "open", open_filling)  # Path.write_bytes opens through it too
    for target in (tmp_path / "new.csv", old):
        assert main(["sql", "SELECT 1 AS a, 2 AS b", "-w", str(wh), "-f", "csv", "-o", str(target)]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "No space left on device" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.csv"] and old.read_text() == "kept\n"


def test_error_text_is_printed_literally(wh):
    """rich must not turn ``:100:`` into an emoji nor ``[bold]`` into markup."""
    line = one_error_line(synthtrace("runs", "rm", "t.prv:100:[bold]x", "-w", wh))
    assert "'t.prv:100:[bold]x'" in line


@pytest.mark.parametrize("command", [["runs"], ["sql", "SELECT 1"], ["export", "e"], ["runs", "rm", "r"],
                                     ["runs", "move", "r", "-e", "x"]])
def test_read_commands_refuse_a_missing_or_file_warehouse(tmp_path, command):
    typo, a_file, not_wh = tmp_path / "typo", tmp_path / "file", tmp_path / "folder"
    a_file.write_text("x")
    not_wh.mkdir()
    assert "no such warehouse" in one_error_line(synthtrace(*command, "-w", typo, cwd=tmp_path))
    assert "is a file" in one_error_line(synthtrace(*command, "-w", a_file, cwd=tmp_path))
    assert "not a synthtrace warehouse" in one_error_line(synthtrace(*command, "-w", not_wh, cwd=tmp_path))
    assert not typo.exists() and list(not_wh.iterdir()) == []


def test_warehouse_error_exits_2(tmp_path):
    """A warehouse that cannot be used (here a file) is a user mistake: exit 2, like every bad input."""
    a_file = tmp_path / "wh"
    a_file.write_text("x")
    copy_trace(PRIME, tmp_path / "t")
    copy_trace(JACOBI, tmp_path / "t")
    # said once, not once per trace of the folder
    p = synthtrace("ingest", tmp_path / "t", "-w", a_file, "--experiment", "x")
    assert "exists and is not a folder" in one_error_line(p)


_PROBE = """
import json, sys
from synthtrace.pipelines.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                  ("numba", "synthtrace", "polars", "pyarrow", "typer", "rich", "pydantic", "duckdb"))}))
"""
#: what no cheap command may import: the simulator, the Paraver reader, the models, numba
_NEVER = ("numba", "synthtrace.simulator", "synthtrace.tracelib.formats.paraver", "synthtrace.models")
#: the root's help and version come from cli.COMMANDS, without typer; runs and sql print DuckDB's rows directly
_NO_APP = ("polars", "pyarrow", "duckdb", "typer", "rich", "pydantic")
_NO_FRAMES = ("polars", "pyarrow")


@pytest.mark.parametrize(("args", "also_never"), [(["--help"], _NO_APP), ([], _NO_APP), (["--version"], _NO_APP),
                                                  (["runs"], _NO_FRAMES), (["sql", "SELECT 1"], _NO_FRAMES),
                                                  (["runs", "--help"], _NO_FRAMES)])
def test_cheap_commands_import_only_what_they_need(wh, args, also_never):
    reads = args[:1] in (["runs"], ["sql"]) and args[-1] != "--help"
    p = subprocess.run([sys.executable, "-c", _PROBE, *args, *(["-w", str(wh)] if reads else [])],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"}, check=False)
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["code"] == 0, p.stderr
    assert [m for m in report["modules"] if m.startswith(_NEVER + also_never)] == []


def test_root_help_lists_every_command_without_typer(tmp_path):
    """``synthtrace --help`` (answered from cli.COMMANDS) names every command with its help, and the root's
    options; ``synthtrace`` alone prints the same."""
    from synthtrace.pipelines.cli import COMMANDS

    p = synthtrace("--help", cwd=tmp_path)
    assert p.returncode == 0 and not p.stderr and p.stdout.startswith("Usage: synthtrace [OPTIONS] COMMAND")
    listed = " ".join(p.stdout.split())
    for name, (_, text) in COMMANDS.items():
        assert f"{name} {text}" in listed
    for option in ("--version", "--install-completion", "--show-completion", "--help"):
        assert option in listed
    assert synthtrace(cwd=tmp_path).stdout == p.stdout


def test_error_with_brackets_in_the_path_is_printed_literally(tmp_path):
    """A file or folder name holding rich markup (``[bold red]``, ``run[1]``) is printed as it is."""
    folder = tmp_path / "campaign[bold red]x"
    folder.mkdir()
    (folder / "run[1].prv").write_text("#Paraver (not a header\n")
    line = one_error_line(synthtrace("ingest", folder / "run[1].prv", "-w", tmp_path / "wh"))
    assert f"{folder / 'run[1].prv'}:1:" in line
    assert not (tmp_path / "wh" / "runs").exists() or not any((tmp_path / "wh" / "runs").iterdir())


@pytest.mark.parametrize("command", [["report"], ["archetypes"], ["models"], ["detect"], ["merge", "e"], ["train"],
                                     ["predict", "--experiment", "e"]])
def test_every_reading_command_refuses_a_mistyped_warehouse(tmp_path, run_cli, command):
    """In-process (the refusal comes before any work): one line, exit 2, nothing created."""
    typo, not_wh = tmp_path / "typo", tmp_path / "folder"
    not_wh.mkdir()
    for where, says in ((typo, "no such warehouse"), (not_wh, "not a synthtrace warehouse")):
        code, out, err = run_cli(*command, "-w", where)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], (out, err)
    assert not typo.exists() and list(not_wh.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]


def test_command_table_matches_the_modules():
    """cli.COMMANDS (what ``--help`` lists without importing) names every command each module registers, with the
    first paragraph of its help."""
    import importlib

    import typer

    from synthtrace.pipelines.cli import COMMANDS

    registered = {}
    for module in sorted({m for m, _ in COMMANDS.values()}):
        sub = typer.Typer()
        importlib.import_module(f"synthtrace.pipelines.{module}").register(sub)
        for name, cmd in typer.main.get_group(sub).commands.items():
            registered[name] = (module, " ".join((cmd.help or "").strip().split("\n\n")[0].split()))
    assert registered == COMMANDS


@pytest.mark.parametrize("command", [["sql", "SELECT 1"], ["sql", "SELECT 1", "-f", "csv"],
                                     ["sql", "SELECT 1", "-f", "json"], ["sql", "SELECT 1", "-f", "parquet"],
                                     ["export", "prime"], ["report"]])
def test_an_output_that_cannot_be_written_is_one_line(wh, tmp_path, command):
    """A folder, or a path under a file, given as the output: one line naming it, exit 2, nothing written."""
    option = "--out" if command[0] == "report" else "--output"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for target, says in ((tmp_path, "is a folder"), (a_file / "sub" / "out.x", f"{a_file} is a file")):
        line = one_error_line(synthtrace(*command, option, target, "-w", wh, cwd=tmp_path))
        assert f"{option} {target}: " in line and says in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"] and a_file.read_text() == "x"


def test_sql_output_does_not_create_its_folder(wh, tmp_path):
    """Like every --output/--out, ``sql --output`` writes into a folder that exists: a missing one is one line, never
    made (attack 10: as root, ``-o /x/y.csv`` made ``/x``); tests/test_output_args.py has every command."""
    out = tmp_path / "new" / "folder" / "one.csv"
    line = one_error_line(synthtrace("sql", "SELECT 1 AS one", "-f", "csv", "-o", out, "-w", wh))
    assert f"the folder {out.parent} does not exist" in line and not (tmp_path / "new").exists()
    out.parent.mkdir(parents=True)
    p = synthtrace("sql", "SELECT 1 AS one", "-f", "csv", "-o", out, "-w", wh)
    assert p.returncode == 0, p.stderr
    assert out.read_text().split() == ['"one"', "1"]


def test_a_folder_holding_a_warehouse_is_not_one(wh, tmp_path):
    """The warehouse marker is a file named like the default warehouse folder: the folder above a warehouse of
    the default name is not a warehouse (``runs -w .`` beside it, or ``-w ''``)."""
    (tmp_path / "synthtrace-warehouse").symlink_to(wh, target_is_directory=True)
    for where in (".", ""):
        assert "not a synthtrace warehouse" in one_error_line(synthtrace("runs", "-w", where, cwd=tmp_path))
    assert synthtrace("runs", cwd=tmp_path).returncode == 0


def test_text_that_is_not_utf8_is_one_line(wh, tmp_path):
    """Bytes of another encoding on the command line (a Latin-1 terminal) in a query or an application name: one
    line, exit 2, nothing written."""
    line = one_error_line(synthtrace("sql", os.fsdecode(b"SELECT 'caf\xe9'"), "-w", wh))
    assert "not UTF-8" in line and "character 12" in line
    copy_trace(PRIME, tmp_path / "t")
    line = one_error_line(synthtrace("ingest", tmp_path / "t", "--app", os.fsdecode(b"caf\xe9"), "-w", tmp_path / "w"))
    assert line.startswith("error: --app ") and "not UTF-8" in line and not (tmp_path / "w").exists()


def test_simulate_into_a_path_under_a_file_is_one_line(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for out in (a_file, a_file / "sub"):
        line = one_error_line(synthtrace("simulate", out, "--runs", "2", cwd=tmp_path))
        assert f"OUT_DIR {out}: {a_file} is a file, not a folder" in line
    assert a_file.read_text() == "x"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_ctrl_c_during_ingest_says_aborted_and_keeps_nothing_half_written(tmp_path, big_lulesh):
    """Ctrl-C half-way through an ingest: 'aborted' (typer would end silently with 130), exit 130, no staging
    left, and the same ingest afterwards stores the run."""
    from testing.processes import ctrl_c_when_busy, interruptible

    wh = tmp_path / "wh"
    p = interruptible([sys.executable, "-m", "synthtrace.pipelines.cli", "ingest", str(big_lulesh), "-w", str(wh)],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = ctrl_c_when_busy(p, cpu_s=2.0)
    if p.returncode == 0:
        pytest.skip("the ingest ended before it could be interrupted")
    assert p.returncode == 130 and err.strip().splitlines()[-1] == "aborted", (p.returncode, err)
    assert not (wh / "runs").is_dir() or list((wh / "runs").iterdir()) == []
    assert not (wh / ".staging").is_dir() or list((wh / ".staging").iterdir()) == []
    again = synthtrace("ingest", big_lulesh, "-w", wh)
    assert again.returncode == 0 and "ingested as" in again.stdout, again.stderr


@pytest.mark.parametrize("folder", ["run", "scratch"])
def test_ctrl_c_right_after_a_stage_is_made_leaves_no_stage(tmp_path, folder):
    """Issue 23 (the flake of test_ctrl_c_during_ingest_..., session 16): a Ctrl-C that Python raised as the stage's
    ``mkdir`` returned (a signal that came during the system call) escaped before the block that removes the stage
    was entered: ``.staging/<id>.<hash>.L<lease>`` stayed. The interrupt is injected there, in the console script's
    process (which ends without the interpreter's teardown); ``scratch``: a merge's spill folder, made the same way."""
    script = textwrap.dedent(f"""
        import pathlib, sys
        from synthtrace.pipelines import cli
        made = pathlib.Path.mkdir

        def mkdir(self, *args, **kwargs):
            made(self, *args, **kwargs)
            if self.parent.name == ".staging" and ".L" in self.name and self.name.startswith("merge-") == {
                folder == "scratch"}:
                raise KeyboardInterrupt  # as Python raises a SIGINT received during os.mkdir

        pathlib.Path.mkdir = mkdir
        sys.exit(cli.main())
        """)
    wh = tmp_path / "wh"
    if folder == "scratch":
        a, b = copy_trace(PRIME, tmp_path / "a", "pa"), copy_trace(PRIME, tmp_path / "b", "pb")
        assert synthtrace("ingest", a, b, "-w", wh, "--experiment", "e").returncode == 0
        args = ["merge", "e", "-w", wh]
    else:
        args = ["ingest", PRIME, "-w", wh]
    p = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 130 and p.stderr.strip().splitlines()[-1] == "aborted", (p.returncode, p.stderr)
    assert not (wh / ".staging").is_dir() or list((wh / ".staging").iterdir()) == []


@pytest.mark.parametrize("ref", ["whole", "prefix"])
def test_runs_rm_of_a_run_folder_that_is_a_link_says_so_and_follows_nothing(tmp_path, run_cli, ref):
    """Attack 16: `runs rm ID` of a run whose ``runs/<id>`` is a link (to a copy elsewhere) said "no run"; now one
    line saying it is a link, not followed, exit 2: the link and what it points at stay."""
    wh = ingested(tmp_path, "prime", PRIME)
    (run_dir,) = (wh / "runs").iterdir()
    elsewhere = tmp_path / "elsewhere" / run_dir.name
    elsewhere.parent.mkdir()
    run_dir.rename(elsewhere)
    run_dir.symlink_to(elsewhere)
    before = tree_digest(elsewhere)
    code, out, err = run_cli("runs", "rm", run_dir.name if ref == "whole" else run_dir.name[:6], "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {run_dir}: not a folder of the warehouse "
                                                                 "(a symbolic link"), err
    assert "nothing was changed: remove the link itself" in lines[0], err
    assert run_dir.is_symlink() and tree_digest(elsewhere) == before


def test_every_help_example_parses_with_the_commands_own_options(tmp_path, monkeypatch):
    """The examples ending each command's --help name only options and values the command takes (parsed by the
    command itself, nothing run; the default warehouse is there, as where a user types them), and every command
    has some."""
    import shlex

    import typer

    from synthtrace.warehouse import Warehouse

    monkeypatch.chdir(tmp_path)
    Warehouse(tmp_path / "synthtrace-warehouse").ensure()

    from synthtrace.pipelines.cli import COMMANDS
    from synthtrace.pipelines.cli_app import app
    from synthtrace.pipelines.cli_examples import EXAMPLES

    group = typer.main.get_command(app)
    root = group.make_context("synthtrace", ["runs"], resilient_parsing=True)
    assert set(COMMANDS) <= {path.split()[0] for path in EXAMPLES}
    for path, lines in EXAMPLES.items():
        cmd = group
        for word in path.split():
            cmd = cmd.get_command(root, word)
        assert lines and cmd.epilog.startswith("Examples:") and all(line in cmd.epilog for line in lines), path
        for line in lines:
            words = shlex.split(line)
            assert words[: 1 + len(path.split())] == ["synthtrace", *path.split()], line
            with cmd.make_context(path, words[1 + len(path.split()):]) as ctx:
                assert ctx.params, line


@pytest.mark.parametrize("args", [["sql", "SELECT 1 AS x", "-f", "csv"], ["sql", "SELECT 1 AS x"], ["runs"]])
def test_a_closed_standard_output_is_one_line(wh, args):
    """Fresh attack (issue 23): started with its standard output closed (`synthtrace sql ... >&-`), a command that
    prints ended in an AttributeError traceback ('NoneType' object has no attribute 'write'); now one line, exit 2,
    as `echo x >&-` says 'Bad file descriptor'. Output to a file still works."""
    def run(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", *args, "-w", str(wh), *more],
                              stderr=subprocess.PIPE, text=True, timeout=300, preexec_fn=lambda: os.close(1))

    proc = run()
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "error: [Errno 9] standard output is closed (the command was started with it closed)"], proc.stderr
    if args[0] == "sql":
        out = wh.parent / "closed-stdout.csv"
        assert run("-o", str(out)).returncode == 0 and out.read_text() == '"x"\n1\n'


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo", "dangling link"])
def test_a_trace_path_that_is_not_a_regular_file_says_what_it_is(tmp_path, run_cli, kind):
    """Session 6 item 3: a trace that is a link to /dev/zero or a FIFO was reported "no such file"."""
    trace = tmp_path / "t.prv"
    if kind == "fifo":
        os.mkfifo(trace)
    else:
        trace.symlink_to("/dev/zero" if kind == "link to /dev/zero" else tmp_path / "gone.prv")
    code, _, err = run_cli("ingest", trace, "-w", tmp_path / "wh")
    rule = ": a trace is a file or a folder of them"
    said = {"link to /dev/zero": "a link to /dev/zero, a character device, not a regular file" + rule,
            "fifo": "a FIFO, not a regular file" + rule,
            "dangling link": f"a link to {tmp_path / 'gone.prv'}, which does not exist"}
    assert code == 2 and err.strip() == f"error: {trace}: {said[kind]}", err
    assert not (tmp_path / "wh").exists()


def test_a_ctrl_c_before_the_command_starts_is_aborted_not_a_traceback(monkeypatch, capsys):
    """Session 6 item 3: a Ctrl-C while `synthtrace sql ... --output` imported its modules (before the command's
    own handler) escaped as a KeyboardInterrupt traceback and the process died by SIGINT; now "aborted", 130."""
    import synthtrace.pipelines.cli_read as cli_read

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_read, "understood", interrupted)
    assert main(["sql", "SELECT 1", "--output", "x.csv"]) == 130
    assert capsys.readouterr().err == "aborted\n"


def test_an_output_stream_that_cannot_encode_the_data_shows_it_escaped(tmp_path, monkeypatch):
    """Attack 6 F10: with PYTHONIOENCODING=ascii (or a C locale) a value or a warehouse path outside ASCII in a
    table was a UnicodeEncodeError traceback; it is shown escaped, as error lines are."""
    import io

    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(tmp_path / "wh_\u00fc\u6f22").ensure()
    raw = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(raw, encoding="ascii", write_through=True))
    assert main(["sql", "SELECT '\u00fc\u6f22' AS x", "-w", str(wh.root)]) == 0
    assert main(["runs", "-w", str(wh.root)]) == 0
    assert b"\\xfc\\u6f22" in raw.getvalue()


@pytest.mark.real_traces
def test_a_link_to_a_trace_beside_it_is_one_run_read_with_its_companions(tmp_path, run_cli):
    """Attack 6 F13: a link in a drop folder to a trace there was ingested as a second run of the same execution
    (its .pcf/.row looked for beside the link: counters by number, another content id), and the experiment's merge
    then failed every night. A trace found twice is found once, by its own path (where its companions lie)."""
    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop / "a")
    (drop / "linkdup.prv").symlink_to(prv)
    code, out, err = run_cli("ingest", drop, "-w", tmp_path / "wh")
    assert code == 0, err
    code, out, _ = run_cli("sql", "SELECT run_name, source_path FROM runs", "-w", tmp_path / "wh", "-f", "csv")
    assert out.splitlines()[1:] == [f'"prime_v0","{prv}"'], out
    assert "PAPI_TOT_INS" in run_cli("sql", "DESCRIBE bursts", "-w", tmp_path / "wh", "-f", "csv")[1]


@pytest.mark.parametrize("seed", ["99999999999999999999999", "4294967296", "-1"])
def test_a_train_seed_scikit_learn_cannot_take_is_one_usage_line(tmp_path, run_cli, seed):
    """Attack 6 F20: `train --seed` past 32 bits ended with scikit-learn's InvalidParameterError traceback after
    the data was read; it is a usage error before any work."""
    code, _, err = run_cli("train", "--seed", seed, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--seed" in err and "Traceback" not in err, err


def test_a_report_whose_plots_fail_leaves_none_and_names_the_file(wh, tmp_path, run_cli, monkeypatch):
    """Attack 6 F12: `report --plots DIR` on a full disk said "[Errno 28] No space left on device" naming no file
    and left the PNGs written before the failure in DIR. The PNGs are put in DIR once the report is whole: one line
    naming the PNG being written, and no PNG, no DIR, no report left."""
    import errno

    from synthtrace.pipelines import report

    write_atomically = report.write_atomically
    written: list[Path] = []

    def full_at_the_second(path, write):
        written.append(Path(path))
        if len(written) < 2:
            return write_atomically(path, write)

        def short_write(p: Path) -> None:  # part of the PNG, then the disk is full (a write() names no file)
            p.write_bytes(b"\x89PNG")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_atomically(path, short_write)

    monkeypatch.setattr(report, "write_atomically", full_at_the_second)
    plots = tmp_path / "out" / "plots"
    code, _, err = run_cli("report", "--out", tmp_path / "r.html", "-w", wh, "--plots", plots, "--machine", "generic")
    assert code == 2 and written[-1].suffix == ".png", err
    assert list(tmp_path.iterdir()) == []  # before: the first PNG stayed in plots/
    assert err.strip().splitlines() == [
        f"error: --plots {plots / written[-1].name}: cannot write it (No space left on device)"]


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EDQUOT", "EMLINK"])
def test_a_read_on_a_warehouse_with_no_room_for_links_reads_by_path(wh, run_cli, monkeypatch, tmp_path, errno_name):
    """Attack 7 A11: on a warehouse file system with no free inode (or over quota), every read command failed with
    `error: run.parquet: No space left on device`: the query's hard links to the files it reads could not be made.
    A read needs no space: it reads the files by their paths instead, and leaves nothing in .staging."""
    import errno

    link, refused = os.link, tmp_path / "refused"  # a file: the query runs in a child process

    def no_room(src, dst, *args, **kwargs):
        if "/.staging/" in os.path.realpath(dst if kwargs.get("dst_dir_fd") is None else
                                            f"/proc/self/fd/{kwargs['dst_dir_fd']}"):
            refused.write_text(src)
            raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)), src)
        return link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", no_room)
    code, out, err = run_cli("sql", "SELECT count(*) AS n FROM runs", "-w", wh, "--format", "csv")
    assert code == 0 and out.split() == ['"n"', "1"], err
    code, out, err = run_cli("runs", "-w", wh)
    assert code == 0 and "prime" in out, err
    assert refused.exists() and not any((wh / ".staging").iterdir())


def test_an_output_to_stdout_gets_no_status_line_in_its_data(wh):
    """Attack 7 A19: `export -o /dev/stdout` ended its CSV with "wrote /dev/stdout (...)" (and `report -o
    /dev/stdout` its HTML with "report written to ..."; the same cli_base.print_written serves it): the status line
    landed in the data. It goes to stderr there."""
    p = synthtrace("export", "prime", "-f", "csv", "-o", "/dev/stdout", "-w", wh)
    assert p.returncode == 0, p.stderr
    header, *rows = p.stdout.splitlines()
    assert rows and all(r.count(",") == header.count(",") for r in rows), rows[-1]
    assert p.stderr.splitlines()[-1].startswith("wrote /dev/stdout (csv, ")


# ------------------------------------------------------------------------------------- [helper edges] issue 23
def test_an_output_named_dash_is_standard_output(wh, tmp_path):
    """`-o -` / `--output -` wrote a file literally named `-` (the shell's convention: standard output, as `-o
    /dev/stdout` already wrote on a pipe). The data goes to stdout, the status line to stderr, no file is made."""
    p = synthtrace("plan", "--counters", "PAPI_L1_DCM", "--slots", "4", "-f", "json", "-o", "-", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["n_runs"] == 1 and p.stderr.strip() == "1 run(s) written to -"
    p = synthtrace("sql", "SELECT run_name FROM runs", "--format", "csv", "--output", "-", "-w", wh, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.split() == ['"run_name"', '"prime_v0"'], p.stderr
    p = synthtrace("export", "prime", "-f", "csv", "-o", "-", "-w", wh, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("run_id,") and p.stderr.startswith("wrote - (csv, ")
    assert not (tmp_path / "-").exists() and not any(tmp_path.iterdir())


@pytest.mark.parametrize("stdout", ["appended file", "socket"])
def test_dash_writes_where_the_shell_put_stdout(tmp_path, stdout):
    """`-o -` with stdout redirected to a file or a socket (a service's journal): `>> log` replaced the whole log
    with the output (it was renamed over the file), and a socket was refused ("is a socket, not a file"). The output
    goes where the shell put stdout: after what `>>` kept, into the socket."""
    import socket

    args = [sys.executable, "-m", "synthtrace.pipelines.cli", "plan", "--counters", "PAPI_L1_DCM", "--slots", "4",
            "-f", "json", "-o", "-"]
    if stdout == "socket":
        ours, theirs = socket.socketpair()
        with ours, theirs:
            p = subprocess.Popen(args, stdout=theirs, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
            theirs.close()
            data = b"".join(iter(lambda: ours.recv(1 << 16), b"")).decode()
            err = p.stderr.read()
            assert p.wait(timeout=300) == 0, err
    else:
        log = tmp_path / "log"
        log.write_text("kept\n")
        with open(log, "a") as out:
            p = subprocess.run(args, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        kept, data = log.read_text().split("\n", 1)
        assert kept == "kept"
    assert json.loads(data)["n_runs"] == 1
    assert sorted(x.name for x in tmp_path.iterdir()) == (["log"] if stdout != "socket" else [])


_AS_A_USER = """
import os, sys
from pathlib import Path
from synthtrace.pipelines import cli_base
real = os.access  # as a user other than root: /dev cannot be written
cli_base.os.access = lambda p, mode: os.path.realpath(p) != "/dev" and real(p, mode)
for path in ("-", "/dev/synthtrace-test-output"):
    try:
        print(cli_base.output_file(Path(path)), file=sys.stderr)
    except Exception as exc:
        print(exc, file=sys.stderr)
"""


@pytest.mark.parametrize("stdout", ["pipe", "file"])
def test_stdout_is_written_by_a_user_who_cannot_write_dev(tmp_path, stdout):
    """`-o -` is /dev/stdout, whose folder (/dev) only root may write: its folder was checked as if a file were put
    there, which refused `-o /dev/stdout` to every other user. A stream is written into (its folder does not
    matter); a file (`> out.csv`) is replaced in its own folder."""
    out = open(tmp_path / "out.csv", "w") if stdout == "file" else subprocess.PIPE
    p = subprocess.run([sys.executable, "-c", _AS_A_USER], stdout=out, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.stderr.splitlines() == ["/dev/stdout", "--output /dev/synthtrace-test-output: cannot write into /dev "
                                     "(read-only or not yours)"], p.stderr


def _reader_gone(*args: str | Path) -> tuple[int, str]:
    """``synthtrace ARGS`` whose standard output's reader has gone before it writes (``| head -0``): exit code and
    stderr."""
    p = subprocess.Popen([sys.executable, "-m", "synthtrace.pipelines.cli", *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "100"})
    p.stdout.close()
    err = p.stderr.read()
    return p.wait(timeout=300), err


@pytest.mark.parametrize("args", [
    ["runs"], ["sql", "SELECT * FROM bursts"], ["sql", "SELECT * FROM bursts", "--format", "csv"], ["pop"],
    ["plan", "--counters", "PAPI_L1_DCM", "--slots", "4", "-f", "json"], ["export", "prime", "-f", "csv", "-o", "-"],
])
def test_a_closed_output_ends_the_command_quietly(wh, args):
    """`synthtrace merge ... | head -1` exited 1 (rich's own exit for a broken pipe), saying nothing: a script
    could not tell it from a failure. A closed stdout is the reader's choice: exit 141 (128 + SIGPIPE, as a shell
    reports `seq 1 1000000 | head -1`), nothing on stderr."""
    assert _reader_gone(*args, "-w", wh) == (141, "")


def test_an_error_whose_stderr_is_closed_keeps_its_exit_code(wh):
    """`2>&1 | head -0`: the error line cannot be printed, and the exit code still says what happened (2 for a bad
    query, not the 1 of an exception escaping while the error was said); a table is the reader's closed output."""
    for args, code in ((["sql", "SELECT nope"], 2), (["runs"], 141)):
        p = subprocess.Popen([sys.executable, "-m", "synthtrace.pipelines.cli", *args, "-w", str(wh)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        p.stdout.close()
        assert p.wait(timeout=300) == code, args


@pytest.mark.slow
def test_a_merge_whose_output_is_closed_ends_quietly(merged_lulesh, tmp_path):
    """The same for `merge` (its quality table), which has stored the merge by then."""
    w = tmp_path / "wh"
    shutil.copytree(merged_lulesh, w)
    assert _reader_gone("merge", "lulesh-8r", "-w", w) == (141, "")
    assert (w / "experiments" / "lulesh-8r" / "merged_bursts.parquet").is_file()


def test_a_librarys_warning_about_another_library_is_not_shown_and_the_tools_own_are():
    """`synthtrace demo` and every night began with four lines of pydantic 2.14 about Prefect 3.9's models ("warning:
    The 'alias' attribute with value 'work_pool_name' was provided to the `Field()` function ..."), which a user can
    do nothing about; the tool's own warnings (a trace's, the analysis') are still shown."""
    import warnings

    from synthtrace.pipelines.cli import show_warnings

    with warnings.catch_warnings(record=True) as seen:
        show_warnings()
        warnings.warn("The 'alias' attribute with value 'work_pool_name' was provided to the `Field()` function, "
                      "which has no effect in the context it was used.", UserWarning, stacklevel=1)
        warnings.warn("x.prv: 2 bursts repeat the one before them", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["x.prv: 2 bursts repeat the one before them"]


def test_an_unclosed_file_collected_during_a_command_is_not_a_line_of_its_output():
    """Stop 43's CI: the one-line refusal of `nightly` came with two more lines, "warning: unclosed file
    <_io.FileIO name=18 mode='wb' closefd=True>": a file some other code left open was collected while the command
    ran. A ResourceWarning is a note for the developer of that code (Python hides it outside development mode),
    never a user's line; the tool's own warnings still are."""
    import gc
    import warnings

    from synthtrace.pipelines.cli import show_warnings

    with warnings.catch_warnings(record=True) as seen:
        show_warnings()
        leaked = open(os.devnull, "wb")  # left open on purpose
        del leaked
        gc.collect()
        warnings.warn("x.prv: 2 bursts repeat the one before them", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["x.prv: 2 bursts repeat the one before them"]


def test_sql_on_standard_output_shows_control_characters_escaped_and_a_file_keeps_them(tmp_path, run_cli):
    """Attack 19 F5: a trace under a folder named ``x ESC]0;PWNED BEL esc`` is ingested (only a trace's own name is
    refused for such characters) and its ``source_path`` stored as it is; ``sql --format csv`` printed it raw, and
    the terminal set its window title (any sequence plays: colours, cursor moves, clearing). Every format on
    standard output shows it escaped now, column names too, as the table output and every message do; a file
    written with --output keeps the value as stored."""
    from testing.traces import PRIME, copy_trace

    folder = tmp_path / "x\x1b]0;PWNED\x07esc"
    copy_trace(PRIME, folder)
    assert run_cli("ingest", folder, "-w", tmp_path / "wh")[0] == 0
    query = "SELECT source_path AS \"p\x1b[31m\", 'a' || chr(10) || 'b' AS two FROM runs"
    for fmt in ("csv", "json", "table"):
        code, out, err = run_cli("sql", query, "-w", tmp_path / "wh", "-f", fmt)
        assert code == 0 and out.strip(), err
        assert "\x1b" not in out and "\x07" not in out, (fmt, out)
    code, out, _ = run_cli("sql", query, "-w", tmp_path / "wh", "-f", "csv")
    assert out.splitlines() == ['"p\\x1b[31m","two"', f'"{folder}/prime_v0.prv","a\\nb"'.replace(
        "\x1b", "\\x1b").replace("\x07", "\\x07")], out
    code, _, err = run_cli("sql", "SELECT source_path FROM runs", "-w", tmp_path / "wh", "--output", tmp_path / "o.csv")
    assert code == 0 and (tmp_path / "o.csv").read_text().splitlines()[1] == f'"{folder}/prime_v0.prv"', err
