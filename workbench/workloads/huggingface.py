"""Hugging Face models as they come: `hf:FOLDER` (a saved checkpoint) or `hf:MODEL_TYPE` (a
random-init model built offline from `AutoConfig.for_model`), no wrapper code.

The task comes from the checkpoint's architecture (GPT2LMHeadModel -> causal-lm) or, for a model
type, from which task heads transformers has for it; `-p task=` overrides either. Inputs are
made from the model's own config (vocabulary, max positions, image size, label count), passed as
keyword arguments with `labels`, and the loss is the one the model computes itself, as in a
Hugging Face training loop. transformers is imported here only, and never reaches the network:
folders load with `local_files_only=True`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from workbench.errors import BadInput, describe_error, did_you_mean
from workbench.workloads import HF_PREFIX
from workbench.workloads.contract import (
    DEFAULT_SEED,
    TASK_CLASSIFICATION,
    TASK_LANGUAGE_MODEL,
    Batch,
    Workload,
    accuracy,
    on_primary_output,
    seeded,
)
from workbench.workloads.copies import independent_copy
from workbench.workloads.hf_fidelity import (
    PositionLimit,
    missing_sentence,
    model_share,
    position_limit,
    unexpected_missing,
)
from workbench.workloads.hf_folder import check_sizes, folder_config

CAUSAL_LM = "causal-lm"
MASKED_LM = "masked-lm"
SEQUENCE_CLASSIFICATION = "sequence-classification"
IMAGE_CLASSIFICATION = "image-classification"


@dataclass(frozen=True)
class HfTask:
    name: str
    auto_class: str  # the transformers Auto class that builds the model with this head
    mapping: str  # transformers' model_type -> class-name table for that Auto class
    suffixes: tuple[str, ...]  # architecture names that end so have this task
    text: bool  # token inputs (else pixel values)


TASKS: dict[str, HfTask] = {
    t.name: t
    for t in (
        HfTask(
            CAUSAL_LM,
            "AutoModelForCausalLM",
            "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
            ("ForCausalLM", "LMHeadModel"),
            True,
        ),
        HfTask(
            MASKED_LM,
            "AutoModelForMaskedLM",
            "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
            ("ForMaskedLM",),
            True,
        ),
        HfTask(
            SEQUENCE_CLASSIFICATION,
            "AutoModelForSequenceClassification",
            "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
            ("ForSequenceClassification",),
            True,
        ),
        HfTask(
            IMAGE_CLASSIFICATION,
            "AutoModelForImageClassification",
            "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
            ("ForImageClassification",),
            False,
        ),
    )
}
# For a bare model type with several heads, the first one it has, in this order: an encoder
# with a masked-LM head (BERT) is pretrained that way; a decoder (GPT-2, Llama) as a causal LM.
TYPE_TASK_ORDER = (MASKED_LM, CAUSAL_LM, IMAGE_CLASSIFICATION, SEQUENCE_CLASSIFICATION)

DEFAULT_BATCH_SIZE = 8
DEFAULT_SEQUENCE_LENGTH = 128
MASKED_SHARE = 0.15  # BERT's share of masked positions
IGNORE_INDEX = -100  # transformers' label for "no loss here"
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len")
# A whole model's main input that says it is an audio model, and what that input holds.
AUDIO_INPUTS = {"input_values": "raw waveforms", "input_features": "spectrogram features"}


@dataclass(frozen=True)
class HfOptions:
    """The notebook parameters that shape an hf: workload."""

    task: str = ""
    batch_size: int | None = None
    sequence_length: int | None = None
    image_size: int | None = None
    config: str = ""  # "key=value,key=value" config overrides
    allow_partial_model: bool = False  # measure the part a task keeps (Whisper's decoder)
    trust_remote_code: bool = False  # run the Python a checkpoint folder ships (auto_map)


def import_transformers() -> Any:
    """transformers, imported on first use (an optional extra), its progress bars and info
    lines off; one sentence where it is not installed."""
    try:
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise BadInput(
            "hf: workloads need Hugging Face transformers, which is not installed: "
            "pip install 'workbench[hf]'."
        ) from None
    # Every model build loads the checkpoint again; its progress bar and info lines would
    # repeat in every notebook. Warnings and errors still show.
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    return transformers


def parse_overrides(text: str) -> dict[str, Any]:
    """'n_layer=2,n_embd=64,tie_word_embeddings=false' -> typed values (read as YAML scalars)."""
    overrides: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"cannot read {part!r} as key=value")
        try:
            overrides[key.strip()] = yaml.safe_load(value.strip())
        except yaml.YAMLError:
            overrides[key.strip()] = value.strip()
    return overrides


def apply_overrides(spec: str, config: Any, overrides: dict[str, Any]) -> None:
    """`-p hf_config` values set on the config, each checked: a field the config has, a value of
    its kind, one transformers accepts; anything else is BadInput naming it."""
    check_sizes(spec, overrides, "hf_config")
    for key, value in overrides.items():
        if not hasattr(config, key):
            raise BadInput(
                f"Workload {spec!r}: hf_config key {key!r} is not a field of "
                f"{type(config).__name__}{did_you_mean(key, config.to_dict())}."
            )
        current = getattr(config, key)
        if not _same_kind(current, value):
            raise BadInput(
                f"Workload {spec!r}: hf_config {key}={value!r}: {type(config).__name__}.{key} "
                f"holds {type(current).__name__} values ({current!r}), not "
                f"{type(value).__name__}."
            )
        try:
            setattr(config, key, value)
        except Exception as exc:  # transformers validates some fields as they are set
            raise BadInput(
                f"Workload {spec!r}: hf_config {key}={value!r} is refused: {describe_error(exc)}."
            ) from None


def _looks_like_folder(name: str) -> bool:
    return Path(name).expanduser().exists() or "/" in name or name.startswith((".", "~"))


def task_of_architecture(architecture: str) -> str | None:
    for task in TASKS.values():
        if architecture.endswith(task.suffixes):
            return task.name
    return None


def _task_for_type(model_type: str) -> str | None:
    from transformers.models.auto import modeling_auto

    for name in TYPE_TASK_ORDER:
        if model_type in getattr(modeling_auto, TASKS[name].mapping):
            return name
    return None


def _unsupported_task(spec: str, why: str) -> BadInput:
    return BadInput(
        f"Workload {spec!r}: {why}; supported tasks are {', '.join(TASKS)}: "
        "pass one with -p task=NAME."
    )


def _same_kind(current: Any, value: Any) -> bool:
    """Whether an override can replace a config value: numbers for numbers (an int where a
    float is kept is fine), text for text, a flag for a flag; anything for a field left None."""
    if current is None:
        return True
    if isinstance(current, bool) or isinstance(value, bool):
        return isinstance(current, bool) and isinstance(value, bool)
    if isinstance(current, (int, float)):
        return isinstance(value, (int, float)) and not (
            isinstance(current, int) and isinstance(value, float)
        )
    if isinstance(current, str):
        return isinstance(value, str)
    return True


def _max_positions(config: Any) -> int | None:
    for key in _POSITION_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass
class _Source:
    """Where the model comes from: a folder's config and weights, or a config built here."""

    spec: str
    config: Any
    folder: Path | None
    task: HfTask
    task_reason: str
    trust_remote_code: bool = False  # the user opted in to the folder's own code


@dataclass(frozen=True)
class _Found:
    """A config as found, before overrides: from a folder or a model type, with the task its
    architecture or type implies (None where it implies none) and why."""

    config: Any
    folder: Path | None
    inferred: str | None
    reason: str
    architectures: list[str]


def _in_folder(spec: str, folder: Path, options: HfOptions, transformers: Any) -> _Found:
    if not (folder / "config.json").is_file():
        raise BadInput(
            f"Workload {spec!r}: {folder} has no config.json "
            "(expected a folder written by save_pretrained)."
        )
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES):
        raise BadInput(
            f"Workload {spec!r}: {folder} has config.json but no weights "
            "(model.safetensors or pytorch_model.bin)."
        )
    trusted = options.trust_remote_code
    config = folder_config(spec, folder, transformers, trusted, "-p trust_remote_code=true")
    architectures = list(getattr(config, "architectures", None) or [])
    inferred = next(filter(None, map(task_of_architecture, architectures)), None)
    reason = f"from its architecture {architectures[0]}" if architectures else ""
    return _Found(config, folder, inferred, reason, architectures)


def _of_type(spec: str, name: str, transformers: Any) -> _Found:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if name not in CONFIG_MAPPING_NAMES:
        raise BadInput(
            f"Workload {spec!r}: {name!r} is neither a folder nor a transformers model type"
            f"{did_you_mean(name, CONFIG_MAPPING_NAMES)}."
        )
    reason = f"the first head transformers has for model type {name!r}"
    return _Found(transformers.AutoConfig.for_model(name), None, _task_for_type(name), reason, [])


def _resolve(spec: str, options: HfOptions, transformers: Any) -> _Source:
    name = spec.removeprefix(HF_PREFIX).strip()
    if not name:
        raise BadInput(f"Workload {spec!r}: name a checkpoint folder or a model type after hf:.")
    try:
        overrides = parse_overrides(options.config)
    except ValueError as exc:
        raise BadInput(f"Workload {spec!r}: hf_config {exc}.") from None
    if options.task and options.task not in TASKS:
        raise BadInput(
            f"Task {options.task!r}{did_you_mean(options.task, TASKS)} is not one of "
            f"{', '.join(TASKS)}."
        )
    if _looks_like_folder(name):
        found = _in_folder(spec, Path(name).expanduser(), options, transformers)
    else:
        found = _of_type(spec, name, transformers)
    config, reason = found.config, found.reason
    apply_overrides(spec, config, overrides)
    check_sizes(spec, config.to_dict(), "config")
    if options.task:
        task_name, reason = options.task, "set with -p task"
    elif found.inferred:
        task_name = found.inferred
    else:
        _refuse_audio(spec, config, transformers, None)
        architectures = found.architectures
        what = f"architecture {architectures[0]}" if architectures else "its config"
        raise _unsupported_task(spec, f"the task cannot be inferred from {what}")
    _check_task_head(spec, config, TASKS[task_name], transformers)
    return _Source(spec, config, found.folder, TASKS[task_name], reason, options.trust_remote_code)


def _heads_of(model_type: str) -> list[str]:
    from transformers.models.auto import modeling_auto

    return [t.name for t in TASKS.values() if model_type in getattr(modeling_auto, t.mapping)]


def _check_task_head(spec: str, config: Any, task: HfTask, transformers: Any) -> None:
    """A task transformers has no head for is refused here, by what the model is, rather than
    later by a loader that blames the weights."""
    model_type = str(getattr(config, "model_type", ""))
    heads = _heads_of(model_type)
    if task.name in heads:
        return
    # Only a trusted folder gets this far with an auto_map: its own code supplies the head.
    if task.auto_class in (getattr(config, "auto_map", None) or {}):
        return
    _refuse_audio(spec, config, transformers, task)
    has = f"its heads here are {', '.join(heads)}" if heads else "it has none of them"
    raise _unsupported_task(spec, f"model type {model_type!r} has no {task.name} head ({has})")


def _refuse_audio(spec: str, config: Any, transformers: Any, task: HfTask | None) -> None:
    """An audio model (its whole model takes waveforms or spectrogram features) is named as
    such: random token ids or pixels would measure something else than the model."""
    try:
        whole_class = transformers.AutoModel._model_mapping[type(config)]
    except KeyError:  # no base model registered: nothing says it is audio
        return
    takes = getattr(whole_class, "main_input_name", "")
    if takes not in AUDIO_INPUTS:
        return
    fits = f"no {task.name} head fits it" if task else "no text or image task fits it"
    raise BadInput(
        f"Workload {spec!r}: {whole_class.__name__} is an audio model (it takes {takes}, "
        f"{AUDIO_INPUTS[takes]}) and {fits}: hf: workloads feed token ids or images only."
    )


def _prepare_config(source: _Source) -> list[str]:
    """Settings a training step needs whatever the checkpoint says; what changed, for reports."""
    config, changed = source.config, []
    if getattr(config, "use_cache", False):
        # A KV cache in the output is for generation: training steps do not return one.
        config.use_cache = False
        changed.append("use_cache=False")
    if source.task.name == SEQUENCE_CLASSIFICATION and getattr(config, "pad_token_id", 0) is None:
        # Decoder classifiers find each sequence's last token through the pad id; every token
        # here is real, so any id that is not drawn as padding works.
        config.pad_token_id = getattr(config, "eos_token_id", None) or 0
        changed.append(f"pad_token_id={config.pad_token_id}")
    if _is_encoder_decoder(config) and getattr(config, "decoder_start_token_id", None) is None:
        # The decoder's inputs are the labels or input ids shifted right behind this id; T5's
        # own convention starts them with the pad id, which its configs here may not state.
        config.decoder_start_token_id = getattr(config, "pad_token_id", None) or 0
        changed.append(f"decoder_start_token_id={config.decoder_start_token_id}")
    config.return_dict = True
    return changed


def _is_encoder_decoder(config: Any) -> bool:
    return bool(getattr(config, "is_encoder_decoder", False))


@dataclass(frozen=True)
class _Loaded:
    model: nn.Module
    weights: str  # how the weights were found, for the description
    missing: list[str]  # tensors that start from random weights though no new head explains it


def _load_checkpoint(source: _Source, auto: Any) -> _Loaded:
    """The checkpoint's model, and how its weights were found. It is read once, here: weights
    that do not fit the config fail with one sentence, and every later build copies this model
    instead of reading the files again."""
    try:
        # Seeded: a task head the checkpoint lacks gets the same weights in every process.
        with seeded(DEFAULT_SEED):
            model, info = auto.from_pretrained(
                source.folder,
                config=source.config,
                local_files_only=True,
                output_loading_info=True,
                # Mismatched shapes come back in the loading info, so the sentence below can
                # name them (transformers' own error points at a report it logged).
                ignore_mismatched_sizes=True,
                trust_remote_code=source.trust_remote_code,
            )
    except pickle.UnpicklingError:
        # torch's own message is a paragraph; a pickled checkpoint holding objects other than
        # tensors is refused by the weights-only loader, and loading it would run its code.
        raise BadInput(
            f"Workload {source.spec!r}: the weights in {source.folder} are a pickle that holds "
            "more than tensors, which the weights-only loader refuses (loading it would run "
            "code it names): save the checkpoint as safetensors."
        ) from None
    except Exception as exc:
        raise BadInput(
            f"Workload {source.spec!r}: the weights in {source.folder} do not load into "
            f"{auto.__name__} with its config.json: {describe_error(exc)}."
        ) from None
    missing = sorted(info.get("missing_keys") or [])
    mismatched = list(info.get("mismatched_keys") or [])
    total = len(model.state_dict())
    if mismatched or (total and len(missing) > total // 2):
        shown = ", ".join(_key_text(k) for k in (mismatched or missing)[:2])
        raise BadInput(
            f"Workload {source.spec!r}: the weights in {source.folder} do not match its "
            f"config.json ({len(missing)} of {total} tensors missing, {len(mismatched)} of "
            f"another shape, e.g. {shown})."
        )
    architectures = list(getattr(source.config, "architectures", None) or [])
    # A base checkpoint, or another task's, loaded with this task's head: the head starts from
    # seeded random weights, as fine-tuning starts.
    new_head = type(model).__name__ not in architectures
    expected, unexpected = unexpected_missing(missing, str(model.base_model_prefix), new_head)
    weights = "checkpoint weights"
    if expected:
        weights += f", {len(expected)} tensor(s) of a new head newly initialized ({expected[0]}…)"
    if unexpected:
        weights += f", {len(unexpected)} tensor(s) missing from the checkpoint"
    return _Loaded(model, weights, unexpected)


def _build_on_meta(spec: str, build: Callable[[Any], nn.Module], config: Any) -> nn.Module:
    """The model on the meta device (shapes only, no memory, no weights drawn), so a config
    whose fields contradict each other is one sentence now rather than a failed notebook
    later, and the model's shape can be read before any weights are."""
    try:
        with torch.device("meta"):
            return build(config)
    except Exception as exc:
        raise BadInput(
            f"Workload {spec!r}: {type(config).__name__} with these values builds no model: "
            f"{describe_error(exc)}."
        ) from None


def _check_host_memory(spec: str, model: nn.Module) -> None:
    """Refuse, before any weight is drawn or read, a model whose fp32 weights alone (the least a
    build on the host allocates, before gradients and optimizer state) exceed this machine's
    memory: the allocator would otherwise stop it partway, or the kernel be killed."""
    count = sum(p.numel() for p in model.parameters())
    need = 4 * count
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > total:
        raise BadInput(
            f"Workload {spec!r}: {count:,} parameters need {need / 2**30:,.1f} GiB for their "
            f"fp32 weights alone, more than this machine's {total / 2**30:,.1f} GiB of memory; "
            "make it smaller with -p hf_config=..."
        )


def _whole_model(source: _Source, transformers: Any) -> tuple[nn.Module, nn.Module] | None:
    """The config's headless model (AutoModel) and the model the counts are said against: the
    checkpoint's architecture where transformers has it, else the headless one. None where
    transformers registers no headless model for the config."""
    if type(source.config) not in transformers.AutoModel._model_mapping:
        return None
    build = functools.partial(
        transformers.AutoModel.from_config, trust_remote_code=source.trust_remote_code
    )
    base = _build_on_meta(source.spec, build, source.config)
    architectures = list(getattr(source.config, "architectures", None) or [])
    named = getattr(transformers, architectures[0], None) if architectures else None
    if not (isinstance(named, type) and hasattr(named, "_from_config")):
        return base, base
    return base, _build_on_meta(source.spec, named._from_config, source.config)


def _check_whole_model(
    source: _Source, task_model: nn.Module, transformers: Any, allow_partial: bool
) -> list[str]:
    """Refuse a task whose model leaves out part of the config's model, unless asked for; the
    attention every report then carries, with the parameter counts."""
    wholes = _whole_model(source, transformers)
    if wholes is None:
        return []
    share = model_share(task_model, *wholes)
    if not share.partial:
        return []
    if not allow_partial:
        raise BadInput(
            f"Workload {source.spec!r}: task {source.task.name} builds only part of the model: "
            f"{share.sentence()}; choose a task that keeps the whole model, or pass "
            "-p allow_partial_model=true to measure that part alone."
        )
    return [f"partial model (allow_partial_model): {share.sentence()}"]


def _key_text(key: Any) -> str:
    """A missing key as its name; a mismatched one, (name, checkpoint shape, model shape) in
    transformers' loading info, with both shapes."""
    if isinstance(key, tuple) and len(key) == 3:
        name, stored, wanted = key
        return f"{name} is {list(stored)} in the checkpoint, {list(wanted)} by the config"
    return str(key)


def _takes(model_class: Any, argument: str) -> bool:
    try:
        return argument in inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return False


def shifted_perplexity(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """exp(mean cross-entropy of each position's logits against the next token)."""
    shifted = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    loss = nn.functional.cross_entropy(shifted, targets[:, 1:].reshape(-1))
    return float(math.exp(loss.item()))


def shifted_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1)
    )


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
    )


def masked_perplexity(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """exp(mean cross-entropy over the masked positions only)."""
    return float(math.exp(masked_cross_entropy(logits.float(), targets).item()))


def _closing_token(spec: str, task: HfTask, config: Any) -> int | None:
    """The token every sequence must end with, where the model needs one: encoder-decoder
    classifiers (BART, T5) read each sequence at its last end-of-sequence token and refuse a
    batch whose samples hold none, or different counts of it."""
    if task.name != SEQUENCE_CLASSIFICATION or not _is_encoder_decoder(config):
        return None
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, bool) or not isinstance(eos, int):
        raise BadInput(
            f"Workload {spec!r}: {type(config).__name__} classifies each sequence at its "
            f"end-of-sequence token, but its eos_token_id is {eos!r}: set one with "
            "-p hf_config=eos_token_id=ID."
        )
    return eos


def _draw_tokens(
    vocab: int, shape: tuple[int, int], generator: torch.Generator, closing: int | None
) -> torch.Tensor:
    if closing is None:
        return torch.randint(vocab, shape, generator=generator)
    # Every id but the closing one, then the closing one last. It opens each sample too, so a
    # prefix of the batch (notebook 02 halves the sequence to test shape stability) still
    # holds the same count in every sample.
    ids = torch.randint(vocab - 1, shape, generator=generator)
    ids += (ids >= closing).long()
    ids[:, 0] = closing
    ids[:, -1] = closing
    return ids


def _text_batches(
    task: HfTask, config: Any, sequence_length: int, with_mask: bool, closing: int | None
) -> Callable[[int, torch.Generator], Batch]:
    vocab = int(config.vocab_size)
    num_labels = int(getattr(config, "num_labels", 2))
    mask_id = getattr(config, "mask_token_id", None)
    mask_id = int(mask_id) if mask_id is not None else vocab - 1
    masked_count = max(1, round(MASKED_SHARE * sequence_length))

    def make(size: int, generator: torch.Generator) -> Batch:
        ids = _draw_tokens(vocab, (size, sequence_length), generator, closing)
        inputs: dict[str, torch.Tensor] = {"input_ids": ids}
        if with_mask:
            inputs["attention_mask"] = torch.ones_like(ids)
        if task.name == CAUSAL_LM:
            labels = ids.clone()
        elif task.name == MASKED_LM:
            # The same number of masked positions in every sample, so the loss's mean over
            # masked tokens equals the mean of per-micro-batch means (the accumulation check).
            scores = torch.rand((size, sequence_length), generator=generator)
            chosen = scores.argsort(dim=1)[:, :masked_count]
            labels = torch.full_like(ids, IGNORE_INDEX)
            labels.scatter_(1, chosen, ids.gather(1, chosen))
            inputs["input_ids"] = ids.scatter(1, chosen, mask_id)
        else:
            labels = torch.randint(num_labels, (size,), generator=generator)
        inputs["labels"] = labels
        return inputs, labels

    return make


def _image_batches(config: Any, image_size: int) -> Callable[[int, torch.Generator], Batch]:
    channels = int(getattr(config, "num_channels", 3))
    num_labels = int(getattr(config, "num_labels", 2))

    def make(size: int, generator: torch.Generator) -> Batch:
        pixels = torch.randn((size, channels, image_size, image_size), generator=generator)
        labels = torch.randint(num_labels, (size,), generator=generator)
        return {"pixel_values": pixels, "labels": labels}, labels

    return make


def _sequence_length(spec: str, options: HfOptions, limit: PositionLimit | None) -> int:
    if not options.sequence_length:
        return min(DEFAULT_SEQUENCE_LENGTH, limit.tokens if limit else DEFAULT_SEQUENCE_LENGTH)
    if limit and options.sequence_length > limit.tokens:
        raise BadInput(
            f"Workload {spec!r}: sequence_length {options.sequence_length} is longer than "
            f"{limit.reason}."
        )
    return options.sequence_length


@dataclass(frozen=True)
class _Inputs:
    """How batches are drawn for the model's task, and what they hold."""

    batches: Callable[[int, torch.Generator], Batch]
    sequence_length: int | None  # tokens per sample; None for images
    limit: PositionLimit | None  # the model's own longest sequence, for text
    shape: str  # the batch's shape in words, for the description


def _inputs(
    spec: str, options: HfOptions, source: _Source, shape_model: nn.Module, model_class: Any
) -> _Inputs:
    task, config = source.task, source.config
    batch_size = options.batch_size or DEFAULT_BATCH_SIZE
    if not task.text:
        image_size = options.image_size or int(getattr(config, "image_size", 224))
        channels = getattr(config, "num_channels", 3)
        shape = f"{batch_size}x{channels}x{image_size}x{image_size}"
        return _Inputs(_image_batches(config, image_size), None, None, shape)
    limit = position_limit(_max_positions(config), shape_model)
    sequence_length = _sequence_length(spec, options, limit)
    batches = _text_batches(
        task,
        config,
        sequence_length,
        _takes(model_class, "attention_mask"),
        _closing_token(spec, task, config),
    )
    return _Inputs(batches, sequence_length, limit, f"{batch_size}x{sequence_length} tokens")


def _weights(
    source: _Source, auto: Any, from_config: Callable[[Any], nn.Module], attentions: list[str]
) -> tuple[Callable[[], nn.Module], str]:
    """What builds the model each time, and how its weights were found; a checkpoint's
    missing tensors join `attentions`."""
    if source.folder is None:
        # from_config draws the weights in build_model, under the workload's seed.
        config = source.config
        return lambda: from_config(config), "random-init weights"
    loaded = _load_checkpoint(source, auto)
    if loaded.missing:
        attentions.append(missing_sentence(type(loaded.model).__name__, loaded.missing))
    # As for a plain module: each build gets its own copy, never optimizer-mutated weights.
    return lambda: independent_copy(loaded.model), loaded.weights


def load_hf_workload(spec: str, options: HfOptions) -> Workload:
    """The Workload of an hf: spec; every problem is a BadInput naming what is wrong."""
    transformers = import_transformers()
    source = _resolve(spec, options, transformers)
    changed = _prepare_config(source)
    task, config = source.task, source.config
    auto = getattr(transformers, task.auto_class)
    # trust_remote_code is always given: left None, transformers asks on stdin.
    from_config = functools.partial(auto.from_config, trust_remote_code=source.trust_remote_code)
    shape_model = _build_on_meta(spec, from_config, config)
    _check_host_memory(spec, shape_model)
    attentions = _check_whole_model(source, shape_model, transformers, options.allow_partial_model)
    model_factory, weights = _weights(source, auto, from_config, attentions)
    # A trusted folder's own model class is not in transformers' table.
    model_class = auto._model_mapping.get(type(config), type(shape_model))
    inputs = _inputs(spec, options, source, shape_model, model_class)
    loss_fn, metric, metric_name = {
        CAUSAL_LM: (shifted_cross_entropy, shifted_perplexity, "perplexity"),
        MASKED_LM: (masked_cross_entropy, masked_perplexity, "masked-token perplexity"),
    }.get(task.name, (nn.functional.cross_entropy, accuracy, "accuracy"))
    notes = [f"{model_class.__name__}, task {task.name} ({source.task_reason})", weights]
    notes.append(inputs.shape)
    if changed:
        notes.append("config: " + ", ".join(changed))
    return Workload(
        name=spec,
        model_factory=model_factory,
        batch_maker=inputs.batches,
        loss_fn=on_primary_output(loss_fn),
        optimizer_factory=lambda params: torch.optim.AdamW(params, lr=5e-5),
        batch_size=options.batch_size or DEFAULT_BATCH_SIZE,
        task=TASK_LANGUAGE_MODEL if task.name in (CAUSAL_LM, MASKED_LM) else TASK_CLASSIFICATION,
        sequence_length=inputs.sequence_length,
        task_metric=on_primary_output(metric),
        task_metric_name=metric_name,
        description="; ".join(notes),
        loss_from_output=True,
        max_sequence_length=inputs.limit.tokens if inputs.limit else None,
        attentions=attentions,
    )
