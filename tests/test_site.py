"""The documentation site (``python3 dev.py docs``) builds without a single warning, and it documents
every public name.

The build is dev.py's own (its ``sphinx_args``: docs/conf.py, the repository as the source folder,
``-W --keep-going -n``), into a temporary folder.  It needs no network: docs/conf.py loads no
intersphinx inventory, and the Django settings autodoc needs are configured there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import django_redis_coord
import django_redis_coord.asyncio
import django_redis_coord.exceptions
import django_redis_coord.testing

ROOT = Path(__file__).resolve().parent.parent


def load_dev_py():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_without_warnings_and_documents_every_public_name(tmp_path):
    conf = (ROOT / "docs" / "conf.py").read_text()
    assert "sphinx.ext.intersphinx" not in conf  # no inventory fetched from the network
    html = tmp_path / "html"
    args = load_dev_py().sphinx_args(html, tmp_path / "doctrees", "-q")
    # conf.py configures Django itself: the suite's settings module must not leak in.
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert "WARNING" not in output and "ERROR" not in output, output
    assert result.returncode == 0, output

    # Every page of docs/ is a page of the site, and so is the overview (README.md); the index
    # links every page of docs/ (a page left out of it would also be a warning).
    pages = sorted(path.stem for path in (ROOT / "docs").glob("*.md"))
    assert {"index", "install", "django", "architecture"} <= set(pages)
    for page in [*pages, "api"]:
        assert (html / "docs" / f"{page}.html").is_file(), page
    assert (html / "README.html").is_file() and (html / "CHANGELOG.html").is_file()
    assert 'url=docs/index.html"' in (html / "index.html").read_text()  # the site's front page
    index = (html / "docs" / "index.html").read_text()
    for page in pages:
        assert page == "index" or f'href="{page}.html"' in index, page

    # The API reference documents each public name (an object description with its anchor).
    api = (html / "docs" / "api.html").read_text()
    documented = set(re.findall(r'<dt class="sig sig-object py" id="([\w.]+)"', api))
    missing = []
    for name in django_redis_coord.__all__:
        if name == "holders":  # the module: its names are documented where they are used
            continue
        if f"django_redis_coord.{name}" not in documented and f"django_redis_coord.exceptions.{name}" not in documented:
            missing.append(name)
    for module in (django_redis_coord.asyncio, django_redis_coord.exceptions, django_redis_coord.testing):
        missing += [f"{module.__name__}.{name}" for name in module.__all__
                    if f"{module.__name__}.{name}" not in documented]
    for signal in ("lock_acquired", "lock_released", "lock_contended", "lock_lost"):
        if f"django_redis_coord.signals.{signal}" not in documented:
            missing.append(signal)
    assert missing == []
    # The members of a primitive, inherited from its building blocks included.
    assert {"django_redis_coord.Lock.acquire", "django_redis_coord.Lock.fence",
            "django_redis_coord.Leader.is_leader", "django_redis_coord.asyncio.Semaphore.valid"} <= documented

    # Searchable: the search page and an index holding the pages' words.
    assert (html / "search.html").is_file()
    search_index = (html / "searchindex.js").read_text()
    assert "fenc" in search_index and '"docs/django"' in search_index


def test_read_the_docs_builds_the_same_site():
    """.readthedocs.yaml runs the build dev.py runs: same configuration, same source folder, and
    it fails on warnings too."""
    ours = load_dev_py().sphinx_args(Path("OUT"), Path("DOCTREES"))
    config = (ROOT / ".readthedocs.yaml").read_text()
    commands = [line.strip()[2:] for line in config.splitlines() if line.strip().startswith("- python -m sphinx")]
    assert len(commands) == 1
    theirs = commands[0].split()[1:]  # after "python"

    def folders(args: list[str]) -> tuple[list[str], dict[str, str]]:
        """The arguments with the folders they name taken out: (the rest, {role: folder})."""
        args = list(args)
        named = {"conf": args[args.index("-c") + 1], "doctrees": args[args.index("-d") + 1],
                 "source": args[-2], "out": args[-1]}
        for value in named.values():
            args[args.index(value)] = "FOLDER"
        return args, named

    our_args, our_folders = folders(ours)
    their_args, their_folders = folders(theirs)
    assert their_args == our_args
    assert (their_folders["conf"], their_folders["source"]) == ("docs", ".")
    assert (our_folders["conf"], our_folders["source"]) == (str(ROOT / "docs"), str(ROOT))
    assert '".[docs]"' in config
