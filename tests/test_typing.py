"""The public API is typed: a user module passes ``mypy --strict``, and no public name of the
package (nor of ``django_redis_coord.asyncio``) is ``Any`` to a type checker, even the ones
``__init__`` serves lazily."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import django_redis_coord
import django_redis_coord.asyncio

ROOT = Path(__file__).resolve().parent.parent
USER_MODULE = ROOT / "tests" / "support" / "typing_user.py"


def run_mypy(*paths: Path) -> str:
    # --follow-imports=silent: the package is analysed (its types are what is checked) but only
    # the files named here report errors; the project's [tool.mypy] settings apply.
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary"]
    result = subprocess.run([*command, *map(str, paths)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


@pytest.mark.timeout(600)
def test_public_names_are_typed_for_user_code(tmp_path):
    reveal = tmp_path / "reveal_public_names.py"
    names = [f"django_redis_coord.{name}" for name in django_redis_coord.__all__]
    names += [f"django_redis_coord.asyncio.{name}" for name in django_redis_coord.asyncio.__all__]
    reveal.write_text(
        "import django_redis_coord\nimport django_redis_coord.asyncio\n"
        + "".join(f"reveal_type({name})\n" for name in names)
    )
    output = run_mypy(USER_MODULE, reveal)
    errors = [line for line in output.splitlines() if ": error:" in line]
    assert not errors, "\n".join(errors)
    revealed = re.findall(r'reveal_public_names\.py:(\d+): note: Revealed type is "(.*)"', output)
    assert len(revealed) == len(names), output
    untyped = [names[int(line) - 3] for line, type_ in revealed if type_ == "Any"]
    assert not untyped, f"mypy sees these as Any: {untyped}"
