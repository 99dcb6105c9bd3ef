"""WordPiece tokenisation of sentences, as sentence-transformers does it for all-MiniLM-L6-v2.

The shipped ``tokenizer.json`` (Hugging Face ``tokenizers``) lower-cases, strips accents, splits
on whitespace and punctuation, adds ``[CLS] … [SEP]``, and — as saved — pads and truncates every
sentence to 128 tokens. sentence-transformers overrides that: it truncates at the model's
``max_seq_length`` (256) and pads a batch to its longest sentence. So does :class:`WordPiece`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import broken

MAX_TOKENS = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2


@dataclass(frozen=True)
class Batch:
    """A tokenised batch, padded on the right to its longest sentence.

    - ``ids``     ``(B, N)`` int64 token ids (``pad_id`` past each sentence's end)
    - ``lengths`` ``(B,)`` number of real tokens per sentence, [CLS] and [SEP] included
    - ``tokens``  per sentence, its real tokens as strings (``"[CLS]", "the", "##re", …``)
    """

    ids: np.ndarray
    lengths: np.ndarray
    tokens: list[list[str]]

    def take(self, rows) -> Batch:
        """The sentences ``rows`` as a batch of their own, padded only to their longest."""
        rows = np.asarray(rows, dtype=np.intp)
        lengths = self.lengths[rows]
        width = int(lengths.max()) if len(rows) else 0
        return Batch(self.ids[rows, :width], lengths, [self.tokens[i] for i in rows])

    @property
    def real(self) -> np.ndarray:
        """``(B, N)`` bool: True at real tokens, False at padding."""
        return np.arange(self.ids.shape[1]) < self.lengths[:, None]


class WordPiece:
    """``tokenizer.json`` with sentence-transformers' padding and truncation."""

    def __init__(self, path: Path, max_tokens: int = MAX_TOKENS):
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for a bad file
            raise broken(Path(path), f"cannot be read as a tokenizer ({exc})") from None
        self._tok.no_padding()
        self._tok.enable_truncation(max_tokens)
        self.max_tokens = max_tokens
        pad = self._tok.token_to_id("[PAD]")
        if pad is None:
            raise broken(Path(path), "has no [PAD] token")
        self.pad_id = pad

    def __call__(self, sentences: list[str]) -> Batch:
        encodings = self._tok.encode_batch(list(sentences))
        lengths = np.array([len(e.ids) for e in encodings], dtype=np.int64)
        width = int(lengths.max()) if len(encodings) else 0
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)  # (B, N)
        for row, enc in zip(ids, encodings, strict=True):
            row[: len(enc.ids)] = enc.ids
        return Batch(ids, lengths, [list(e.tokens) for e in encodings])
