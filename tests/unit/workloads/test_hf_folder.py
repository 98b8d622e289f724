"""A checkpoint folder checked before transformers reads it: code shipped in the folder runs only
when the user opts in (and nothing ever prompts), sizes are bounded before anything is built,
config.json is read within its bound, and a relative `hf:./folder` names the folder the command
was typed in."""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import pytest

from tests.fixtures.hf_checkpoints import save_remote_code_checkpoint, save_tiny_checkpoints
from workbench.errors import BadInput
from workbench.workloads.hf_folder import (
    CONFIG_JSON_MAX_BYTES,
    absolute_spec,
    check_sizes,
    read_config_json,
)

transformers = pytest.importorskip("transformers", reason="transformers is the hf extra")

from workbench.planning.hf_config import load_hf_model  # noqa: E402
from workbench.workloads.huggingface import HfOptions, load_hf_workload  # noqa: E402


@pytest.fixture(autouse=True)
def no_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' "Do you wish to run the custom code? [y/N]" goes through input(): any call
    fails the test, as stdin must never be read."""

    def prompt(*args: object) -> str:
        raise AssertionError(f"stdin was read: {args}")

    monkeypatch.setattr(builtins, "input", prompt)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_checkpoints(tmp_path_factory.mktemp("hf"))["gpt2"]


@pytest.fixture
def remote(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "code-ran"
    return save_remote_code_checkpoint(tmp_path / "ckpt", marker), marker


def test_a_folder_asking_for_its_own_code_is_refused_and_its_code_never_runs(remote) -> None:
    folder, marker = remote
    with pytest.raises(BadInput) as refused:
        load_hf_workload(f"hf:{folder}", HfOptions())
    message = str(refused.value)
    assert "asks to run Python code shipped with the model" in message
    assert "auto_map" in message and "-p trust_remote_code=true" in message
    assert "\n" not in message
    assert not marker.exists()


def test_a_stray_modeling_file_is_refused_even_without_auto_map(remote) -> None:
    folder, marker = remote
    config = json.loads((folder / "config.json").read_text())
    del config["auto_map"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(BadInput, match="holds 'configuration_tiny.py'"):
        load_hf_workload(f"hf:{folder}", HfOptions())
    assert not marker.exists()


def test_the_folder_code_runs_when_the_user_opts_in(remote) -> None:
    folder, marker = remote
    workload = load_hf_workload(f"hf:{folder}", HfOptions(trust_remote_code=True))
    model = workload.model_factory()
    assert type(model).__name__ == "TinyRemoteForCausalLM"
    assert marker.read_text() == "configuration ran"


def test_the_planner_refuses_a_folder_asking_for_its_own_code(remote) -> None:
    folder, marker = remote
    with pytest.raises(BadInput, match="runs no code from a model folder here"):
        load_hf_model(f"hf:{folder}")
    assert not marker.exists()


def test_a_plain_checkpoint_folder_loads_without_any_opt_in(gpt2: Path) -> None:
    assert load_hf_model(f"hf:{gpt2}").sizes["layers"] == 2
    assert type(load_hf_workload(f"hf:{gpt2}", HfOptions()).model_factory()).__name__ == (
        "GPT2LMHeadModel"
    )


def _with_config(gpt2: Path, folder: Path, **changes: object) -> Path:
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(gpt2 / "model.safetensors")
    config = {**json.loads((gpt2 / "config.json").read_text()), **changes}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"n_layer": 1_000_000}, "n_layer=1000000 is over the 256 layers"),
        ({"vocab_size": 10**9}, "over the 1,048,576 vocabulary entries"),
        ({"n_embd": 1 << 20}, "over the 65,536 hidden units"),
        ({"text_config": {"num_hidden_layers": 5000}}, "text_config.num_hidden_layers=5000"),
    ],
)
def test_sizes_over_their_bound_are_refused_before_anything_is_built(
    gpt2: Path, tmp_path: Path, changes: dict[str, object], named: str
) -> None:
    folder = _with_config(gpt2, tmp_path / "big", **changes)
    for load in (
        lambda: load_hf_workload(f"hf:{folder}", HfOptions()),
        lambda: load_hf_model(f"hf:{folder}"),
    ):
        with pytest.raises(BadInput, match=named):
            load()


def test_an_override_over_its_bound_is_refused_and_one_within_builds() -> None:
    with pytest.raises(BadInput, match="hf_config n_layer=1000000 is over the 256 layers"):
        load_hf_workload("hf:gpt2", HfOptions(config="n_layer=1000000"))
    built = load_hf_workload("hf:gpt2", HfOptions(config="n_layer=1,n_embd=32,n_head=2"))
    assert built.model_factory().config.n_layer == 1


def test_an_integer_too_long_to_print_is_one_sentence(gpt2: Path, tmp_path: Path) -> None:
    folder = tmp_path / "huge"
    folder.mkdir()
    (folder / "config.json").write_text('{"n_layer": ' + "9" * 5000 + "}")
    with pytest.raises(BadInput, match="is not readable JSON"):
        read_config_json("hf:huge", folder)
    with pytest.raises(BadInput, match=r"\(a 33,\d{3}-bit number\) is over the 256 layers"):
        check_sizes("hf:x", {"n_layer": 10**10000}, "config.json")
    check_sizes("hf:x", {"n_layer": 126, "vocab_size": 262_144, "image_size": [224, 224]}, "c")


def test_a_config_json_over_its_bound_is_refused_unread(tmp_path: Path) -> None:
    folder = tmp_path / "sparse"
    folder.mkdir()
    with open(folder / "config.json", "wb") as handle:  # sparse: no disk is used
        handle.truncate(CONFIG_JSON_MAX_BYTES + 1)
    with pytest.raises(BadInput, match="over the 16 MiB this reads"):
        read_config_json("hf:sparse", folder)


def test_a_model_larger_than_the_machine_is_refused_before_its_weights_are_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The machine's memory is faked at 16 MiB (os.sysconf): the tiny model fits it, the
    12-layer default GPT-2 (124 M parameters, 474 MiB in fp32) does not."""
    real_sysconf = os.sysconf
    monkeypatch.setattr(
        os, "sysconf", lambda name: 4096 if name == "SC_PHYS_PAGES" else real_sysconf(name)
    )
    load_hf_workload("hf:gpt2", HfOptions(config="n_layer=1,n_embd=32,n_head=2"))
    with pytest.raises(BadInput, match=r"need 0\.5 GiB for their fp32 weights alone"):
        load_hf_workload("hf:gpt2", HfOptions())


def test_a_relative_folder_is_resolved_against_the_folder_the_command_was_typed_in(
    tmp_path: Path,
) -> None:
    (tmp_path / "ckpt").mkdir()
    assert absolute_spec("hf:./ckpt", tmp_path) == f"hf:{tmp_path / 'ckpt'}"
    assert absolute_spec("hf:ckpt", tmp_path) == f"hf:{tmp_path / 'ckpt'}"
    assert absolute_spec("hf:gpt2", tmp_path) == "hf:gpt2"
    assert absolute_spec("hf:/abs/ckpt", tmp_path) == "hf:/abs/ckpt"
    assert absolute_spec("tiny-cnn", tmp_path) == "tiny-cnn"


def test_a_password_in_a_workload_path_is_scrubbed_from_the_run_name(
    gpt2: Path, tmp_path: Path
) -> None:
    """The name becomes the run folder's, the console's and summary.json's."""
    from workbench.runner import RunRequest, check_request

    folder = tmp_path / "bob:hunter2pw@store" / "ckpt"
    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (folder / name).symlink_to(gpt2 / name)
    checked = check_request(RunRequest(workload=f"hf:{folder}", only=["01"]))
    assert "hunter2pw" not in checked.workload_name
    assert checked.workload_name.endswith("@store/ckpt")  # the rest of the path stays


class _RunsCode:
    """Pickled, it would call `open(marker, "w")` on load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (str(self.marker), "w"))


def test_a_legacy_pickle_holding_more_than_tensors_is_one_sentence_and_never_runs(
    gpt2: Path, tmp_path: Path
) -> None:
    """Must refuse in one sentence (torch's own refusal is a paragraph), its code never run."""
    import safetensors.torch
    import torch

    folder = tmp_path / "legacy"
    folder.mkdir()
    (folder / "config.json").write_text((gpt2 / "config.json").read_text())
    weights = safetensors.torch.load_file(str(gpt2 / "model.safetensors"))
    marker = tmp_path / "code-ran"
    torch.save({**weights, "extra": _RunsCode(marker)}, folder / "pytorch_model.bin")
    with pytest.raises(BadInput) as refused:
        load_hf_workload(f"hf:{folder}", HfOptions())
    message = str(refused.value)
    assert "are a pickle that holds more than tensors" in message and "\n" not in message
    assert "safetensors" in message and not marker.exists()
