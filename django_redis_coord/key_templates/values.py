"""How keys built from request values stay short: a long value becomes its digest.

A header or query parameter can be tens of kilobytes (and six times that once percent-encoded):
as it is, it would make a key over the name limit (a 500 while building the lock) and fill the
caches of every process that saw it.  A value whose encoded form is longer than
:data:`MAX_KEY_VALUE` characters is replaced by ``%sha256-`` and the SHA-256 of that encoded form.
A percent-encoded value never contains ``%s`` (``%`` is always followed by two hexadecimal
digits), so a digest can never be mistaken for a value written out.
"""

from __future__ import annotations

import hashlib

from ..core.exceptions import InvalidLockArgument
from ..core.keys import MAX_NAME_BYTES

#: The longest encoded template value kept as it is in a key (characters).
MAX_KEY_VALUE = 128
#: What starts a digest in a key: a percent-encoded value can never contain it.
DIGEST_PREFIX = "%sha256-"
#: The longest name a key callable may give (bytes): half a lock name's limit, the rest is room
#: for ``KEY_PREFIX``.
MAX_KEY_BYTES = MAX_NAME_BYTES // 2


def shortened(encoded: str) -> str:
    """``encoded`` (a percent-encoded value), or its digest when it is longer than the limit."""
    if len(encoded) <= MAX_KEY_VALUE:
        return encoded
    return DIGEST_PREFIX + hashlib.sha256(encoded.encode("ascii")).hexdigest()


def check_key_length(name: str, error: type[InvalidLockArgument]) -> str:
    """Refuse a key longer than :data:`MAX_KEY_BYTES` with ``error`` (a 400 for views)."""
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_KEY_BYTES:
        raise error(f"The lock key is {size} bytes long; the limit is {MAX_KEY_BYTES}.")
    return name
