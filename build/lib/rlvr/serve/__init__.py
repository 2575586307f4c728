"""``rlvr serve``: a model behind an OpenAI-compatible HTTP API (:mod:`rlvr.serve.app`)."""

from rlvr.serve.app import create_app, serve

__all__ = ["create_app", "serve"]
