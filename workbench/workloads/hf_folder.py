"""A checkpoint folder as the workbook checks it before transformers reads it: where it is, its
config.json read within bounds, whether it asks to run its own code, and sizes that can be built.

Code: transformers runs Python shipped in a model folder (`configuration_*.py`,
`modeling_*.py`, named by `auto_map` in config.json) when asked to trust it, and otherwise, where
stdin is a terminal, asks "Do you wish to run the custom code? [y/N]" and waits. Here a folder
that asks for its own code is refused with one sentence unless `-p trust_remote_code=true` was
given, and every transformers call is passed `trust_remote_code` explicitly, so that prompt never
runs and stdin is never read.

Sizes: a config is a few numbers that decide how much is built. `n_layer` = 10^6 makes even a
shapes-only (meta device) build run for hours, and a vocabulary of 10^9 is stopped only by the
allocator. Each size has a bound far above every published model (named beside it) and is
checked before anything is built, in the folder's config.json as read, in `-p hf_config`
overrides, and in the config transformers made of them. This module imports neither torch nor
transformers, so the command line can use it before any kernel starts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from workbench.errors import BadInput, describe_error
from workbench.safe_load import load_json, read_bounded, shown
from workbench.workloads import HF_PREFIX

# Real config.json files are kilobytes; the largest hold a label table of about 22,000 classes
# (ImageNet-22k heads), under 1 MiB. Bigger is not a config, and is refused unread.
CONFIG_JSON_MAX_BYTES = 16 << 20

# (config keys, bound, what it is). Largest published values for scale: 126 layers and a hidden
# size of 16,384 (Llama 3.1 405B), 53,248 intermediate (the same), vocabularies of 262,144 (Gemma
# 3), 10,485,760 positions (Llama 4 Scout), 256 routed experts (DeepSeek-V3). A shapes-only build
# of 256 GPT-2 blocks takes about 3 s here; of 1,024, 13 s.
SIZE_BOUNDS: tuple[tuple[tuple[str, ...], int, str], ...] = (
    (
        (
            "num_hidden_layers",
            "n_layer",
            "n_layers",
            "num_layers",
            "encoder_layers",
            "decoder_layers",
            "num_decoder_layers",
        ),
        256,
        "layers",
    ),
    (("vocab_size",), 1 << 20, "vocabulary entries"),
    (("hidden_size", "n_embd", "d_model", "embed_dim"), 1 << 16, "hidden units"),
    (
        (
            "intermediate_size",
            "n_inner",
            "ffn_dim",
            "d_ff",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "moe_intermediate_size",
        ),
        1 << 18,
        "intermediate units",
    ),
    (
        (
            "num_attention_heads",
            "n_head",
            "num_heads",
            "num_key_value_heads",
            "encoder_attention_heads",
            "decoder_attention_heads",
        ),
        1 << 12,
        "attention heads",
    ),
    (
        ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
        1 << 24,
        "positions",
    ),
    (("num_experts", "num_local_experts", "n_routed_experts"), 1 << 12, "experts"),
    (("image_size",), 1 << 14, "pixels a side"),
)
_BOUND_OF = {key: (limit, what) for keys, limit, what in SIZE_BOUNDS for key in keys}
# Files transformers imports from a folder when it trusts the folder's code.
CODE_FILE_PATTERNS = ("configuration_*.py", "modeling_*.py", "tokenization_*.py")


def absolute_spec(spec: str, cwd: Path | None = None) -> str:
    """`hf:./folder` (and any relative folder that exists) as an absolute path, resolved against
    the folder the command was typed in: the notebooks run with another working folder."""
    if not spec.startswith(HF_PREFIX):
        return spec
    name = spec.removeprefix(HF_PREFIX).strip()
    if not name:
        return spec
    path = Path(name).expanduser()
    if path.is_absolute():
        return spec
    base = cwd if cwd is not None else Path.cwd()
    if name.startswith(".") or (base / path).exists():
        return HF_PREFIX + os.path.abspath(base / path)
    return spec


def read_config_json(spec: str, folder: Path) -> dict[str, Any]:
    """The folder's config.json as a mapping, read within CONFIG_JSON_MAX_BYTES."""
    path = folder / "config.json"
    try:
        data = load_json(read_bounded(path, "File", CONFIG_JSON_MAX_BYTES), str(path))
    except BadInput as exc:
        raise BadInput(
            f"Workload {spec!r}: config.json could not be read: {str(exc).rstrip('.')}."
        ) from None
    if not isinstance(data, dict):
        raise BadInput(
            f"Workload {spec!r}: config.json could not be read: it holds a JSON "
            f"{type(data).__name__}, not an object."
        )
    return data


def remote_code_request(folder: Path, config: Mapping[str, Any]) -> str | None:
    """What in the folder asks transformers to run the folder's own code, or None."""
    auto_map = config.get("auto_map")
    if auto_map:
        entries = auto_map.items() if isinstance(auto_map, dict) else [("auto_map", auto_map)]
        first = ", ".join(f"{key} -> {shown(value, 60)}" for key, value in list(entries)[:2])
        return f"its config.json's auto_map names code to import ({first})"
    for pattern in CODE_FILE_PATTERNS:
        found = sorted(path.name for path in folder.glob(pattern))
        if found:
            return f"it holds {shown(found[0], 60)}, a model's own code"
    return None


def refuse_remote_code(
    spec: str, folder: Path, config: Mapping[str, Any], trusted: bool, flag: str | None
) -> None:
    """One sentence for a folder that asks to run its own code, unless the user trusted it
    with `flag` (None where the command offers no such flag)."""
    request = remote_code_request(folder, config)
    if request and not trusted:
        unless = f"unless you read it and pass {flag}" if flag else "here"
        raise BadInput(
            f"Workload {spec!r}: {folder} asks to run Python code shipped with the model "
            f"({request}); the workbook runs no code from a model folder {unless}."
        )


def _sizes(data: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(dotted path, key, value) of every bounded key, in nested sub-configs too (text_config)."""
    stack: list[tuple[Any, str, int]] = [(data, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if not isinstance(item, Mapping) or depth > 8:
            continue
        for key, value in item.items():
            dotted = f"{where}.{key}" if where else str(key)
            if key in _BOUND_OF:
                yield dotted, str(key), value
            elif isinstance(value, Mapping):
                stack.append((value, dotted, depth + 1))


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value[:64]:
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                yield item


def _number_text(number: float) -> str:
    # Python refuses to print an int of more than 4,300 digits; a size that long is named by
    # its length.
    if isinstance(number, int) and number.bit_length() > 64:
        return f"(a {number.bit_length():,}-bit number)"
    return shown(number, 30)


def check_sizes(spec: str, values: Mapping[str, Any], where: str) -> None:
    """One sentence, with the bound, for the first size over its bound in `values`."""
    for dotted, key, value in _sizes(values):
        limit, what = _BOUND_OF[key]
        for number in _numbers(value):
            if number != number or number > limit:  # NaN is no size either
                raise BadInput(
                    f"Workload {spec!r}: {where} {dotted}={_number_text(number)} is over the "
                    f"{limit:,} {what} the workbook builds; set a size a machine can hold."
                )


def folder_config(
    spec: str, folder: Path, transformers: Any, trusted: bool, flag: str | None
) -> Any:
    """The transformers config of a checkpoint folder, after the checks above on its
    config.json as read: its own code refused unless `trusted` (`flag` is how a user trusts
    it), and its sizes bounded. `transformers` is the module, imported by the caller."""
    raw = read_config_json(spec, folder)
    refuse_remote_code(spec, folder, raw, trusted, flag)
    check_sizes(spec, raw, "config.json")
    try:
        # trust_remote_code is always given: left None, transformers asks on stdin.
        return transformers.AutoConfig.from_pretrained(
            folder, local_files_only=True, trust_remote_code=trusted
        )
    except Exception as exc:
        raise BadInput(
            f"Workload {spec!r}: config.json could not be read: {describe_error(exc)}."
        ) from None
