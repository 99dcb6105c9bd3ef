"""Tasks that train qkv.nn models from scratch: associative recall (the lesson's library search)."""

from .checkpoint import CheckpointError
from .recall import RecallBatch, RecallConfig, RecallModel, RecallTask, Run, evaluate

__all__ = ["CheckpointError", "RecallBatch", "RecallConfig", "RecallModel", "RecallTask", "Run",
           "evaluate"]
