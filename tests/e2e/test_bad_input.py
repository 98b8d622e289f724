"""Every bad input is one sentence on stderr and exit 2, found before anything is written.

Runs the real command line in-process (`workbench.cli.main`), from an empty folder that must stay
as it was. tests/e2e/HARDENING.md lists these cases with the faults covered elsewhere.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from workbench.cli import main

LONG = "9" * 5000
NESTED = "[" * 2000 + "]" * 2000


def _alias_bomb(levels: int) -> str:
    """A YAML billion-laughs document of about 1 KB: each level lists the one above nine times."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# Under the alias limit (63 aliases), yet 9**7 values once expanded; and over the limit.
ALIAS_BOMB_WIDE = _alias_bomb(8)
ALIAS_BOMB_MANY = _alias_bomb(10)
DEEP_YAML = "a:\n" + "".join(" " * i + "- \n" for i in range(1, 20_000))
DEEP_FLOW_YAML = "a: " + "[" * 20_000 + "]" * 20_000
DEEP_JSON = "[" * 100_000 + "]" * 100_000
OPENED = '{"schema_version": 1, "workload": "seed-mlp", "target": "cpu"}'
TIMED_WRONG = json.dumps(
    {
        "cells": [
            {
                "cell_type": "code",
                "source": "x = 1",
                "metadata": {"execution": 5},
                "outputs": [],
                "execution_count": 1,
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
)

# (id, arguments after `workbench`, files to create first, a phrase the sentence must contain)
BAD_INPUTS = [
    (
        "out is a file",
        ["run", "--only", "00", "--out", "a-file"],
        {"a-file": "keep"},
        "is a file, not a folder",
    ),
    (
        "out under a file",
        ["run", "--only", "00", "--out", "a-file/run"],
        {"a-file": "keep"},
        "cannot be used",
    ),
    ("out empty", ["run", "--only", "00", "--out", ""], {}, "--out is empty"),
    (
        "out occupied",
        ["run", "--only", "00", "--out", "old"],
        {"old/index.html": "x"},
        "already holds files",
    ),
    ("out name too long", ["run", "--only", "00", "--out", "r" * 300], {}, "File name too long"),
    (
        "config cell_timeout text",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "cell_timeout: abc"},
        "'cell_timeout' must be a whole number",
    ),
    (
        "config cell_timeout zero",
        ["run", "--only", "00", "--config", "c.yaml"],
        {"c.yaml": "cell_timeout: 0"},
        "must be 1 or more seconds",
    ),
    (
        "config cell_timeout negative",
        ["run", "--only", "00", "--config", "c.yaml"],
        {"c.yaml": "cell_timeout: -5"},
        "must be 1 or more seconds",
    ),
    (
        "config cell_timeout float",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "cell_timeout: 2.5"},
        "'cell_timeout' must be a whole number",
    ),
    (
        "config workload list",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "workload: [1, 2]"},
        "'workload' must be a string",
    ),
    (
        "config out list",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "out: [a]"},
        "'out' must be a string",
    ),
    (
        "config show_code 'no'",
        ["run", "--config", "c.yaml"],
        {"c.yaml": 'show_code: "no"'},
        "'show_code' must be true or false",
    ),
    (
        "config show_code number",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "show_code: 1"},
        "'show_code' must be true or false",
    ),
    (
        "config target number",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "target: 5"},
        "'target' must be a string",
    ),
    (
        "config only mapping",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "only: {a: 1}"},
        "'only' must be",
    ),
    (
        "config only empty",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "only: ''"},
        "names no notebook",
    ),
    (
        "config parameters list",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "parameters: [1]"},
        "'parameters' must be a mapping",
    ),
    (
        "config parameter wrong type",
        ["run", "--only", "01", "--config", "c.yaml"],
        {"c.yaml": "parameters: {steady_steps: abc}"},
        "expects int",
    ),
    (
        "config null value",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "workload:"},
        "'workload' must be a string",
    ),
    (
        "config not a mapping",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "- a\n- b"},
        "must be a mapping",
    ),
    (
        "config unknown key",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "colour: blue"},
        "unknown key 'colour'",
    ),
    (
        "config invalid YAML",
        ["run", "--config", "c.yaml"],
        {"c.yaml": "a: [1, 2"},
        "is not valid YAML",
    ),
    ("config missing", ["run", "--config", "missing.yaml"], {}, "cannot be read"),
    ("config is a folder", ["run", "--config", "cfg"], {"cfg/x": ""}, "cannot be read"),
    (
        "config not UTF-8",
        ["run", "--config", "c.yaml"],
        {"c.yaml": b"\xff\xfe\x00bad"},
        "is not UTF-8 text",
    ),
    (
        "parameter too long",
        ["run", "--only", "01", "-p", f"steady_steps={LONG}"],
        {},
        "values are limited to 4,096",
    ),
    (
        "parameter nested too deep",
        ["run", "--only", "01", "-p", f"steady_steps={NESTED}"],
        {},
        "Parameter 'steady_steps' (01_baseline) nests deeper than",
    ),
    (
        "parameter without =",
        ["run", "--only", "00", "-p", "novalue"],
        {},
        "give KEY=VALUE or KEY VALUE",
    ),
    (
        "parameter without name",
        ["run", "--only", "00", "-p", "=x"],
        {},
        "not of the form key=value",
    ),
    (
        "unknown parameter",
        ["run", "--only", "00", "-p", "warmup_stepz=3"],
        {},
        "Unknown parameter 'warmup_stepz'",
    ),
    ("runner parameter", ["run", "--only", "00", "-p", "out_dir=x"], {}, "set by the runner"),
    ("bool parameter", ["run", "--only", "00", "-p", "fail_on_drift=perhaps"], {}, "expects bool"),
    (
        "list of words for ints",
        ["run", "--only", "04", "-p", "batch_sizes=abc,def"],
        {},
        "expects list[int], got ['abc', 'def']",
    ),
    (
        "list of floats for ints",
        ["run", "--only", "04", "-p", "world_sizes=1.5"],
        {},
        "expects list[int]",
    ),
    (
        "list of numbers for words",
        ["run", "--only", "01", "-p", "kinds=1,2"],
        {},
        "expects list[str]",
    ),
    (
        "list value out of choices",
        ["run", "--only", "01", "-p", "kinds=train,walk"],
        {},
        "choose from train, infer",
    ),
    (
        "unknown Neuron flavour",
        ["run", "--only", "02", "-p", "neuron_flavours=trn9"],
        {},
        "choose from native, xla",
    ),
    (
        "int below range",
        ["run", "--only", "01", "-p", "steady_steps=1"],
        {},
        "use at least 3 samples",
    ),
    (
        "negative batch size",
        ["run", "--only", "01", "-p", "batch_size=-1"],
        {},
        "batch_size -1 must be 0",
    ),
    (
        "unknown precision",
        ["run", "--only", "03", "-p", "precisions=fp8"],
        {},
        "'fp8' is not a precision",
    ),
    (
        "inverted range",
        ["run", "--only", "04", "-p", "min_batch=8", "-p", "max_batch=4"],
        {},
        "need 1 <= min_batch <= max_batch",
    ),
    (
        "fraction out of range",
        ["run", "--only", "04", "-p", "max_padding_waste=1.5"],
        {},
        "max_padding_waste lie in [0, 1)",
    ),
    (
        "cell timeout zero",
        ["run", "--only", "00", "--cell-timeout", "0"],
        {},
        "must be 1 or more seconds",
    ),
    (
        "cell timeout negative",
        ["run", "--only", "00", "--cell-timeout", "-5"],
        {},
        "must be 1 or more seconds",
    ),
    (
        "cell timeout text",
        ["run", "--only", "00", "--cell-timeout", "abc"],
        {},
        "invalid int value: 'abc'",
    ),
    ("only empty", ["run", "--only", ""], {}, "names no notebook"),
    ("only commas", ["run", "--only", ",,"], {}, "names no notebook"),
    ("only unknown", ["run", "--only", "42"], {}, "--only '42' names no notebook"),
    ("unknown target", ["run", "--only", "00", "--target", "tpu"], {}, "Unknown target 'tpu'"),
    (
        "unknown workload module",
        ["run", "--only", "01", "--workload", "no_such_pkg.mod:make"],
        {},
        "Workload 'no_such_pkg.mod:make'",
    ),
    (
        "workload raising with control sequences",
        [
            "run",
            "--only",
            "01",
            "--workload",
            "tests.fixtures.user_workloads:raises_with_control_sequences",
        ],
        {},
        "cannot build the model txt.exe",
    ),
    ("unknown option", ["run", "--colour"], {}, "unrecognized arguments: --colour"),
    ("missing option value", ["run", "--cell-timeout"], {}, "expected one argument"),
    ("unknown command", ["frobnicate"], {}, "invalid choice: 'frobnicate'"),
    (
        "pin into a folder",
        ["env", "pin", "--out", "pins"],
        {"pins/keep": ""},
        "is a folder; name the manifest file",
    ),
    (
        "pin under a file",
        ["env", "pin", "--out", "a-file/env.json"],
        {"a-file": "keep"},
        "cannot be written",
    ),
    (
        "pin to an impossible path",
        ["env", "pin", "--out", "/proc/no-such-dir/env.json"],
        {},
        "cannot be written",
    ),
    (
        "pin over a manifest",
        ["env", "pin", "--out", "env.json"],
        {"env.json": "pinned"},
        "env.json already exists; pass --force",
    ),
    (
        "pin over a lock",
        ["env", "pin", "--out", "env.json"],
        {"env.lock.txt": "pinned"},
        "env.lock.txt already exists",
    ),
    (
        "diff of a missing manifest",
        ["env", "diff", "a.json", "b.json"],
        {},
        "a.json does not exist",
    ),
    (
        "diff of a non-manifest",
        ["env", "diff", "a.json", "a.json"],
        {"a.json": "[1]"},
        "is not a workbench environment manifest",
    ),
    (
        "hf folder without config.json",
        ["run", "--only", "01", "--workload", "hf:ckpt"],
        {"ckpt/model.safetensors": b"weights"},
        "has no config.json (expected a folder written by save_pretrained)",
    ),
    (
        "hf folder without weights",
        ["run", "--only", "01", "--workload", "hf:ckpt"],
        {"ckpt/config.json": '{"model_type": "gpt2"}'},
        "has config.json but no weights",
    ),
    (
        "hf config.json not json",
        ["run", "--only", "01", "--workload", "hf:ckpt"],
        {"ckpt/config.json": "{not json", "ckpt/model.safetensors": b"weights"},
        "config.json could not be read",
    ),
    (
        "hf task not inferable",
        ["run", "--only", "01", "--workload", "hf:ckpt"],
        {
            "ckpt/config.json": '{"model_type": "bert", "architectures": ["BertModel"]}',
            "ckpt/model.safetensors": b"weights",
        },
        "cannot be inferred from architecture BertModel; supported tasks are causal-lm",
    ),
    (
        "hf unknown task",
        ["run", "--only", "01", "--workload", "hf:gpt2", "-p", "task=translation"],
        {},
        "Task 'translation' is not one of causal-lm",
    ),
    (
        "hf unknown model type",
        ["run", "--only", "01", "--workload", "hf:gtp2"],
        {},
        "is neither a folder nor a transformers model type (did you mean gpt2?)",
    ),
    (
        "hf nothing after the prefix",
        ["run", "--only", "01", "--workload", "hf:"],
        {},
        "name a checkpoint folder or a model type after hf:",
    ),
    (
        "hf folder asking to run its own code",
        ["run", "--only", "01", "--workload", "hf:ckpt"],
        {
            "ckpt/config.json": '{"model_type": "evil", '
            '"auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}}',
            "ckpt/configuration_evil.py": "open('ran', 'w').write('code ran')",
            "ckpt/model.safetensors": b"weights",
        },
        "runs no code from a model folder unless you read it and pass -p trust_remote_code=true",
    ),
    (
        "rehearse whose runs refuse their options",
        [
            "rehearse",
            "--pinned",
            sys.executable,
            "--candidate",
            sys.executable,
            "--only",
            "42",
            "--out",
            "r",
        ],
        {},
        "--only '42' names no notebook",
    ),
    (
        "hf config with a million layers",
        ["run", "--only", "01", "--workload", "hf:gpt2", "-p", "hf_config=n_layer=1000000"],
        {},
        "hf_config n_layer=1000000 is over the 256 layers the workbook builds",
    ),
    (
        "hf config key misspelt",
        ["run", "--only", "01", "--workload", "hf:gpt2", "-p", "hf_config=n_layers=1"],
        {},
        "is not a field of GPT2Config (did you mean n_layer?)",
    ),
    (
        "hf config without a value",
        ["run", "--only", "01", "--workload", "hf:gpt2", "-p", "hf_config=n_layer"],
        {},
        "hf_config",
    ),
    (
        "hf config value of another type",
        ["run", "--only", "01", "--workload", "hf:gpt2", "-p", "hf_config=n_layer=two"],
        {},
        "GPT2Config.n_layer holds int values (12), not str",
    ),
    (
        "hf config that builds no model",
        ["run", "--only", "01", "--workload", "hf:gpt2", "-p", "hf_config=n_embd=32,n_head=3"],
        {},
        "GPT2Config with these values builds no model",
    ),
    (
        "hf sequence longer than the positions",
        [
            "run",
            "--only",
            "01",
            "--workload",
            "hf:gpt2",
            "-p",
            "hf_config=n_positions=8",
            "-p",
            "sequence_length=16",
        ],
        {},
        "sequence_length 16 is longer than the model's 8 positions",
    ),  # fmt: skip
    (
        "native table with other columns",
        ["tables", "import-native", "t.md", "--out", "tables"],
        {"t.md": "| Name | Value |\n|---|---|\n| torch.add | Y |\n"},
        "not the ones TorchNeuron's compatibility table has",
    ),
    (
        "native table empty",
        ["tables", "import-native", "t.md", "--out", "tables"],
        {"t.md": ""},
        "holds no markdown table",
    ),
    (
        "native table with a 30 KB Release line",
        ["tables", "import-native", "t.md", "--out", "tables"],
        {"t.md": "Release" + " " * 30_000 + "x\n"},
        "holds no markdown table",
    ),
    (
        "native table without a release",
        ["tables", "import-native", "t.md", "--out", "tables"],
        {"t.md": "| API | Support |\n|---|---|\n| torch.add | Y |\n"},
        "give it with --release",
    ),
    (
        "native table missing",
        ["tables", "import-native", "missing.md"],
        {},
        "missing.md cannot be read",
    ),
    (
        "config alias bomb",
        ["run", "--only", "00", "--config", "c.yaml"],
        {"c.yaml": ALIAS_BOMB_WIDE},
        "values once expanded",
    ),
    (
        "config with many aliases",
        ["run", "--only", "00", "--config", "c.yaml"],
        {"c.yaml": ALIAS_BOMB_MANY},
        "more than 64 YAML aliases",
    ),
    (
        "config nested 20,000 deep",
        ["run", "--only", "00", "--config", "c.yaml"],
        {"c.yaml": DEEP_FLOW_YAML},
        "nests deeper than",
    ),
    (
        "config over 1 MiB",
        ["run", "--only", "00", "--config", "c.yaml"],
        {"c.yaml": "# " + "x" * (1 << 20) + "\n"},
        "over the 1 MiB this reads",
    ),
    (
        "parameter value alias bomb",
        ["run", "--only", "01", "-p", "kinds=" + ALIAS_BOMB_WIDE.replace("\n", "; ")],
        {},
        "Parameter 'kinds'",
    ),
    (
        "matrix alias bomb",
        ["matrix", "m.yaml"],
        {"m.yaml": ALIAS_BOMB_WIDE + "items:\n  - workload: seed-mlp\n"},
        "values once expanded",
    ),
    (
        "matrix nested 20,000 deep",
        ["matrix", "m.yaml"],
        {"m.yaml": DEEP_FLOW_YAML},
        "nests deeper than",
    ),
    (
        "matrix not UTF-8",
        ["matrix", "m.yaml"],
        {"m.yaml": b"items:\n  - workload: \xff\n"},
        "is not UTF-8 text",
    ),
    (
        "matrix parameter named by a number",
        ["matrix", "m.yaml"],
        {"m.yaml": "items:\n  - workload: seed-mlp\n    parameters: {3: 4}\n"},
        "each name a word",
    ),
    (
        "measured table from another result",
        ["tables", "save-measured", "r.json", "--out", "tables"],
        {"r.json": '{"notebook": "01_baseline"}'},
        "is not a result of notebook 02",
    ),
    (
        "compare summary nested 100,000 deep",
        ["compare", "a", "b"],
        {"a/summary.json": DEEP_JSON, "b/summary.json": DEEP_JSON},
        "a/summary.json nests deeper than",
    ),
    (
        "compare result outside the run folder",
        ["compare", "a", "b"],
        {
            "a/summary.json": '{"schema_version": 1, "notebooks": '
            '[{"notebook": "01_baseline", "status": "ok", "result": "/etc/passwd"}]}',
            "b/summary.json": "{}",
        },
        "names result '/etc/passwd', which is not a file name inside the run folder",
    ),
    (
        "compare summary field of the wrong type",
        ["compare", "a", "b"],
        {"a/summary.json": '{"schema_version": 1, "workload": 7}', "b/summary.json": "{}"},
        "a/summary.json: workload is 7; expected a string",
    ),
    (
        "compare result with a number out of range",
        ["compare", "a", "b"],
        {"a/summary.json": '{"schema_version": 1, "seconds": 1e400}', "b/summary.json": "{}"},
        "a/summary.json is not readable JSON (number 1e400 is out of range)",
    ),
    (
        "env diff manifest with imports of the wrong type",
        ["env", "diff", "a.json", "a.json"],
        {
            "a.json": '{"kind": "workbench.environment-manifest", "schema_version": 1, '
            '"imports": "abc"}'
        },
        "Manifest a.json: imports must be a mapping",
    ),
    (
        "env diff manifest with packages of the wrong type",
        ["env", "diff", "a.json", "a.json"],
        {
            "a.json": '{"kind": "workbench.environment-manifest", "schema_version": 1, '
            '"packages": {"torch": 5}}'
        },
        "Manifest a.json: packages.torch must be a string",
    ),
    (
        "env diff manifest nested 100,000 deep",
        ["env", "diff", "a.json", "a.json"],
        {"a.json": DEEP_JSON},
        "Manifest a.json nests deeper than",
    ),
    (
        "export record nested 100,000 deep",
        ["export", "w"],
        {"w/open.json": DEEP_JSON, "w/00_environment.ipynb": "{}"},
        "open.json nests deeper than",
    ),
    (
        "export copy nested 100,000 deep",
        ["export", "w"],
        {"w/open.json": OPENED, "w/00_environment.ipynb": DEEP_JSON},
        "00_environment.ipynb nests deeper than",
    ),
    (
        "export cell timing of the wrong type",
        ["export", "w"],
        {"w/open.json": OPENED, "w/00_environment.ipynb": TIMED_WRONG},
        "00_environment.ipynb: cells[0].metadata.execution must be a mapping",
    ),
    (
        "collect claim nested 100,000 deep",
        ["collect", "root"],
        {"root/workbench-matrix.json": DEEP_JSON},
        "workbench-matrix.json nests deeper than",
    ),
    (
        "measured table nested 100,000 deep",
        ["tables", "save-measured", "r.json", "--out", "tables"],
        {"r.json": DEEP_JSON},
        "Result file r.json nests deeper than",
    ),
]


def _create(root, files):
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _snapshot(root):
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in root.rglob("*")
    }


@pytest.mark.parametrize(
    ("args", "files", "phrase"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys, args, files, phrase):
    monkeypatch.chdir(tmp_path)
    _create(tmp_path, files)
    before = _snapshot(tmp_path)
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("workbench: error: "), err
    assert phrase in lines[0]
    assert "Traceback" not in err and "\x1b" not in err and "\u202e" not in err
    assert _snapshot(tmp_path) == before, "bad input writes nothing and changes nothing"


def test_the_table_counts_every_class():
    assert len(BAD_INPUTS) >= 60
    assert len({c[0] for c in BAD_INPUTS}) == len(BAD_INPUTS)


def test_hardening_md_lists_exactly_these_cases():
    """tests/e2e/HARDENING.md is what a reader checks: its bad-input table names every case here,
    and nothing else."""
    text = (Path(__file__).parent / "HARDENING.md").read_text()
    section = text.split("## Bad input")[1].split("## Faults")[0]
    rows = [
        line.split("|")[1].strip()
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| case")
    ]
    assert sorted(rows) == sorted(c[0] for c in BAD_INPUTS)
    assert f"{len(BAD_INPUTS)} cases" in text


def test_pin_replaces_a_manifest_only_with_force(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["env", "pin", "--out", "env.json", "--no-hashes"]) == 0
    first = (tmp_path / "env.json").read_text()
    assert main(["env", "pin", "--out", "env.json", "--no-hashes"]) == 2
    assert (tmp_path / "env.json").read_text() == first, "the pinned manifest is kept"
    assert main(["env", "pin", "--out", "env.json", "--force", "--no-hashes"]) == 0
    assert json.loads((tmp_path / "env.json").read_text())["kind"] == json.loads(first)["kind"]
    assert "pass --force" in capsys.readouterr().err
