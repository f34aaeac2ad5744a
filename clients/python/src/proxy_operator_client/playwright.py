"""Playwright browser contexts on proxy-operator's proxies: one context per lease, its proxy
given to the context as Playwright takes it (``server``, ``username`` and ``password``
apart: Chromium takes no credentials in a proxy URL).

    async with LeasedContexts(browser, Discovery(url, token)) as contexts:
        leased, page = await contexts.new_page("https://shop.example/page/1")
        response = await page.goto("https://shop.example/page/1")
        if await contexts.judge(leased, response, page):
            ...  # the page is good; else its proxy is done for the site: go again

:meth:`LeasedContexts.judge` reports the page's response status (a ban page that `is_ban`
recognises as ``blocked``, once), and after a 429, 401, 403, 407 or a ban page drops every
lease on that proxy for the site (no page is opened on it again, no request leaves through
its context any more, which closes once the pages already on their way through it are
judged), lands the report, and releases: the
next :meth:`LeasedContexts.for_url` gets another proxy (leasing is as
:mod:`proxy_operator_client.leases` says).

A 429, 401, 403 or 407 is acted on as soon as its status line reaches the browser (the
context's ``response`` event), and a ban page as soon as its body has (``is_ban_body``), not
when the crawler's ``goto`` returns: the page must first load, in a renderer a busy machine
starts seconds later, and meanwhile the other pages on the lease kept going to a site that
had said no. :meth:`LeasedContexts.judge` then finds that answer reported. (``is_ban``,
which reads the page, can only run once it loaded.) :meth:`LeasedContexts.close` (or leaving the
``async with``) closes every context and releases every lease, those of the holder too.

A context has at most ``pages_per_context`` pages at once (6): Chromium opens at most six
connections to one site through one proxy, and a seventh request, once the context's guard
let it go, would wait inside the browser for a connection to free, where a penalty can no
longer stop it. A page past the bound waits for its lease here instead.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import urllib.parse
import weakref
from typing import Any, Awaitable, Callable

from .api import Discovery
from .leases import LEASE_AGAIN, Held, LeaseKeeper, NoProxy

logger = logging.getLogger(__name__)

__all__ = ["LeasedContexts", "NoProxy", "CHROMIUM_ARGS"]

#: Flags for a headless Chromium in a closed network (no background calls home).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: The connections Chromium opens at most to one site (host and port) through one proxy.
CHROMIUM_CONNECTIONS_PER_SITE = 6

#: `is_ban(response, page)`: whether a page answered 2xx is a ban page (a captcha), from the
#: page once it loaded.
BanCheck = Callable[[Any, Any], "bool | Awaitable[bool]"]

#: `is_ban_body(body, response)`: whether a page answered 2xx is a ban page, from its body as
#: soon as it arrived.
BodyBanCheck = Callable[[str, Any], "bool | Awaitable[bool]"]


class Leased:
    """A lease and the browser context on its proxy."""

    def __init__(self, held: Held, context: Any):
        self.held = held
        self.context = context

    @property
    def proxy(self) -> str:
        return self.held.lease.proxy


class LeasedContexts:
    """Browser contexts of `browser` on leased proxies, per target host."""

    def __init__(
        self,
        browser: Any,
        discovery: Discovery,
        *,
        selector: dict[str, str] | None = None,
        ttl: int = 300,
        leases_per_site: int = 1,
        pages_per_context: int = CHROMIUM_CONNECTIONS_PER_SITE,
        no_match_wait: float = 300.0,
        is_ban: BanCheck | None = None,
        is_ban_body: BodyBanCheck | None = None,
        context_options: dict[str, Any] | None = None,
    ):
        self.browser = browser
        self.pages_per_context = max(1, pages_per_context)
        self.discovery = discovery
        self.is_ban = is_ban
        self.is_ban_body = is_ban_body
        self.context_options = context_options or {}
        self.stats: dict[str, int] = {}
        self.closing_contexts: set[asyncio.Task] = set()
        self.leases = LeaseKeeper(
            discovery,
            selector=selector,
            ttl=ttl,
            leases_per_site=leases_per_site,
            no_match_wait=no_match_wait,
            count=self._count,
            on_drop=self._close_context,
        )
        self._opening: dict[str, asyncio.Future] = {}
        # Verdicts on a response as it came, by its request (True: penalised, and reported):
        # `judge` awaits them, never reports a penalty again.
        self._early: weakref.WeakKeyDictionary[Any, asyncio.Future] = weakref.WeakKeyDictionary()

    async def __aenter__(self) -> "LeasedContexts":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def new_page(self, url: str) -> tuple[Leased, Any]:
        """A new page for `url` in a context on a live lease for its host: should the lease
        be dropped while the page opens (another page's penalty), the page is closed and
        another lease taken, so that no navigation starts on a proxy known to be done for
        the site."""
        while True:
            leased = await self.for_url(url)
            try:
                page = await leased.context.new_page()
            except Exception:
                self._done(leased)
                if not leased.held.dropped:
                    raise
                continue  # its context closed under it: the lease is gone
            if not leased.held.dropped:
                return leased, page
            await _quietly(page.close())
            self._done(leased)

    async def for_url(self, url: str) -> Leased:
        """A context on a lease for the URL's host (shared by the callers using that lease);
        raises `NoProxy` when no proxy came within the waits."""
        held = await self.leases.acquire(_host(url), per_lease=self.pages_per_context)
        if held.extra is None:
            # One context per lease: the first caller opens it, the others wait for it.
            opening = self._opening.get(held.lease.id)
            if opening is None:
                opening = asyncio.ensure_future(self._open(held))
                self._opening[held.lease.id] = opening
            await opening
        return Leased(held, held.extra)

    async def _open(self, held: Held) -> None:
        options = {**self.context_options, "proxy": held.lease.playwright_proxy()}
        context = await self.browser.new_context(**options)
        if held.dropped:
            await context.close()  # dropped while it opened
            return
        # A page opened on the lease before it was dropped may start its navigation after
        # (a busy browser takes seconds): no request leaves through a proxy the crawler knows
        # is done for the site. What was already sent comes back and is judged as usual.
        async def guard(route: Any) -> None:
            if held.dropped:
                await route.abort("blockedbyclient")
            else:
                await route.continue_()

        await context.route("**/*", guard)
        context.on("response", lambda response: self._status_line(held, response))
        held.extra = context

    def _status_line(self, held: Held, response: Any) -> None:
        """A page's answer as its status line arrives: a 429, 401, 403 or 407 ends the proxy
        for the site at once; a 2xx does once its body has arrived, if `is_ban_body` calls it
        a ban page."""
        if not _is_page(response):
            return
        status = response.status
        if status in LEASE_AGAIN:
            report = self.discovery.report_status_call(held.lease.id, status, held.host)
            self._early[response.request] = asyncio.ensure_future(self._penalised(held, report))
        elif 200 <= status < 300 and self.is_ban_body is not None:
            self._early[response.request] = asyncio.ensure_future(self._body_verdict(held, response))

    async def _penalised(self, held: Held, report: Any) -> bool:
        await self.leases.penalise(held, report)
        return True

    async def _body_verdict(self, held: Held, response: Any) -> bool:
        """Whether `is_ban_body` calls the response's body a ban page (then penalised); no
        body: not one."""
        try:
            body = await response.text()
        except Exception:  # noqa: BLE001 - the page went before its body came
            return False
        if self.is_ban_body is None or not await _maybe(self.is_ban_body(body, response)):
            return False
        report = self.discovery.report_result_call(held.lease.id, "blocked", held.host)
        return await self._penalised(held, report)

    async def judge(self, leased: Leased, response: Any, page: Any = None) -> bool:
        """Reports what the page got through the lease and says whether the page is good;
        False when its proxy is done for the site (the lease is gone: ask
        :meth:`for_url` again). A navigation without a response counts as an error."""
        try:
            return await self._judge(leased.held, response, page)
        finally:
            self._done(leased)  # after the checks, which may read the page

    async def _judge(self, held: Held, response: Any, page: Any) -> bool:
        calls, lease_id, host = self.discovery, held.lease.id, held.host
        if response is None:
            self.leases.report_in_background(held, calls.report_result_call(lease_id, "error", host))
            return False
        early = self._early.get(response.request)
        if early is not None and await asyncio.shield(early):
            return False  # penalised, and reported, as it came
        status = response.status
        if 200 <= status < 300 and self.is_ban is not None and await _maybe(self.is_ban(response, page)):
            await self.leases.penalise(held, calls.report_result_call(lease_id, "blocked", host))
            return False
        if status in LEASE_AGAIN:
            await self.leases.penalise(held, calls.report_status_call(lease_id, status, host))
            return False
        self.leases.report_in_background(held, calls.report_status_call(lease_id, status, host))
        return True

    def failed(self, leased: Leased) -> None:
        """A navigation through the lease failed without a response (a timeout, a reset)."""
        held = self._done(leased)
        self.leases.report_in_background(held, self.discovery.report_result_call(held.lease.id, "error", held.host))

    async def close(self) -> None:
        """Closes every context and releases every lease, then every lease of the holder."""
        await self.leases.close()
        for held in self.leases.known.values():
            held.in_flight = 0  # whatever is still on its way ends with its context
            self._close_context(held)
        if self.closing_contexts:
            await asyncio.wait(list(self.closing_contexts), timeout=10)
        self.leases.api.executor.shutdown(wait=False)

    def _done(self, leased: Leased) -> Held:
        """The lease a page went through, no longer counting it; a dropped lease's context
        closes with its last page."""
        held = self.leases.done(leased.held.lease.id) or leased.held
        if held.dropped and held.in_flight == 0:
            self._close_context(held)
        return held

    def _close_context(self, held: Held) -> None:
        if held.extra is None or held.in_flight > 0:
            return
        context, held.extra = held.extra, None
        if context is not None:
            task = asyncio.ensure_future(_quietly(context.close()))
            self.closing_contexts.add(task)
            task.add_done_callback(self.closing_contexts.discard)

    def _count(self, key: str, n: int) -> None:
        self.stats[key] = self.stats.get(key, 0) + n


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _quietly(closing: Awaitable[Any]) -> None:
    try:
        await closing
    except Exception as error:  # noqa: BLE001 - a context already gone is closed enough
        logger.debug("proxy-operator: closing a context: %s", error)


def _is_page(response: Any) -> bool:
    """Whether `response` answers a page's own navigation (its main frame), which `judge`
    is given."""
    try:
        request = response.request
        return bool(request.is_navigation_request()) and request.frame.parent_frame is None
    except Exception:  # noqa: BLE001 - a service worker's request has no frame
        return False


def _host(url: str) -> str:
    return (urllib.parse.urlsplit(url).hostname or "").lower()
