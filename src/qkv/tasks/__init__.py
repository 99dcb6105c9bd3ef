"""Tasks that train qkv.nn models from scratch: associative recall (the seeds' library search)."""

from .recall import RecallBatch, RecallConfig, RecallModel, RecallTask, evaluate
from .training import Run

__all__ = ["RecallBatch", "RecallConfig", "RecallModel", "RecallTask", "Run", "evaluate"]
