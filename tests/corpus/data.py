"""Small offline data for the public-script corpus: our own code, deterministic and seeded.

Each maker takes the item's folder and writes there, in the layout its upstream script reads,
a few kilobytes of generated data: nothing is downloaded, and the same bytes come out every
time. `MAKERS` maps the names used in scripts.json (`data`) to the makers.
"""

from __future__ import annotations

import io
import pickle
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np

# A small made-up vocabulary: enough words for a language model to have something to learn,
# with capitals and punctuation so that character-level scripts see a varied alphabet (and the
# characters minGPT's chargpt samples from: "O God, O God!").
_NOUNS = (
    "king queen lord lady knight castle river forest sword crown horse field tower night "
    "morning letter voice heart friend stranger city gate winter summer fire stone bird"
).split()
_VERBS = (
    "sees finds keeps loves fears calls holds leaves takes brings follows answers watches "
    "remembers carries"
).split()
_ADJECTIVES = "old young bright dark quiet proud gentle cold brave strange golden".split()
_NAMES = "Anna Marcus Helen Tobias Clara Julian Rosa Felix Ida Oscar".split()
_OPENERS = ("O God,", "Alas,", "Behold,", "Now", "Then", "And yet", "Hark!")


def _sentence(rng: random.Random) -> str:
    subject = rng.choice(
        [f"the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}", rng.choice(_NAMES)]
    )
    obj = f"the {rng.choice(_NOUNS)}"
    words = [subject, rng.choice(_VERBS), obj]
    if rng.random() < 0.4:
        words.append(f"of the {rng.choice(_NOUNS)}")
    if rng.random() < 0.3:
        words.insert(0, rng.choice(_OPENERS))
    text = " ".join(words)
    text = text[0].upper() + text[1:]
    return text + rng.choice([".", ".", ".", "!", "?"])


def _lines(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(_sentence(rng) for _ in range(rng.randint(1, 3))) for _ in range(count)]


def _write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)


def shakespeare_char(folder: Path) -> None:
    """nanoGPT's data/shakespeare_char/{train,val}.bin (uint16 character ids) and meta.pkl
    (vocab_size, stoi, itos), as its prepare.py would write them, from generated text."""
    text = "\n".join(_lines(seed=1, count=700)) + "\n"
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = dict(enumerate(chars))
    ids = np.array([stoi[ch] for ch in text], dtype=np.uint16)
    split = int(len(ids) * 0.9)
    out = folder / "data" / "shakespeare_char"
    _write(out / "train.bin", ids[:split].tobytes())
    _write(out / "val.bin", ids[split:].tobytes())
    _write(
        out / "meta.pkl",
        pickle.dumps({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, protocol=4),
    )


def wikitext2(folder: Path) -> None:
    """word_language_model's data/wikitext-2/{train,valid,test}.txt: a few hundred words each,
    one paragraph a line as in WikiText-2."""
    out = folder / "data" / "wikitext-2"
    for name, seed, count in (("train", 2, 60), ("valid", 3, 15), ("test", 4, 15)):
        _write(out / f"{name}.txt", "".join(f" {line} \n" for line in _lines(seed, count)))


def names(folder: Path) -> None:
    """makemore's names.txt: one lowercase made-up name a line."""
    rng = random.Random(5)
    onsets = "b c d f g h j k l m n p r s t v w z br ch cl dr fl gr kr pr sh st th tr".split()
    vowels = "a e i o u y ae ai ea ee ia io oa ou".split()
    codas = ["", "", "", "n", "l", "r", "s", "th", "nd", "ll", "x"]
    seen: dict[str, None] = {}
    while len(seen) < 1500:
        word = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(1, 3)))
        seen[word + rng.choice(codas)] = None
    _write(folder / "names.txt", "\n".join(seen) + "\n")


def chargpt_input(folder: Path) -> None:
    """minGPT chargpt's input.txt: some twenty thousand characters of generated text."""
    _write(folder / "input.txt", "\n".join(_lines(seed=6, count=300)) + "\n")


def lstm_lm_train(folder: Path) -> None:
    """pytorch-tutorial's language_model data/train.txt: Penn-Treebank-like lowercase lines,
    about 2,500 words (20 batch rows of 30-word chunks, a few chunks an epoch)."""
    lines = [
        line.lower().replace(".", "").replace("!", "").replace("?", "").replace(",", "")
        for line in _lines(seed=7, count=250)
    ]
    _write(folder / "data" / "train.txt", "".join(f" {line} \n" for line in lines))


def sine_wave(folder: Path) -> None:
    """time_sequence_prediction's traindata.pt: a float64 numpy array of shifted sine waves
    (rows: sequences, columns: time), smaller than the upstream generator's 100 x 1000 so that
    LBFGS steps take well under a second."""
    import torch

    rng = np.random.RandomState(2)
    period, length, count = 20, 120, 12
    x = np.arange(length)[None, :] + rng.randint(-4 * period, 4 * period, count)[:, None]
    data = np.sin(x / 1.0 / period).astype("float64")
    buffer = io.BytesIO()
    torch.save(data, buffer)
    _write(folder / "traindata.pt", buffer.getvalue())


def cora(folder: Path) -> None:
    """The GAT example's cora/cora.content (id, binary features, label) and cora/cora.cites
    (cited id, citing id): a random citation graph of 1,800 papers, 7 classes, 64 features.
    The script's split takes the first 1,600 shuffled nodes for test and validation."""
    rng = np.random.RandomState(8)
    nodes, features, classes = 1800, 64, 7
    labels = [f"Class_{k}" for k in range(classes)]
    ids = rng.choice(np.arange(1000, 1_000_000), size=nodes, replace=False)
    label_of = rng.randint(0, classes, nodes)
    content = []
    for node, label in zip(ids, label_of, strict=True):
        bits = (rng.random_sample(features) < 0.08).astype(int)
        bits[label * 9 % features] = 1  # every paper has at least one word, tied to its class
        content.append("\t".join([str(node), *map(str, bits), labels[label]]))
    cites = []
    for _ in range(nodes * 3):
        a, b = rng.randint(0, nodes, 2)
        if a != b:
            cites.append(f"{ids[a]}\t{ids[b]}")
    out = folder / "cora"
    _write(out / "cora.content", "\n".join(content) + "\n")
    _write(out / "cora.cites", "\n".join(cites) + "\n")


MAKERS: dict[str, Callable[[Path], None]] = {
    "shakespeare_char": shakespeare_char,
    "wikitext2": wikitext2,
    "names": names,
    "chargpt_input": chargpt_input,
    "lstm_lm_train": lstm_lm_train,
    "sine_wave": sine_wave,
    "cora": cora,
}
