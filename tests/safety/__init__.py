"""Safety harness: recorded histories of client processes, checkers, unsafe controls and faults.

Clients run as separate OS processes and record what they did with ``time.monotonic_ns()``,
which on Linux is one clock for the whole machine, so an overlap between two processes' holds
is observed, not inferred.  The checkers in :mod:`tests.safety.checkers` judge the merged
histories; :mod:`tests.safety.unsafe` holds deliberately broken locks that the checkers must
catch under the same load.
"""
