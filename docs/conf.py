"""Sphinx configuration of the documentation site: ``python3 dev.py docs`` builds it into docs/_build/html.

The site's source folder is the repository itself (``sphinx-build -c docs . docs/_build/html``), so
the Markdown files stay where they are and their relative links (``docs/django.md#settings``,
``../benchmarks/README.md``) work on the site as they do when the files are read in the repository.
Only the files named in ``include_patterns`` become pages; ``docs/index.md`` is the root, and
``docs/api.rst`` is the API reference, made by autodoc from the package's docstrings.

The build must stay free of warnings: it runs with ``-W --keep-going -n`` (nitpicky) in
tests/test_site.py, without the network.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# autodoc imports the Django surfaces too (``@locked``, the shortcuts, the signals): give them a
# minimal configuration.  Nothing connects to Redis while importing.
import django  # noqa: E402
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_redis_coord"],
        DJANGO_REDIS_COORD={"URL": "redis://127.0.0.1:6379/0"},
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        USE_TZ=True,
    )
    django.setup()

import django_redis_coord  # noqa: E402

project = "django-redis-coord"
author = "django-redis-coord contributors"
copyright = "the django-redis-coord contributors"  # noqa: A001 - Sphinx's name for it
release = version = django_redis_coord.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]

root_doc = "docs/index"
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
# The pages: the repository's Markdown, where it lies.  Everything else in the tree is left alone
# (and the folders below are not even walked).
include_patterns = [
    "README.md",
    "CHANGELOG.md",
    "docs/*.md",
    "docs/api.rst",
    "docs/img/*",
    "benchmarks/README.md",
    "benchmarks/results/*.md",
    "benchmarks/results/*.png",
    "tests/README.md",
    "example_project/README.md",
]
exclude_patterns = [
    ".*",
    "docs/_build",
    "_readthedocs",
    "build",
    "dist",
    "test-artifacts",
    "django_redis_coord",
    "**/__pycache__",
]

# MyST: GitHub's heading anchors (the pages link ``django.md#settings``), ``:::`` fences for the
# toctrees of docs/index.md (tests/test_docs.py reads only backtick fences, the code blocks).
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# autodoc: members in the order of the source, type hints in the signatures.  docs/api.rst names
# the members of each primitive: their classes share internal building blocks (docs/architecture.md)
# whose hooks are not part of the API.  (No default "members": it would override those lists.)
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
# Names imported only for type checkers (``if TYPE_CHECKING:``) cannot be evaluated: say what they are.
autodoc_type_aliases = {"override_settings": "django.test.utils.override_settings"}

# Nitpicky: every reference must resolve.  Without the network there is no intersphinx inventory
# of Python's, Django's or redis-py's documentation, so references to their names (seen in type
# hints) cannot resolve here; those, and only those, are not reported.  References to this
# package's names must resolve.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(redis|django|asyncio|collections|concurrent|contextlib|datetime|logging|threading"
               r"|types|typing_extensions|pytest|_pytest|celery|prometheus_client|opentelemetry)(\..*)?"),
    # The type variables of generic functions (``get_or_set() -> T``) are not objects to document.
    (r"py:class", r"django_redis_coord\..*\.T"),
]

html_theme = "alabaster"
html_title = f"django-redis-coord {release}"
html_theme_options = {
    "description": "Distributed locks, semaphores and rate limits on Redis for Django",
    "fixed_sidebar": True,
    "sidebar_includehidden": False,  # the benchmark results: reached from the pages that quote them
}
html_show_sourcelink = False
# The pages keep the repository's layout (docs/django.html, README.html): the site's own front page,
# index.html, sends the reader to docs/index.html.
templates_path = ["_templates"]
html_additional_pages = {"index": "redirect.html"}
