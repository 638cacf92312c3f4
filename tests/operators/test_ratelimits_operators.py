"""What an operator does with live rate limits: ``manage.py ratelimits`` and the admin's rate-limits page,
with names an application can give a core limit (a name over 1,024 bytes, named in Redis by its digest; a
name that is not UTF-8) and names an operator can mistype (one with the reserved marker, one over 64 KiB).

Every limit the listing prints can be shown and reset by what it prints; a POSTed name no limit can have
is a 400 that says why, never a 503.
"""

from __future__ import annotations

import io
import json
import re

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.urls import reverse

from django_redis_coord import RateLimit, SlidingWindowLimit
from django_redis_coord.core.ratelimit import ratelimit_key, window_key
from tests.operators.test_admin import client_for, make_user

LONG = "tenant-7:" + "x" * 1100                 # over 1,024 bytes: its key names it by its SHA-256
NOT_UTF8 = b"bytes:\xff\xfe-name"               # a core limit may be named by any bytes


def coord(**extra):
    return override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD, **extra})


def run(*args) -> str:
    out = io.StringIO()
    call_command("ratelimits", *args, stdout=out)
    return out.getvalue()


def busy(redis_client, prefix: str = "") -> dict:
    """A long-named GCRA limit, a non-UTF-8-named sliding window and a plain one, each used once."""
    head = prefix.encode() + b":" if prefix else b""
    limits = {
        "long": RateLimit(redis_client, head + LONG.encode(), "10/m"),
        "bytes": SlidingWindowLimit(redis_client, head + NOT_UTF8, "5/m"),
        "plain": RateLimit(redis_client, head + b"plain:1", "10/m"),
    }
    for limit in limits.values():
        assert limit.hit().allowed
    return limits


def listed_names(text: str) -> list[str]:
    return [line.split("  ")[0] for line in text.splitlines()[1:]]


# -- manage.py ratelimits -------------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["", "shop"])
def test_the_command_shows_and_resets_every_limit_it_lists_by_what_it_prints(redis_client, prefix):
    limits = busy(redis_client, prefix)
    with coord(KEY_PREFIX=prefix):
        listing = json.loads(run("list", "--json"))
        assert len(listing) == 3, listing  # the long-named limit too
        text = run("list")
        printed = listed_names(text)
        assert len(printed) == 3, text
        by_key = {entry["key"]: entry for entry in listing}
        for limit in limits.values():
            entry = by_key[limit.key.decode("utf-8", "backslashreplace")]
            assert entry["name"] in printed  # the JSON gives the same reference as the table
            shown = run("show", entry["name"])
            assert "idle" not in shown and ("window" in shown.lower() or "gcra" in shown.lower()), shown
        for reference in printed:
            assert "removed" in run("reset", reference, "--noinput")
        assert not any(redis_client.exists(limit.key) for limit in limits.values())
        assert run("list") == "No live rate limits.\n"


def test_a_non_utf8_name_is_listed_by_a_reference_that_names_no_other_limit(redis_client):
    """The listing prints a name that is not UTF-8 by its key, with escapes; a UTF-8 name that
    reads like those escapes is a different limit, printed as it is."""
    SlidingWindowLimit(redis_client, NOT_UTF8, "5/m").hit()
    lookalike = NOT_UTF8.decode("utf-8", "backslashreplace")
    RateLimit(redis_client, lookalike, "5/m").hit()
    printed = listed_names(run("list"))
    assert lookalike in printed and len(set(printed)) == 2
    other = next(p for p in printed if p != lookalike)
    assert ":dcoord:window" in other
    run("reset", other, "--noinput")
    assert not redis_client.exists(window_key(NOT_UTF8)) and redis_client.exists(ratelimit_key(lookalike))


@pytest.mark.parametrize("reference, message", [
    ("{x}:dcoord:gcra:#abc", "not the key of a rate limit"),
    ("a:dcoord:b", "not the key of a rate limit"),
    ("x" * (64 * 1024 + 1), "the limit is 65536"),
])
def test_the_command_refuses_a_name_no_limit_can_have(redis_client, reference, message):
    for action in (("show", reference), ("reset", reference, "--noinput")):
        with pytest.raises(CommandError, match=re.escape(message)) as refused:
            run(*action)
        assert refused.value.returncode == 1


# -- the admin page ---------------------------------------------------------------------------------------
@pytest.fixture
def operator(django_user_model, db):
    return client_for(make_user(django_user_model, "operator", staff=True,
                                perms=("view_holder", "force_release_holder")))


PAGE = "admin:django_redis_coord_holder_ratelimits"


def reset_forms(html: str) -> dict[str, dict[str, str]]:
    """The reset form of each listed limit: its row's data-name -> the form's hidden fields."""
    forms = {}
    for row in re.findall(r'<tr class="ratelimit".*?</tr>', html, re.S):
        name = re.search(r'data-name="([^"]*)"', row).group(1)
        forms[name] = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', row))
    return forms


@pytest.mark.parametrize("prefix", ["", "shop"])
def test_the_admin_resets_every_limit_it_lists(redis_client, operator, prefix):
    limits = busy(redis_client, prefix)
    with coord(KEY_PREFIX=prefix):
        page = reverse(PAGE)
        forms = reset_forms(operator.get(page).content.decode())
        assert len(forms) == 3, forms
        for fields in forms.values():
            fields.pop("csrfmiddlewaretoken", None)
            after = operator.post(page, fields, follow=True)
            assert after.status_code == 200
            assert "Reset the rate limit" in after.content.decode(), after.content.decode()
        assert not any(redis_client.exists(limit.key) for limit in limits.values())


@pytest.mark.parametrize("fields, message", [
    ({"name": "orders:dcoord:gcra"}, "must not contain the reserved marker"),
    ({"name": "x" * (64 * 1024 + 1)}, "the limit is 65536"),
    ({"name": ""}, "Name the rate limit to reset"),
    ({}, "Name the rate limit to reset"),
    ({"key": "not base64!"}, "not a rate limit's key"),
    ({"key": "e3h9OmRjb29yZDptZXRh"}, "not a rate limit's key"),   # {x}:dcoord:meta, a lock's side key
])
def test_the_admin_answers_a_bad_posted_name_with_a_400(redis_client, operator, fields, message):
    RateLimit(redis_client, "calm", "10/m").hit()
    answer = operator.post(reverse(PAGE), fields)
    assert answer.status_code == 400 and message in answer.content.decode(), answer.content.decode()[:300]
    assert redis_client.exists(ratelimit_key("calm"))


def test_a_reset_of_an_idle_limit_says_so(redis_client, operator):
    after = operator.post(reverse(PAGE), {"name": "never-used"}, follow=True)
    assert "is idle" in after.content.decode()


def test_a_viewer_cannot_reset(redis_client, django_user_model, db):
    RateLimit(redis_client, "calm", "10/m").hit()
    viewer = client_for(make_user(django_user_model, "viewer", staff=True, perms=("view_holder",)))
    assert viewer.post(reverse(PAGE), {"name": "calm"}).status_code == 403
    assert Client().post(reverse(PAGE), {"name": "calm"}).status_code == 302
    assert redis_client.exists(ratelimit_key("calm"))


# -- what each limit is: its kind as people call it, its rate, its limit, what remains -------------------
def use_the_views(times_busy: int = 2) -> None:
    client = Client()
    for _ in range(times_busy):
        client.get("/t/rl/gcra/busy/")       # @rate_limited("rl:{name}", rate="3/m", burst=2)
    client.get("/t/rl/window/w/")            # @rate_limited("rl-window:{name}", rate="2/m", algorithm="window")


def test_show_takes_a_named_rate_of_the_settings_and_says_what_it_knows_by_default(redis_client):
    use_the_views()
    RateLimit(redis_client, "core-only", "10/m").hit()
    with coord(RATELIMIT={"RATES": {"api": {"rate": "3/m", "burst": 4}, "slow": "1/h"}}):
        named = run("show", "rl:busy", "--rate", "api")
        assert "rate:          3/m, burst 4 (given with --rate)" in named
        assert "remaining:     2 of 4 (2 used)" in named and "would be admitted" in named
        assert json.loads(run("show", "rl:busy", "--rate", "slow", "--json"))["limits"][0]["burst"] == 1
        with pytest.raises(CommandError, match=r"--rate 'apx' is neither a rate.*its names: api, slow") as unknown:
            run("show", "rl:busy", "--rate", "apx")
        assert unknown.value.returncode == 1
    shown = run("show", "rl:busy")  # the view's decorator tells its rate
    assert "Token bucket (GCRA)" in shown and "rate:          3/m, burst 2 (its @rate_limited)" in shown
    assert "remaining:     0 of 2 (2 used)" in shown and "free again in: " in shown
    assert "key:           '{rl:busy}:dcoord:gcra'" in shown and "would be refused (retry in" in shown
    window = run("show", "rl-window:w")
    assert "Sliding window" in window and "rate:          2/m" in window and "remaining:     1 of 2 (1 used)" in window
    core = run("show", "core-only")  # no decorator names it: its rate is not known here
    assert "rate:          unknown" in core and "remaining" not in core and "free again in: " in core


def test_list_shows_kind_rate_and_remaining(redis_client):
    use_the_views()
    RateLimit(redis_client, "core-only", "10/m").hit()
    rows = {line.split("  ")[0]: re.split(r"\s{2,}", line) for line in run("list").splitlines()[1:]}
    assert rows["rl:busy"][1:4] == ["Token bucket (GCRA)", "3/m, burst 2", "0/2"]
    assert rows["rl-window:w"][1:4] == ["Sliding window", "2/m", "1/2"]
    assert rows["core-only"][1:4] == ["Token bucket (GCRA)", "unknown", "unknown"]
    listed = {u["name"]: u for u in json.loads(run("list", "--json"))}
    assert (listed["rl:busy"]["kind_title"], listed["rl:busy"]["rate"], listed["rl:busy"]["burst"],
            listed["rl:busy"]["limit"], listed["rl:busy"]["remaining"], listed["rl:busy"]["used"]) == (
        "Token bucket (GCRA)", "3/m", 2, 2, 0, 2)
    assert listed["core-only"]["rate"] is None and listed["core-only"]["remaining"] is None


def test_a_named_rate_is_read_from_the_settings_when_asked():
    from django_redis_coord import rate_limited
    from django_redis_coord.config.settings import coord_settings
    from django_redis_coord.ratelimited.registry import policy_for

    @rate_limited("named-rate:{n}", rate="ops-test")
    def limited(n):
        return n

    with coord(RATELIMIT={"RATES": {"ops-test": {"rate": "7/h", "burst": 3}}}):
        policy = policy_for("named-rate:1", "gcra", coord_settings().ratelimit)
        assert (str(policy.rate), policy.burst) == ("7/h", 3)
        assert policy_for("named-rate:1", "window", coord_settings().ratelimit) is None  # another kind
        assert policy_for("other:1", "gcra", coord_settings().ratelimit) is None
    with coord(RATELIMIT={"RATES": {"ops-test": "9/m"}}):
        policy = policy_for("named-rate:1", "gcra", coord_settings().ratelimit)
        assert (str(policy.rate), policy.burst) == ("9/m", 9)

    @rate_limited("named-rate:{n}", rate="1/s")  # a second decorator whose template fits, another rate
    def other(n):
        return n

    with coord(RATELIMIT={"RATES": {"ops-test": "9/m"}}):
        assert policy_for("named-rate:1", "gcra", coord_settings().ratelimit) is None  # ambiguous: unknown
    del limited, other  # (their rate names would otherwise reach the system checks of later tests)
    assert policy_for("named-rate:1", "gcra", coord_settings().ratelimit) is None


def test_the_admin_shows_kind_rate_limit_and_remaining(redis_client, operator):
    use_the_views()
    RateLimit(redis_client, "core-only", "10/m").hit()
    html = operator.get(reverse(PAGE)).content.decode()
    rows = {}
    for row in re.findall(r'<tr class="ratelimit".*?</tr>', html, re.S):
        name = re.search(r'data-name="([^"]*)"', row).group(1)
        rows[name] = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    table = html[html.index('<table id="result_list">'):]
    assert re.findall(r'<th scope="col"[^>]*>([^<]*)</th>', table)[:7] == [
        "Name", "Kind", "Rate", "Limit", "Used", "Remaining", "Free again in"]
    assert rows["rl:busy"][1:6] == ["Token bucket (GCRA)", "3/m, burst 2", "2", "2", "0"]
    assert rows["rl-window:w"][1:6] == ["Sliding window", "2/m", "2", "1", "1"]
    assert rows["core-only"][1:6] == ["Token bucket (GCRA)", "unknown", "–", "–", "–"]
    assert 'title="unknown: its rate is not known"' in html
    assert ">gcra<" not in html and ">window<" not in html


@pytest.mark.parametrize("name", [b"line\nbreak", b"esc\x1b[31m:red", b"tab\tand \\x41 backslash",
                                  b"{tagged\xc3}:x", "snow\u2603man:\\".encode(), b"\\xff\xff"])
def test_odd_names_are_printed_whole_on_one_line_and_read_back(redis_client, name):
    limit = RateLimit(redis_client, name, "10/m")
    limit.hit()
    printed = listed_names(run("list"))
    assert len(printed) == 1 and printed[0].isprintable(), printed
    assert "Token bucket (GCRA)" in run("show", printed[0])
    run("reset", printed[0], "--noinput")
    assert not redis_client.exists(limit.key)
