"""`LeasedContexts` against the stand-in of the discovery API and a stand-in browser; the
crawl with real Playwright and chromium is the e2e test `tests/tests/e2e/crawlers.rs`."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from fake_api import FakeApi
from proxy_operator_client import Discovery
from proxy_operator_client.playwright import LeasedContexts, NoProxy


class Context:
    def __init__(self, options):
        self.options = options
        self.closed = False
        self.pages = 0
        self.listeners = []

    def on(self, event, listener):
        if event == "response":
            self.listeners.append(listener)

    def answer(self, status, page=True, body=""):
        """Sends the context's `response` listeners a response, as Playwright does when its
        status line comes, and returns it (for `judge`)."""
        answered = response(status, page, body)
        for listener in self.listeners:
            listener(answered)
        return answered

    async def new_page(self):
        if self.closed:
            raise RuntimeError("Target page, context or browser has been closed")
        self.pages += 1
        return SimpleNamespace(close=self._nothing)

    async def _nothing(self):
        pass

    async def close(self):
        self.closed = True

    async def route(self, pattern, handler):
        assert pattern == "**/*"
        self.guard = handler

    async def guarded(self):
        """What the context's route guard does with a request now: abort or continue."""
        done = []

        async def abort(reason):
            done.append(("abort", reason))

        async def continue_():
            done.append(("continue", None))

        await self.guard(SimpleNamespace(abort=abort, continue_=continue_))
        return done[0]


class Browser:
    def __init__(self):
        self.contexts = []

    async def new_context(self, **options):
        self.contexts.append(Context(options))
        return self.contexts[-1]


@pytest.fixture
def api():
    api = FakeApi()
    yield api
    api.close()


class Request:
    """A Playwright request: to a page's own navigation, or to one of its resources."""

    def __init__(self, page):
        self.page = page
        self.frame = SimpleNamespace(parent_frame=None)

    def is_navigation_request(self):
        return self.page


def response(status, page=True, body=""):
    async def text():
        return body

    return SimpleNamespace(status=status, request=Request(page), text=text)


def test_one_context_per_lease_its_proxy_apart_and_a_penalty_closes_it_after_its_pages(api):
    browser = Browser()

    async def crawl():
        contexts = LeasedContexts(browser, Discovery(api.url, "t0ken", holder="test/holder"),
                                  context_options={"ignore_https_errors": True})
        (one, _), (two, _) = await asyncio.gather(contexts.new_page("https://a.example/1"),
                                                  contexts.new_page("https://a.example/2"))
        assert one.context is two.context and len(browser.contexts) == 1
        assert browser.contexts[0].options == {"ignore_https_errors": True, "proxy": {
            "server": "http://127.0.0.1:3128", "username": "p1", "password": "pa@ss"}}
        assert await browser.contexts[0].guarded() == ("continue", None)
        assert await contexts.judge(two, response(429)) is False
        await asyncio.sleep(0)
        assert not browser.contexts[0].closed, "the other page is still on its way through it"
        assert await browser.contexts[0].guarded() == ("abort", "blockedbyclient"), \
            "no request leaves through the proxy once the lease is dropped"
        assert await contexts.judge(one, response(200)) is True
        await asyncio.sleep(0)
        assert browser.contexts[0].closed, "closed with its last page"
        three, _ = await contexts.new_page("https://a.example/3")
        assert three.context.options["proxy"]["username"] == "p2"
        await contexts.close()
        return contexts

    contexts = run(crawl())
    assert browser.contexts[1].closed
    assert sorted(api.paths("DELETE")) == ["/v1/leases/lease-1", "/v1/leases/lease-2", "/v1/leases?holder=test%2Fholder"]
    assert contexts.stats["reports/rate_limited"] == 1


def test_a_ban_page_is_reported_blocked_once(api):
    browser = Browser()

    async def crawl():
        contexts = LeasedContexts(browser, Discovery(api.url, "t0ken"), is_ban=lambda r, page: page == "captcha")
        leased, _ = await contexts.new_page("https://a.example/")
        assert await contexts.judge(leased, response(200), "captcha") is False
        leased, _ = await contexts.new_page("https://a.example/")
        assert await contexts.judge(leased, response(200), "the page") is True
        await contexts.close()

    run(crawl())
    assert api.reports() == [
        ("/v1/leases/lease-1/report", {"result": "blocked", "target": "a.example"}),
        ("/v1/leases/lease-2/report", {"status": 200, "target": "a.example"}),
    ]


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_429_ends_the_proxy_for_the_site_as_its_status_line_comes_before_its_page_loads(api):
    browser = Browser()

    async def crawl():
        contexts = LeasedContexts(browser, Discovery(api.url, "t0ken"))
        (one, _), (two, _) = await asyncio.gather(contexts.new_page("https://a.example/1"),
                                                  contexts.new_page("https://a.example/2"))
        context = browser.contexts[0]
        context.answer(403, page=False)
        await asyncio.sleep(0)
        assert await context.guarded() == ("continue", None), "a resource's 403 is not the page's answer"
        answered = context.answer(429)
        await asyncio.sleep(0)
        assert await context.guarded() == ("abort", "blockedbyclient"), \
            "no request leaves once the status line said 429, while the page still loads"
        assert await contexts.judge(one, answered) is False
        assert await contexts.judge(two, response(200)) is True, "a page sent before is judged as usual"
        await asyncio.sleep(0)
        assert context.closed
        three, _ = await contexts.new_page("https://a.example/3")
        assert three.proxy == "crawl/p2"
        await contexts.close()

    run(crawl())
    assert [(path, body.get("status")) for path, body in api.reports()] == [
        ("/v1/leases/lease-1/report", 429), ("/v1/leases/lease-1/report", 200)], "the 429 reported once"


def test_a_ban_page_ends_the_proxy_for_the_site_as_its_body_comes_before_it_loads(api):
    browser = Browser()

    async def crawl():
        contexts = LeasedContexts(browser, Discovery(api.url, "t0ken"),
                                  is_ban_body=lambda body, response: "captcha" in body)
        (one, _), (two, _) = await asyncio.gather(contexts.new_page("https://a.example/1"),
                                                  contexts.new_page("https://a.example/2"))
        context = browser.contexts[0]
        good = context.answer(200, body="a page")
        ban = context.answer(200, body="a captcha")
        for _ in range(3):
            await asyncio.sleep(0)
        assert await context.guarded() == ("abort", "blockedbyclient"), \
            "no request leaves once the body was a ban page, while the page still loads"
        assert await contexts.judge(two, ban) is False
        assert await contexts.judge(one, good) is True
        await contexts.close()

    run(crawl())
    assert [(path, body.get("result", body.get("status"))) for path, body in api.reports()] == [
        ("/v1/leases/lease-1/report", "blocked"), ("/v1/leases/lease-1/report", 200)], \
        "the ban reported once, as its body came; the good page once, when judged"


def test_six_pages_at_once_in_a_context_and_the_seventh_waits_for_its_lease_not_in_the_browser(api):
    browser = Browser()

    async def crawl():
        contexts = LeasedContexts(browser, Discovery(api.url, "t0ken"))
        six = [await contexts.for_url(f"https://a.example/{n}") for n in range(6)]
        assert {id(leased.context) for leased in six} == {id(browser.contexts[0])}
        seventh = asyncio.ensure_future(contexts.for_url("https://a.example/6"))
        await asyncio.sleep(0.05)
        assert not seventh.done(), "a seventh page waits while six are on their way"
        assert await contexts.judge(six[0], response(200)) is True
        assert (await asyncio.wait_for(seventh, 5)).context is browser.contexts[0], \
            "a page judged frees its place"
        eighth = asyncio.ensure_future(contexts.for_url("https://a.example/7"))
        await asyncio.sleep(0.05)
        assert not eighth.done()
        assert await contexts.judge(six[1], response(429)) is False
        moved = await asyncio.wait_for(eighth, 5)
        assert moved.proxy == "crawl/p2", "after a penalty the waiting page leases another proxy"
        await contexts.close()

    run(crawl())
    assert api.granted == 2


def test_closing_ends_a_wait_for_a_place_in_a_context(api):
    browser = Browser()

    async def crawl():
        contexts = LeasedContexts(browser, Discovery(api.url, "t0ken"), pages_per_context=1)
        await contexts.for_url("https://a.example/1")
        waiting = asyncio.ensure_future(contexts.for_url("https://a.example/2"))
        await asyncio.sleep(0.05)
        await contexts.close()
        with pytest.raises(NoProxy):
            await asyncio.wait_for(waiting, 5)

    run(crawl())
    assert api.granted == 1
