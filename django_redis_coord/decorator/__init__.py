"""``@locked``: the decorator, its key templates, its options, and what it answers when the key is taken."""
