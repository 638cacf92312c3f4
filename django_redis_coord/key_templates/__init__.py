"""The key-template language of ``@locked`` and ``@rate_limited`` (and of the unique tasks of
Celery and Django's tasks): a key such as ``"orders:{pk}"`` or ``"login:{client_ip}"``.

* :mod:`.template`: a template parsed and checked when decorating (against the decorated
  function's arguments), filled on every call with each value percent-encoded;
* :mod:`.filling`: what one call's template is filled from (a view's request, user, query
  parameters, headers, client address; a function's arguments), and a key callable's result;
* :mod:`.values`: a long value becomes its digest, a key callable's name is kept short;
* :mod:`.client_ip`: a request's client address, ``{client_ip}``.

The decorators import it; it imports neither of them.  (The Redis keys a primitive makes of the
name it is given are :mod:`django_redis_coord.core.keys`.)
"""
