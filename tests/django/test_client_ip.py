"""The client's address of a request: ``{client_ip}`` in key templates, ``@rate_limited(key="ip")``
and ``client_ip(request)``, read from ``REMOTE_ADDR`` or through ``CLIENT_IP["TRUSTED_PROXIES"]``
proxies from ``X-Forwarded-For`` / ``Forwarded``.  Requests carry forged headers: a client must
never pick its own limit by sending one.  Every decision is made by the session's redis-server."""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings
from django.test import Client, RequestFactory, override_settings

from django_redis_coord import KeyTemplateError, MissingKeyValue, client_ip, rate_limited
from django_redis_coord.checks import check_settings
from django_redis_coord.core.ratelimit import ratelimit_key
from django_redis_coord.ratelimited import client_ip as documented_client_ip

PER_IP = "tests.testapp.client_ip_views.per_ip"


def coord(**client_ip_settings):
    return override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD, "CLIENT_IP": client_ip_settings})


def statuses(path: str, *requests: dict) -> list[int]:
    """The statuses of one GET of ``path`` per dict of ``META`` values (``REMOTE_ADDR``, headers)."""
    client = Client()
    return [client.get(path, **meta).status_code for meta in requests]


def address(**meta: str) -> str:
    return client_ip(RequestFactory().get("/", **meta))


# -- no proxy (the default): REMOTE_ADDR only ------------------------------------------------------------
def test_without_trusted_proxies_the_headers_a_client_sends_change_nothing(redis_client):
    """The default reads REMOTE_ADDR only: a client sending a new X-Forwarded-For or Forwarded
    with every request still meets its limit (2 a minute) at the third."""
    forged = [{"REMOTE_ADDR": "203.0.113.9", "HTTP_X_FORWARDED_FOR": f"198.51.100.{n}",
               "HTTP_FORWARDED": f"for=198.51.100.{n}"} for n in range(3)]
    assert statuses("/t/ip/", *forged) == [200, 200, 429]
    assert redis_client.keys("*") == [ratelimit_key(f"{PER_IP}:203.0.113.9")]
    # Another client (another peer address) has a limit of its own.
    assert statuses("/t/ip/", {"REMOTE_ADDR": "203.0.113.10"}) == [200]
    assert address(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="1.2.3.4") == "203.0.113.9"


# -- behind trusted proxies: counted from the right -------------------------------------------------------
def test_with_one_trusted_proxy_the_right_most_entry_is_the_client(redis_client):
    """The proxy appends the address it received from; whatever the client put to its left is
    ignored, so varying it gives no new limit.  REMOTE_ADDR (the proxy) is the same for all."""
    proxy = "10.0.0.2"
    with coord(TRUSTED_PROXIES=1):
        forged = [{"REMOTE_ADDR": proxy, "HTTP_X_FORWARDED_FOR": f"198.51.100.{n}, 203.0.113.9"} for n in range(3)]
        assert statuses("/t/ip/", *forged) == [200, 200, 429]
        assert redis_client.keys("*") == [ratelimit_key(f"{PER_IP}:203.0.113.9")]
        # Another client behind the same proxy: a limit of its own (not one for the whole site).
        assert statuses("/t/ip/", {"REMOTE_ADDR": proxy, "HTTP_X_FORWARDED_FOR": "203.0.113.77"}) == [200]
        assert address(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="6.6.6.6,203.0.113.9") == "203.0.113.9"
        # The header in several lines (joined by commas by the server) is one list.
        assert address(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="6.6.6.6, 7.7.7.7,203.0.113.9") == "203.0.113.9"


def test_with_two_trusted_proxies_the_second_entry_from_the_right(redis_client):
    with coord(TRUSTED_PROXIES=2):
        # client -> load balancer (appends the client) -> nginx (appends the load balancer) -> Django
        assert address(REMOTE_ADDR="10.0.0.3", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9, 10.0.0.2") == "203.0.113.9"
        # Fewer entries than proxies: the request did not come through both (a health check, a
        # request sent to nginx itself): its peer address is used, never a header entry.
        assert address(REMOTE_ADDR="10.0.0.3", HTTP_X_FORWARDED_FOR="6.6.6.6") == "10.0.0.3"
        assert address(REMOTE_ADDR="10.0.0.3") == "10.0.0.3"


def test_the_forwarded_header_of_rfc_7239(redis_client):
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    with coord(TRUSTED_PROXIES=1, HEADER="Forwarded"):
        assert address(**proxy, HTTP_FORWARDED="for=6.6.6.6, for=203.0.113.9;proto=https;by=10.0.0.2") == "203.0.113.9"
        assert address(**proxy, HTTP_FORWARDED='For="203.0.113.9:4711"') == "203.0.113.9"
        assert address(**proxy, HTTP_FORWARDED='for="[2001:db8:cafe::17]:4711"') == "2001:db8:cafe::/64"
        # A client's unbalanced quote or stray comma on the left cannot shift the proxy's element.
        assert address(**proxy, HTTP_FORWARDED='for="6.6.6.6, for=203.0.113.9') == "203.0.113.9"
        assert address(**proxy, HTTP_FORWARDED='for=6.6.6.6;x="a,b", for=203.0.113.9') == "203.0.113.9"
        # X-Forwarded-For is not read when the proxies write Forwarded.
        assert address(**proxy, HTTP_FORWARDED="for=203.0.113.9", HTTP_X_FORWARDED_FOR="6.6.6.6") == "203.0.113.9"
        forged = [{**proxy, "HTTP_FORWARDED": f"for=198.51.100.{n},for=203.0.113.9"} for n in range(3)]
        assert statuses("/t/ip/login/", *forged) == [200, 200, 429]
        assert redis_client.keys("*") == [ratelimit_key("login:203.0.113.9")]


@pytest.mark.parametrize("entry", ["unknown", "_hidden", "garbage", "", "999.1.1.1", "203.0.113.9:http",
                                   "[2001:db8::1", "[2001:db8::1]x"])
def test_a_chosen_entry_that_is_no_address_is_a_400_never_a_shared_limit(redis_client, entry):
    with coord(TRUSTED_PROXIES=1):
        request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=f"203.0.113.9, {entry}")
        with pytest.raises(MissingKeyValue, match=r"X-Forwarded-For entry .* \(1st from the right.* is not an IP"):
            client_ip(request)
        response = Client().get("/t/ip/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=f"203.0.113.9, {entry}")
        assert response.status_code == 400
    with coord(TRUSTED_PROXIES=1, HEADER="Forwarded"):
        response = Client().get("/t/ip/", REMOTE_ADDR="10.0.0.2", HTTP_FORWARDED=f'for=203.0.113.9, for="{entry}"')
        assert response.status_code == 400
    assert redis_client.keys("*") == []  # nothing was counted


def test_garbage_a_client_sends_left_of_the_proxys_entry_is_ignored(redis_client):
    with coord(TRUSTED_PROXIES=1):
        assert address(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="unknown, , <script>, 203.0.113.9") == "203.0.113.9"
        huge = ", ".join(["6.6.6.6"] * 2000) + ", 203.0.113.9"
        assert address(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=huge) == "203.0.113.9"


def test_an_empty_remote_addr_is_a_400_with_a_hint(redis_client):
    with pytest.raises(MissingKeyValue, match="REMOTE_ADDR is ''.*TRUSTED_PROXIES"):
        address(REMOTE_ADDR="")
    assert Client().get("/t/ip/", REMOTE_ADDR="").status_code == 400


# -- address forms and IPv6 grouping ----------------------------------------------------------------------
@pytest.mark.parametrize(("entry", "expected"), [
    ("203.0.113.9", "203.0.113.9"),
    (" 203.0.113.9 ", "203.0.113.9"),
    ("203.0.113.9:4711", "203.0.113.9"),
    ("::ffff:203.0.113.9", "203.0.113.9"),        # IPv4-mapped: the IPv4 client it is
    ("[::ffff:203.0.113.9]:80", "203.0.113.9"),
    ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
    ("[2001:db8:1:2::9]:443", "2001:db8:1:2::/64"),
    ("2001:DB8:1:2::9", "2001:db8:1:2::/64"),    # one spelling per network
    ("fe80::1%eth0", "fe80::/64"),
])
def test_address_forms(entry, expected):
    with coord(TRUSTED_PROXIES=1):
        assert address(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=entry) == expected
    if not entry.strip().startswith("[") and entry.count(":") != 1:  # REMOTE_ADDR has no port
        assert address(REMOTE_ADDR=entry.strip()) == expected


def test_ipv6_clients_share_a_limit_per_prefix(redis_client):
    """The addresses of one /64 are one client (a machine can take any of them); another /64 is
    another client; IPV6_PREFIX changes the grouping."""
    one, same, other = "2001:db8:1:2::1", "2001:db8:1:2:ffff::7", "2001:db8:1:3::1"
    assert statuses("/t/ip/", {"REMOTE_ADDR": one}, {"REMOTE_ADDR": same}, {"REMOTE_ADDR": same},
                    {"REMOTE_ADDR": other}) == [200, 200, 429, 200]
    redis_client.flushall()
    with coord(IPV6_PREFIX=128):
        assert statuses("/t/ip/", {"REMOTE_ADDR": one}, {"REMOTE_ADDR": one}, {"REMOTE_ADDR": same}) == [200, 200, 200]
        assert address(REMOTE_ADDR=one) == "2001:db8:1:2::1"
    with coord(IPV6_PREFIX=48):
        assert address(REMOTE_ADDR=other) == "2001:db8:1::/48"


# -- where the address is used ----------------------------------------------------------------------------
def test_key_ip_is_per_view_and_works_on_async_views(redis_client):
    from tests.testapp.client_ip_views import aper_ip

    async def three():
        return [(await aper_ip(RequestFactory().get("/", REMOTE_ADDR="203.0.113.9"))).status_code for _ in range(3)]

    assert asyncio.run(three()) == [200, 200, 429]
    # The sync view's "ip" limit is another one: each view has its own per client.
    assert statuses("/t/ip/", {"REMOTE_ADDR": "203.0.113.9"}) == [200]
    assert sorted(redis_client.keys("*")) == sorted([
        ratelimit_key("tests.testapp.client_ip_views.aper_ip:203.0.113.9"), ratelimit_key(f"{PER_IP}:203.0.113.9")])
    client = Client()
    admitted, refused = (client.get("/t/ip/", REMOTE_ADDR="203.0.113.9") for _ in range(2))
    assert (admitted.status_code, refused.status_code) == (200, 429)
    assert refused["RateLimit-Policy"].startswith(f'"{PER_IP}:{{client_ip}}";q=2')  # the template, never the address


def test_client_ip_in_a_locked_key_and_in_a_key_callable(redis_client):
    assert Client().get("/t/ip/locked/", REMOTE_ADDR="2001:db8::5").content == b"ip-lock:2001%3Adb8%3A%3A%2F64"
    assert statuses("/t/ip/callable/", *[{"REMOTE_ADDR": "203.0.113.9"}] * 3) == [200, 200, 429]
    assert redis_client.exists(ratelimit_key("callable:203.0.113.9"))
    assert documented_client_ip is client_ip


def test_client_ip_outside_a_view_is_an_error_naming_it(redis_client):
    @rate_limited("ip", rate="2/m")
    def not_a_view(x):
        return x

    with pytest.raises(KeyTemplateError, match=r"uses \{client_ip\}, which this call does not provide"):
        not_a_view(1)


# -- the settings -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "problem"), [
    (1, "must be a dict"),
    ({"TRUSTED_PROXY": 1}, "Did you mean 'TRUSTED_PROXIES'?"),
    ({"TRUSTED_PROXIES": -1}, "Count the proxies"),
    ({"TRUSTED_PROXIES": "1"}, "Count the proxies"),
    ({"TRUSTED_PROXIES": True}, "Count the proxies"),
    ({"HEADER": "X Forwarded For"}, "must be a header name"),
    ({"HEADER": ""}, "must be a header name"),
    ({"IPV6_PREFIX": 0}, "a prefix length from 1 to 128"),
    ({"IPV6_PREFIX": 129}, "a prefix length from 1 to 128"),
    ({"IPV6_PREFIX": 64.0}, "a prefix length from 1 to 128"),
])
def test_a_malformed_client_ip_setting_is_a_system_check_error_with_a_hint(value, problem):
    with override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD, "CLIENT_IP": value}):
        errors = check_settings()
    assert errors and any(problem in e.msg or problem in (e.hint or "") for e in errors), errors
    assert all(e.id == "django_redis_coord.E024" and e.hint for e in errors), errors


def test_good_client_ip_settings_pass():
    with coord(TRUSTED_PROXIES=2, HEADER="Forwarded", IPV6_PREFIX=56):
        assert check_settings() == []
