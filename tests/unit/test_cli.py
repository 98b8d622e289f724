"""The command line on its own: argument errors, config precedence and `list`, without kernels
(`workbench run` itself is covered by test_runner.py and test_run_e2e.py)."""

import argparse
import subprocess
import sys

import pytest

import workbench.runner
from workbench.cli import COMMANDS, Command, build_parser, main
from workbench.errors import EXIT_BAD_INPUT, EXIT_OK
from workbench.runner import DEFAULT_CELL_TIMEOUT_S, RunRequest
from workbench.workloads import BUILTIN_WORKLOADS, DEFAULT_WORKLOAD


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("workbench: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "required: command"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["run", "--cell-timeout", "soon"], "invalid int value: 'soon'"),
        (["run", "--workload"], "--workload: expected one argument"),
        (["env"], "required: env_command"),
        (["env", "diff", "only-one.json"], "required: new"),
        (["run", "-p", "steady_steps"], "give KEY=VALUE or KEY VALUE (papermill's form)"),
        (["run", "-p", "a=1", "b=2"], "not 'a=1 b=2'"),
    ],
)
def test_argument_errors_are_one_sentence_and_exit_2(capsys, tmp_path, monkeypatch, argv, fragment):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_BAD_INPUT
    line = _one_error_line(capsys)
    assert fragment in line and "--help" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["run", "--target", "tpu"], "Unknown target 'tpu'"),
        (["run", "-p", "=5"], "Parameter '=5' is not of the form key=value."),
        (["run", "--config", "missing.yaml"], "Config missing.yaml cannot be read"),
        # A misspelt parameter or workload gets a suggestion.
        (["run", "--only", "01", "-p", "bach_size=32"], "'bach_size' (did you mean batch_size?)"),
        (["run", "--workload", "seed-mpl"], "'seed-mpl' (did you mean seed-mlp?)"),
    ],
)
def test_bad_input_from_a_command_is_one_sentence_and_exit_2(
    capsys, tmp_path, monkeypatch, argv, fragment
):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == EXIT_BAD_INPUT
    assert fragment in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == [], "bad input writes nothing"


@pytest.fixture
def requests(monkeypatch) -> list[RunRequest]:
    """`workbench run` with the runner replaced by a recorder of the request it gets."""
    seen: list[RunRequest] = []

    def record(request: RunRequest, progress) -> int:
        seen.append(request)
        return EXIT_OK

    monkeypatch.setattr(workbench.runner, "run", record)
    return seen


def test_run_defaults(requests):
    assert main(["run"]) == EXIT_OK
    (request,) = requests
    assert request.workload == DEFAULT_WORKLOAD and request.target == "auto"
    assert request.only == [] and request.out is None and request.parameters == {}
    assert request.cell_timeout == DEFAULT_CELL_TIMEOUT_S and not request.show_code


def test_command_line_values_win_over_the_config_file(requests, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "workload: tiny-cnn\ntarget: cpu\nonly: [1, 3]\nout: from-config\ncell_timeout: 60\n"
        "show_code: true\nparameters: {steady_steps: 5, modes: eager}\n"
    )
    assert main(["run", "--config", str(config)]) == EXIT_OK
    overrides = ["--workload", "tiny-transformer", "--only", "00", "-p", "steady_steps=7"]
    assert main(["run", "--config", str(config), *overrides, "--cell-timeout", "9"]) == EXIT_OK
    from_config, overridden = requests
    assert from_config.workload == "tiny-cnn" and from_config.target == "cpu"
    assert from_config.only == ["1", "3"] and str(from_config.out) == "from-config"
    assert from_config.cell_timeout == 60 and from_config.show_code
    assert from_config.parameters == {"steady_steps": 5, "modes": "eager"}
    assert overridden.workload == "tiny-transformer" and overridden.only == ["00"]
    assert overridden.parameters == {"steady_steps": "7", "modes": "eager"}
    assert overridden.cell_timeout == 9 and overridden.target == "cpu"


def test_list_names_every_workload_target_and_parameter(capsys):
    assert main(["list"]) == EXIT_OK
    out = capsys.readouterr().out
    for name in BUILTIN_WORKLOADS:
        assert name in out
    assert "hf:FOLDER / hf:MODEL_TYPE" in out
    for target in ("cpu", "cuda", "xla", "neuron"):
        assert f"  {target} " in out
    assert "steady_steps (int, default 30)" in out
    # The runner sets these from --workload/--target/--out; they are not -p parameters.
    assert "out_dir (" not in out and "workload (" not in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (
            ["run", "--worklaod", "seed-mlp"],
            "unrecognized arguments: --worklaod seed-mlp (did you mean --workload?); "
            "see `workbench run --help`",
        ),
        (["open", "--taget=cpu"], "(did you mean --target?); see `workbench open --help`"),
        (["rnu"], "(did you mean run?); see `workbench --help`"),
        (
            ["tables", "import-native", "t.md", "--relase", "2.29.0"],
            "(did you mean --release?); see `workbench tables import-native --help`",
        ),
    ],
)
def test_misspelt_options_and_commands_get_a_suggestion_and_their_own_usage(
    capsys, tmp_path, monkeypatch, argv, fragment
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_BAD_INPUT
    assert fragment in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_unknown_parameter_lists_only_what_a_user_can_set(capsys):
    assert main(["run", "--only", "00", "-p", "pinned=x"]) == EXIT_BAD_INPUT
    line = _one_error_line(capsys)
    listed = line.split("take ", 1)[1].rstrip(".").split(", ")
    assert listed == ["fail_on_drift", "pinned_manifest"]


@pytest.mark.parametrize(
    "argv", [["--help"], ["run", "--help"], ["open", "--help"], ["tables", "import-native", "-h"]]
)
def test_help_answers_without_importing_torch(argv):
    code = (
        "import sys\nfrom workbench.cli import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\n"
        "print('HEAVY', sorted(m for m in ('torch', 'papermill', 'nbconvert') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().endswith("HEAVY []"), done.stdout[-300:]
    if argv == ["run", "--help"]:
        for heading in ("what to run:", "where the results go:", "examples:", "workbench list"):
            assert heading in done.stdout


def _leaves(commands: tuple[Command, ...]) -> list[Command]:
    return [leaf for c in commands for leaf in (_leaves(c.subcommands) if c.subcommands else [c])]


def test_every_subcommand_comes_from_the_one_table_and_has_a_handler():
    parser = build_parser()
    (subcommands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(subcommands.choices) == [c.name for c in COMMANDS]
    for leaf in _leaves(COMMANDS):
        assert leaf.handler is not None, leaf.name
    # Group commands record their subcommand where the usage errors look for it.
    env = next(c for c in COMMANDS if c.name == "env")
    assert (
        parser.parse_args(["env", "diff", "a", "b"]).env_command
        == "diff"
        == env.subcommands[1].name
    )


def test_the_cli_process_skips_the_iri_parsers_and_still_validates_notebooks():
    # In a fresh process, as the CLI starts: jsonschema must not build rfc3987_syntax's parsers,
    # and nbformat must still reject a notebook that breaks its schema.
    script = """
import sys
from workbench.cli import skip_iri_format_parsers
skip_iri_format_parsers()
import nbformat
notebook = nbformat.v4.new_notebook()
nbformat.validate(notebook)
notebook.cells.append({"cell_type": "code", "source": 3})
try:
    nbformat.validate(notebook)
except nbformat.ValidationError:
    print("invalid notebook rejected")
print("rfc3987_syntax loaded:", sys.modules.get("rfc3987_syntax") is not None)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["invalid notebook rejected", "rfc3987_syntax loaded: False"]


def test_compare_gate_defaults_are_those_of_compares_gates():
    """The gate options' defaults and the numbers their help shows are compare's Gates."""
    from workbench.compare import Gates

    gates = Gates()
    parser = build_parser("compare")
    args = parser.parse_args(["compare", "reports"])
    options = {
        "step_gate": gates.step_time,
        "compile_gate": gates.compile_time,
        "memory_gate": gates.memory,
        "p_value": gates.p_value,
    }
    assert {name: getattr(args, name) for name in options} == options
    (subcommands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    shown = {a.dest: a.help for a in subcommands.choices["compare"]._actions}
    for name, value in options.items():
        assert f"({value:.2f})" in shown[name], (name, shown[name])


def test_version_is_the_packages(capsys):
    from workbench import __version__

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == EXIT_OK
    assert capsys.readouterr().out == f"workbench {__version__}\n"


def test_papermills_two_word_parameters_equal_key_value_ones(requests):
    """papermill's `-p NAME VALUE` and the workbook's `-p NAME=VALUE` give the same request,
    mixed on one line; a value holding '=' (hf_config) stays whole."""
    assert main(["run", "-p", "steady_steps", "7", "-p", "modes=eager"]) == EXIT_OK
    assert main(["run", "-p", "hf_config", "n_layer=2,n_embd=64"]) == EXIT_OK
    two_words, with_equals = requests
    assert two_words.parameters == {"steady_steps": "7", "modes": "eager"}
    assert with_equals.parameters == {"hf_config": "n_layer=2,n_embd=64"}


def test_run_prints_the_report_path_alone_on_stdout(capsys, monkeypatch):
    def run(request: RunRequest, progress) -> int:
        progress("[1/1] 00_environment ok in 1.0 s")
        progress("report: /tmp/reports/x/index.html (exit 0)")
        return EXIT_OK

    monkeypatch.setattr(workbench.runner, "run", run)
    assert main(["run"]) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out == "/tmp/reports/x/index.html\n"
    assert "00_environment ok" in captured.err and "report: /tmp/reports/x" in captured.err
