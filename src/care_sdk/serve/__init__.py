"""CARE as an HTTP reward service (``care serve``), for trainers that score out of process.

Needs the ``serve`` extra (``pip install "care-sdk[serve]"``). :func:`create_app` builds the
Starlette app around one :class:`~care_sdk.AdaptiveReward`; :func:`serve` runs it under uvicorn.
The client is :class:`care_sdk.RemoteReward`. See :mod:`care_sdk.serve.app` for the endpoints.

Examples:
    >>> from care_sdk.serve import ServeConfig
    >>> ServeConfig(max_queue=32).max_queue
    32
"""

from care_sdk.serve.app import ServeConfig, create_app, serve

__all__ = ["ServeConfig", "create_app", "serve"]
