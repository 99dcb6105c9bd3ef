"""``qkv explore``: a local, offline web page over qkv's attention.

Layers: :mod:`.schemas` (what the API accepts and returns), :mod:`.compute` (requests → qkv
calls), :mod:`.model_service` (MiniLM, loaded lazily), :mod:`.app` (the FastAPI app),
:mod:`.server` (uvicorn on loopback), ``static/`` (the page: HTML, CSS, and native ES modules
with no build step: ``main.js`` lists the views, ``core/`` the shared parts, ``views/`` one
module per view; see docs/explore.md).
The page draws what the API returns; it never computes attention itself.
"""

from .app import create_app

__all__ = ["create_app"]
