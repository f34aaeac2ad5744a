"""The Scrapy middleware against a small stand-in of the discovery API (a real HTTP server
on loopback that records every call); the run through real squid and the real operator is
the e2e test `tests/tests/e2e/crawlers.rs`."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from scrapy import Request
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.test import get_crawler

from proxy_operator_client.scrapy import ProxyOperatorMiddleware


class FakeApi:
    """Answers leases from a queue of 409s, then grants; maps statuses like the server."""

    def __init__(self):
        self.calls: list[tuple[str, str, dict]] = []
        self.no_match = 0
        self.granted = 0
        self.ttl = 300
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_port}"
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body=None):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                api.calls.append(("POST", self.path, body))
                assert self.headers["Authorization"] == "Bearer t0ken"
                if self.path == "/v1/leases":
                    if api.no_match > 0:
                        api.no_match -= 1
                        return self._answer(409, {"error": "no_match", "message": "none", "considered": 1})
                    api.granted += 1
                    n = api.granted
                    return self._answer(201, {
                        "leaseID": f"lease-{n}", "target": body.get("target"),
                        "proxy": {"namespace": "crawl", "name": f"p{n}", "host": "127.0.0.1",
                                  "port": 3128, "url": f"http://user{n}:pa%40ss@127.0.0.1:3128"},
                        "expiresAt": "2030-01-01T00:00:00Z", "ttlSeconds": api.ttl})
                if "status" in body:
                    result = {429: "rate_limited", 403: "blocked", 401: "blocked", 407: None}.get(
                        body["status"], "error" if body["status"] >= 500 else "ok")
                    again = body["status"] in (401, 403, 407, 429)
                    return self._answer(200, {"result": result, "leaseAgain": again})
                return self._answer(204)

            def do_DELETE(self):
                api.calls.append(("DELETE", self.path, {}))
                self._answer(204)

        return Handler

    def paths(self, method):
        return [path for m, path, _ in self.calls if m == method]


@pytest.fixture
def api():
    api = FakeApi()
    yield api
    api.server.shutdown()


def middleware(api, **settings):
    crawler = get_crawler(settings_dict={
        "PROXY_OPERATOR_URL": api.url, "PROXY_OPERATOR_TOKEN": "t0ken",
        "PROXY_OPERATOR_SELECTOR": {"geo": "eu"}, **settings})
    return ProxyOperatorMiddleware.from_crawler(crawler)


def run(coroutine):
    return asyncio.run(coroutine)


def test_one_lease_per_host_carrying_the_lease_url_with_its_credentials(api):
    mw = middleware(api)

    async def crawl():
        requests = [Request(u) for u in ("https://a.example/1", "https://A.example/2", "https://b.example/")]
        for request in requests:
            await mw.process_request(request)
        return requests

    a1, a2, b = run(crawl())
    assert a1.meta["proxy"] == "http://user1:pa%40ss@127.0.0.1:3128"
    assert a2.meta["proxy"] == a1.meta["proxy"], "one lease per host, case-insensitive"
    assert b.meta["proxy"] == "http://user2:pa%40ss@127.0.0.1:3128"
    leases = [body for m, path, body in api.calls if path == "/v1/leases"]
    assert leases == [
        {"selector": {"geo": "eu"}, "ttlSeconds": 300, "target": "a.example"},
        {"selector": {"geo": "eu"}, "ttlSeconds": 300, "target": "b.example"},
    ]
    assert a1.meta.get("proxy_operator") is None
    skipped = Request("https://a.example/", meta={"proxy_operator": False})
    run(mw.process_request(skipped))
    assert "proxy" not in skipped.meta


def test_every_status_is_reported_and_a_rate_limit_leases_again(api):
    mw = middleware(api, PROXY_OPERATOR_RETRY_TIMES=1)

    async def crawl():
        request = Request("https://a.example/page")
        await mw.process_request(request)
        ok = await mw.process_response(request, Response(request.url, status=200, request=request))
        limited = await mw.process_response(request, Response(request.url, status=429, request=request))
        assert isinstance(limited, Request), "sent again through a new lease"
        await mw.process_request(limited)
        again = await mw.process_response(limited, Response(limited.url, status=429, request=limited))
        return ok, limited, again

    ok, limited, again = run(crawl())
    assert isinstance(ok, Response) and ok.status == 200
    assert limited.dont_filter and limited.meta["proxy"].startswith("http://user2:")
    assert isinstance(again, Response) and again.status == 429, "gave up after one new lease"
    reports = [(path, body) for m, path, body in api.calls if path.endswith("/report")]
    assert reports == [
        ("/v1/leases/lease-1/report", {"status": 200, "target": "a.example"}),
        ("/v1/leases/lease-1/report", {"status": 429, "target": "a.example"}),
        ("/v1/leases/lease-2/report", {"status": 429, "target": "a.example"}),
    ]
    assert api.paths("DELETE") == ["/v1/leases/lease-1", "/v1/leases/lease-2"]
    assert mw.stats.get_value("proxy_operator/reports/rate_limited") == 2
    assert mw.stats.get_value("proxy_operator/lease_again") == 1


def test_a_407_leases_again_on_a_response_and_on_a_connect(api):
    mw = middleware(api)

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        retry = await mw.process_response(request, Response(request.url, status=407, request=request))
        await mw.process_request(retry)
        tunnel = TunnelError("Could not open CONNECT tunnel with proxy 127.0.0.1:3128 "
                             "[{'status': 407, 'reason': b'Proxy Authentication Required'}]")
        again = await mw.process_exception(retry, tunnel)
        await mw.process_request(again)
        return again

    again = run(crawl())
    assert again.meta["proxy"].startswith("http://user3:")
    assert api.paths("DELETE") == ["/v1/leases/lease-1", "/v1/leases/lease-2"]


def test_a_connection_error_is_reported_as_error_and_left_to_scrapys_retries(api):
    mw = middleware(api)

    async def crawl():
        request = Request("https://a.example/")
        await mw.process_request(request)
        return await mw.process_exception(request, TimeoutError("timed out"))

    assert run(crawl()) is None
    assert api.calls[-1] == ("POST", "/v1/leases/lease-1/report", {"result": "error", "target": "a.example"})
    assert api.paths("DELETE") == [], "the lease is kept: the health engine judges the proxy"


def test_no_match_backs_off_then_leases_or_drops_the_request_without_crashing(api):
    mw = middleware(api, PROXY_OPERATOR_NO_MATCH_WAIT=0.5)
    api.no_match = 1

    request = Request("https://a.example/")
    run(mw.process_request(request))
    assert request.meta["proxy"].startswith("http://user1:"), "leased after one back-off"
    assert mw.stats.get_value("proxy_operator/no_match") == 1

    api.no_match = 10
    with pytest.raises(IgnoreRequest, match="no proxy for b.example"):
        run(mw.process_request(Request("https://b.example/")))


def test_an_expiring_lease_is_replaced_and_closing_releases_every_lease(api):
    api.ttl = 3
    mw = middleware(api, PROXY_OPERATOR_TTL=3, PROXY_OPERATOR_RENEW_MARGIN=5)

    async def crawl():
        first, second, other = Request("https://a.example/1"), Request("https://a.example/2"), Request("https://b.example/")
        for request in (first, second, other):
            await mw.process_request(request)
        return first, second

    first, second = run(crawl())
    assert first.meta["proxy"] != second.meta["proxy"], "a lease ending within the margin is replaced"
    assert api.paths("DELETE") == ["/v1/leases/lease-1"]
    mw.spider_closed()
    assert sorted(api.paths("DELETE")) == ["/v1/leases/lease-1", "/v1/leases/lease-2", "/v1/leases/lease-3"]
    assert mw.leases == {}
