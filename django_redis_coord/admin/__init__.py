"""The admin: holders (list, inspect, force release), bulk release and the contention page."""

from . import holders  # noqa: F401  (registers the holder admin)
