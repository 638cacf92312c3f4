"""The admin: holders (list, inspect, force release), bulk release, and the rate-limits and
contention pages, each listed on the admin index and in its sidebar."""

from . import holders, pages  # noqa: F401  (registers the admins)
