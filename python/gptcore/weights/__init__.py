"""Weights: the schema, checking, initialisation, and safetensors files (being split by concern)."""

from .checkpoint import *  # noqa: F401,F403
from .checkpoint import __all__  # noqa: F401
