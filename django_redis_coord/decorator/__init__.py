"""``@locked``: the decorator, its options, and what it answers when the key is taken (its key
templates are :mod:`django_redis_coord.key_templates`)."""
