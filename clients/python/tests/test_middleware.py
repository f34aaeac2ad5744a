"""The Scrapy middleware against a stand-in of the discovery API (`fake_api.FakeApi`, a real
HTTP server on loopback); the crawl through real squid and the real operator is the e2e
test `tests/tests/e2e/crawlers.rs`."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from types import SimpleNamespace

import pytest
from scrapy import Request, Spider
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from fake_api import FakeApi
from proxy_operator_client.scrapy import LeaseDropped, ProxyOperatorMiddleware


@pytest.fixture
def api():
    api = FakeApi()
    yield api
    api.close()


def middleware(api, **settings):
    crawler = get_crawler(settings_dict={
        "PROXY_OPERATOR_URL": api.url, "PROXY_OPERATOR_TOKEN": "t0ken",
        "PROXY_OPERATOR_SELECTOR": {"geo": "eu"}, "PROXY_OPERATOR_HOLDER": "test/holder",
        **settings})
    return ProxyOperatorMiddleware.from_crawler(crawler)


def run(coroutine):
    return asyncio.run(coroutine)


async def settle(mw):
    """Lets the background reports and releases land."""
    while mw.leases.background:
        await asyncio.wait(list(mw.leases.background))


def response(request, status=200, body=b"page"):
    return Response(request.url, status=status, body=body, request=request)


def test_one_lease_per_host_in_a_slot_of_its_own_named_by_its_holder(api):
    mw = middleware(api)

    async def crawl():
        requests = [Request(u) for u in ("https://a.example/1", "https://A.example/2", "https://b.example/")]
        for request in requests:
            await mw.process_request(request)
        return requests

    a1, a2, b = run(crawl())
    assert a1.meta["proxy"] == "http://p1:pa%40ss@127.0.0.1:3128"
    assert a2.meta["proxy"] == a1.meta["proxy"], "one lease per host, case-insensitive"
    assert b.meta["proxy"] == "http://p2:pa%40ss@127.0.0.1:3128"
    assert (a1.meta["download_slot"], b.meta["download_slot"]) == ("proxy-operator:lease-1", "proxy-operator:lease-2")
    leases = [body for m, path, body in api.calls if path == "/v1/leases"]
    assert leases == [
        {"selector": {"geo": "eu"}, "ttlSeconds": 300, "holder": "test/holder", "target": "a.example"},
        {"selector": {"geo": "eu"}, "ttlSeconds": 300, "holder": "test/holder", "target": "b.example"},
    ]
    skipped = Request("https://a.example/", meta={"proxy_operator": False})
    own = Request("https://a.example/", meta={"proxy": "http://mine:3128"})
    run(mw.process_request(skipped))
    run(mw.process_request(own))
    assert "proxy" not in skipped.meta
    assert own.meta["proxy"] == "http://mine:3128", "a proxy of the spider's own: hands off"


def test_leases_per_site_spread_the_requests_of_a_host(api):
    mw = middleware(api, PROXY_OPERATOR_LEASES_PER_SITE=2)

    async def crawl():
        requests = [Request(f"https://a.example/{i}") for i in range(4)]
        for request in requests:
            await mw.process_request(request)
        return requests

    proxies = [r.meta["proxy_operator_proxy"] for r in run(crawl())]
    assert proxies == ["crawl/p1", "crawl/p2", "crawl/p1", "crawl/p2"]


def test_a_rate_limit_drops_the_lease_reports_before_leasing_again_and_retries(api):
    mw = middleware(api, PROXY_OPERATOR_RETRY_TIMES=1)

    async def crawl():
        request = Request("https://a.example/page")
        await mw.process_request(request)
        ok = await mw.process_response(request, response(request))
        limited = await mw.process_response(request, response(request, 429))
        assert isinstance(limited, Request), "sent again through a new lease"
        await mw.process_request(limited)
        again = await mw.process_response(limited, response(limited, 429))
        await settle(mw)
        return ok, limited, again

    ok, limited, again = run(crawl())
    assert isinstance(ok, Response) and ok.status == 200
    assert limited.dont_filter and limited.meta["proxy"].startswith("http://p2:")
    assert isinstance(again, Response) and again.status == 429, "gave up after one new lease"
    assert again.request.meta["proxy_operator_gave_up"] is True
    assert again.request.meta["dont_retry"] is True, "RetryMiddleware leaves it alone"
    assert sorted(api.reports(), key=str) == sorted([
        ("/v1/leases/lease-1/report", {"status": 200, "target": "a.example"}),
        ("/v1/leases/lease-1/report", {"status": 429, "target": "a.example"}),
        ("/v1/leases/lease-2/report", {"status": 429, "target": "a.example"}),
    ], key=str)
    # The server heard of the rate limit before it was asked for the next lease.
    assert api.index("POST", "/v1/leases/lease-1/report") < api.calls.index(
        ("POST", "/v1/leases", {"selector": {"geo": "eu"}, "ttlSeconds": 300, "holder": "test/holder", "target": "a.example"}), 1)
    assert sorted(api.paths("DELETE")) == ["/v1/leases/lease-1", "/v1/leases/lease-2"]
    assert mw.stats.get_value("proxy_operator/reports/rate_limited") == 2
    assert mw.stats.get_value("proxy_operator/reports/ok") == 1
    assert mw.stats.get_value("proxy_operator/lease_again") == 2


def test_a_407_leases_again_on_a_response_and_on_a_connect(api):
    mw = middleware(api)

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        retry = await mw.process_response(request, response(request, 407))
        await mw.process_request(retry)
        tunnel = TunnelError("Could not open CONNECT tunnel with proxy 127.0.0.1:3128 "
                             "[{'status': 407, 'reason': b'Proxy Authentication Required'}]")
        again = await mw.process_exception(retry, tunnel)
        await mw.process_request(again)
        await settle(mw)
        return again

    again = run(crawl())
    assert again.meta["proxy"].startswith("http://p3:")
    assert sorted(api.paths("DELETE")) == ["/v1/leases/lease-1", "/v1/leases/lease-2"]


def test_a_connection_error_is_reported_as_error_and_left_to_scrapys_retries(api):
    mw = middleware(api)

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        answer = await mw.process_exception(request, TimeoutError("timed out"))
        await settle(mw)
        return answer

    assert run(crawl()) is None
    assert api.reports()[-1] == ("/v1/leases/lease-1/report", {"result": "error", "target": "a.example"})
    assert api.paths("DELETE") == [], "the lease is kept: the health engine judges the proxy"


def test_a_proxy_that_cannot_be_reached_is_reported_unreachable_and_the_request_goes_through_another(api):
    from scrapy.exceptions import DownloadConnectionRefusedError, DownloadTimeoutError
    from twisted.internet.error import TCPTimedOutError

    mw = middleware(api)

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        # What Scrapy 2.19 raises for a refused connection (Twisted's, wrapped).
        refused = await mw.process_exception(request, DownloadConnectionRefusedError("Connection was refused by other side: 111"))
        await mw.process_request(refused)
        timed_out = await mw.process_exception(refused, TCPTimedOutError())
        await mw.process_request(timed_out)
        # A download that took too long may be the site's: an error, left to Scrapy's retries.
        slow = await mw.process_exception(timed_out, DownloadTimeoutError("Getting https://a.example/ took longer than 180.0 seconds."))
        await settle(mw)
        return refused, timed_out, slow

    refused, timed_out, slow = run(crawl())
    assert refused.meta["proxy"].startswith("http://p2:"), "sent again through another proxy"
    assert timed_out.meta["proxy"].startswith("http://p3:")
    assert slow is None
    assert api.reports() == [
        ("/v1/leases/lease-1/report", {"result": "unreachable", "target": "a.example"}),
        ("/v1/leases/lease-2/report", {"result": "unreachable", "target": "a.example"}),
        ("/v1/leases/lease-3/report", {"result": "error", "target": "a.example"}),
    ]


def test_a_ban_page_is_reported_blocked_once_and_sent_again(api):
    class Captchas:
        def response_is_ban(self, request, response):
            return b"captcha" in response.body

    mw = middleware(api, PROXY_OPERATOR_BAN_POLICY=Captchas())

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        retry = await mw.process_response(request, response(request, 200, b"<form>captcha</form>"))
        await mw.process_request(retry)
        page = await mw.process_response(retry, response(retry, 200, b"the page"))
        await settle(mw)
        return retry, page

    retry, page = run(crawl())
    assert isinstance(retry, Request) and retry.meta["proxy"].startswith("http://p2:")
    assert page.body == b"the page"
    assert api.reports() == [
        ("/v1/leases/lease-1/report", {"result": "blocked", "target": "a.example"}),
        ("/v1/leases/lease-2/report", {"status": 200, "target": "a.example"}),
    ], "the ban page counts once, as blocked"
    assert mw.stats.get_value("proxy_operator/reports/blocked") == 1
    assert mw.stats.get_value("proxy_operator/reports/ok") == 1


def test_requests_queued_in_a_dropped_leases_slot_move_to_the_new_lease(api):
    mw = middleware(api)
    slots = {}
    mw.crawler.engine = SimpleNamespace(downloader=SimpleNamespace(slots=slots), running=True)
    failures = []

    async def crawl():
        first, queued = Request("https://a.example/1"), Request("https://a.example/2")
        for request in (first, queued):
            await mw.process_request(request)
        waiting = Deferred()
        waiting.addErrback(failures.append)
        slots[queued.meta["download_slot"]] = SimpleNamespace(queue=deque([(queued, waiting)]))
        await mw.process_response(first, response(first, 403))
        moved = await mw.process_exception(queued, failures[0].value)
        await mw.process_request(moved)
        await settle(mw)
        return queued, moved

    queued, moved = run(crawl())
    assert isinstance(failures[0].value, LeaseDropped)
    assert not slots[queued.meta["download_slot"]].queue
    assert moved.meta["proxy"].startswith("http://p2:") and moved.dont_filter
    assert mw.stats.get_value("proxy_operator/rerouted_queued") == 1
    assert mw.stats.get_value("proxy_operator/rerouted") == 1


def test_every_lease_on_the_penalised_proxy_for_the_host_is_dropped(api):
    api.proxies = ["p1", "p1", "p2"]
    mw = middleware(api, PROXY_OPERATOR_LEASES_PER_SITE=2)

    async def crawl():
        first, second = Request("https://a.example/1"), Request("https://a.example/2")
        await mw.process_request(first)
        await mw.process_request(second)
        assert first.meta["proxy_operator_lease"] != second.meta["proxy_operator_lease"]
        retry = await mw.process_response(first, response(first, 403))
        await mw.process_request(retry)
        await settle(mw)
        return retry

    retry = run(crawl())
    assert retry.meta["proxy_operator_proxy"] == "crawl/p2"
    assert sorted(api.paths("DELETE")) == ["/v1/leases/lease-1", "/v1/leases/lease-2"]


def test_the_book_is_the_one_clock_a_proxy_it_grants_again_is_used_and_no_penalty_is_told_twice(api):
    # The operator's cooldown is short: after the 429, the book grants p1 again for the site
    # (its cooldown is over). The middleware takes it, with no cooldown clock of its own,
    # and says nothing more of the old penalty.
    api.cooldown = 0.0
    api.proxies = ["p1"]
    mw = middleware(api)

    async def crawl():
        request = Request("https://a.example/1")
        await mw.process_request(request)
        retry = await mw.process_response(request, response(request, 429))
        await mw.process_request(retry)
        page = await mw.process_response(retry, response(retry))
        await settle(mw)
        return retry, page

    retry, page = run(crawl())
    assert retry.meta["proxy_operator_proxy"] == "crawl/p1" and page.status == 200
    assert api.reports() == [
        ("/v1/leases/lease-1/report", {"status": 429, "target": "a.example"}),
        ("/v1/leases/lease-2/report", {"status": 200, "target": "a.example"}),
    ], "each answer reported once, on the lease it came through"


def test_an_answer_that_says_the_proxy_cools_down_drops_its_lease(api):
    # Another crawler's report put p1 in cooldown for the site: the answer to this crawler's
    # next report says so, and its next request gets another proxy.
    mw = middleware(api)

    async def crawl():
        request = Request("https://a.example/1")
        await mw.process_request(request)
        api.cooling[("p1", "a.example")] = time.time() + 60
        page = await mw.process_response(request, response(request))
        await settle(mw)
        second = Request("https://a.example/2")
        await mw.process_request(second)
        return page, second

    page, second = run(crawl())
    assert page.status == 200, "the page is good"
    assert second.meta["proxy_operator_proxy"] == "crawl/p2"
    assert api.paths("DELETE") == ["/v1/leases/lease-1"]


def test_a_penalty_report_is_sent_until_it_lands_with_one_report_id_before_the_next_lease(api):
    mw = middleware(api, PROXY_OPERATOR_API_WAIT=0.3)

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        api.unavailable = 6  # longer than the API wait: still sent, never dropped
        retry = await mw.process_response(request, response(request, 403))
        await mw.process_request(retry)
        await settle(mw)
        return retry

    retry = run(crawl())
    ids = api.report_ids("/v1/leases/lease-1/report")
    assert len(ids) == 7 and len(set(ids)) == 1, f"one report, sent until it landed: {ids}"
    last_report = max(i for i, c in enumerate(api.calls) if c[1] == "/v1/leases/lease-1/report")
    second_lease = [i for i, c in enumerate(api.calls) if c[1] == "/v1/leases"][1]
    assert last_report < second_lease, "the report landed before the next lease was asked for"
    assert retry.meta["proxy_operator_proxy"] == "crawl/p2"
    assert mw.stats.get_value("proxy_operator/reports/lost") is None


def test_a_report_sent_again_after_its_answer_was_lost_counts_once(api):
    # The API answers, and the answer is lost: the same report (its reportID) again is
    # heard as repeated, which the stand-in records like the server.
    discovery = middleware(api).discovery
    call = discovery.report_status_call("lease-1", 429, "a.example")
    api.lease_of["lease-1"] = ("p1", "a.example")
    api.active.add("lease-1")
    first, again = discovery.run(call), discovery.run(call)
    assert (first["repeated"], again["repeated"]) == (False, True)
    assert first["leaseAgain"] and first["cooldownSeconds"] == 300


def test_no_match_backs_off_then_leases_or_drops_the_request_without_crashing(api):
    # Proxies at capacity free a place at any release: the middleware polls.
    mw = middleware(api, PROXY_OPERATOR_NO_MATCH_WAIT=0.5)
    api.no_match = 1

    request = Request("https://a.example/")
    run(mw.process_request(request))
    assert request.meta["proxy"].startswith("http://p1:"), "leased after one back-off"
    assert mw.stats.get_value("proxy_operator/no_match") == 1

    api.no_match = 10
    with pytest.raises(IgnoreRequest, match="no proxy for b.example"):
        run(mw.process_request(Request("https://b.example/")))


def test_on_409_it_waits_until_the_first_proxy_leaves_its_cooldown_and_no_longer(api):
    # Every proxy cools down for the site: the answer says when the first is free, and the
    # middleware asks again then, not earlier (no polling) and not later.
    mw = middleware(api, PROXY_OPERATOR_NO_MATCH_WAIT=5)
    api.no_match = 1
    api.no_match_body = {"considered": 2, "atCapacity": 0, "inCooldown": 2, "unhealthy": 0,
                         "retryAfterSeconds": 2}
    started = time.monotonic()
    request = Request("https://a.example/")
    run(mw.process_request(request))
    took = time.monotonic() - started
    assert request.meta["proxy"].startswith("http://p1:")
    assert 2 <= took < 3, took
    assert len(api.paths("POST")) == 2, "asked once more, when the cooldown ended"

    # A cooldown that ends after the wait: given up at once, not after the wait.
    api.no_match = 1
    api.no_match_body = {**api.no_match_body, "retryAfterSeconds": 1800}
    started = time.monotonic()
    with pytest.raises(IgnoreRequest, match="no proxy for b.example"):
        run(mw.process_request(Request("https://b.example/")))
    assert time.monotonic() - started < 1


def test_a_response_given_up_on_is_not_retried_by_scrapys_retry_middleware(api):
    from scrapy.downloadermiddlewares.retry import RetryMiddleware

    mw = middleware(api, PROXY_OPERATOR_RETRY_TIMES=0)
    mw.crawler.spider = Spider.from_crawler(mw.crawler, "test")  # what RetryMiddleware logs about
    retry_mw = RetryMiddleware.from_crawler(mw.crawler)

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        given_up = await mw.process_response(request, response(request, 429))
        await settle(mw)
        return request, given_up

    request, given_up = run(crawl())
    assert given_up.status == 429
    assert retry_mw.process_response(request, given_up) is given_up, "not retried: the page goes to the spider"
    # RetryMiddleware keeps what is its own: a 503 the middleware passed on.
    other = Request("https://a.example/2")
    run(mw.process_request(other))
    passed = run(mw.process_response(other, response(other, 503)))
    assert isinstance(retry_mw.process_response(other, passed), Request)


def test_the_api_away_for_a_while_delays_leases_and_reports_and_loses_nothing(api):
    mw = middleware(api, PROXY_OPERATOR_API_WAIT=10)

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        api.outage(1.0)
        started = time.monotonic()
        page = await mw.process_response(request, response(request))
        # A penalty while the API is away: the next lease waits for its report.
        other = Request("https://b.example/")
        api.unavailable = 3
        await mw.process_request(other)
        limited = await mw.process_response(other, response(other, 429))
        await mw.process_request(limited)
        await settle(mw)
        return page, limited, time.monotonic() - started

    page, limited, took = run(crawl())
    assert page.status == 200, "the page went on at once; its report waited for the API"
    assert took >= 1.0
    assert ("/v1/leases/lease-1/report", {"status": 200, "target": "a.example"}) in api.reports()
    assert limited.meta["proxy"].startswith("http://p3:")
    assert api.index("POST", "/v1/leases/lease-2/report") < len(api.calls) - 1
    assert mw.leases.api.retries >= 3


def test_a_lease_call_gives_up_after_the_api_wait(api):
    mw = middleware(api, PROXY_OPERATOR_API_WAIT=0.5)
    api.stop()
    started = time.monotonic()
    with pytest.raises(IgnoreRequest, match="discovery API is away"):
        run(mw.process_request(Request("https://a.example/")))
    assert 0.5 <= time.monotonic() - started < 3
    api.start()


def test_closing_ends_a_wait_on_409_and_releases_every_lease_and_the_holders(api):
    mw = middleware(api, PROXY_OPERATOR_NO_MATCH_WAIT=60)

    async def crawl():
        held = Request("https://a.example/")
        await mw.process_request(held)
        api.no_match = 1000
        waiting = asyncio.ensure_future(mw.process_request(Request("https://b.example/")))
        await asyncio.sleep(0.7)
        started = time.monotonic()
        await mw.spider_closed()
        with pytest.raises(IgnoreRequest, match="stopped"):
            await waiting
        return time.monotonic() - started

    took = run(crawl())
    assert took < 2, "the wait on 409 ended with the close"
    assert "/v1/leases/lease-1" in api.paths("DELETE")
    assert "/v1/leases?holder=test%2Fholder" in api.paths("DELETE")
    assert api.active == set()
    assert mw.leases.leases == {}


def test_an_expiring_lease_is_replaced_and_closing_releases_every_lease(api):
    api.ttl = 3
    mw = middleware(api, PROXY_OPERATOR_TTL=3, PROXY_OPERATOR_RENEW_MARGIN=5)

    async def crawl():
        first, second, other = Request("https://a.example/1"), Request("https://a.example/2"), Request("https://b.example/")
        for request in (first, second, other):
            await mw.process_request(request)
        await settle(mw)
        assert api.paths("DELETE") == ["/v1/leases/lease-1"]
        await mw.spider_closed()
        return first, second

    first, second = run(crawl())
    assert first.meta["proxy"] != second.meta["proxy"], "a lease ending within the margin is replaced"
    assert sorted(api.paths("DELETE"))[:3] == ["/v1/leases/lease-1", "/v1/leases/lease-2", "/v1/leases/lease-3"]
    assert mw.leases.leases == {}
    assert mw.stats.get_value("proxy_operator/releases") == 3
