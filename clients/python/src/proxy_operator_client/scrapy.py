"""A Scrapy downloader middleware that crawls through proxy-operator's proxies.

Enable it before Scrapy's own proxy middleware (HttpProxyMiddleware, 750), which turns the
`user:pass@` of `meta['proxy']` into a `Proxy-Authorization` header::

    DOWNLOADER_MIDDLEWARES = {"proxy_operator_client.scrapy.ProxyOperatorMiddleware": 740}
    PROXY_OPERATOR_URL = "http://proxy-operator-discovery:8090"

Settings:

- ``PROXY_OPERATOR_URL`` (required, else the middleware is disabled): the discovery API;
- ``PROXY_OPERATOR_TOKEN`` (default: the environment variable of that name): its bearer token;
- ``PROXY_OPERATOR_SELECTOR`` (default ``{}``): label terms the proxies must carry;
- ``PROXY_OPERATOR_TTL`` (default 300): lease seconds; a lease ending within
  ``PROXY_OPERATOR_RENEW_MARGIN`` (default 5) seconds is replaced before a request uses it;
- ``PROXY_OPERATOR_LEASES_PER_SITE`` (default 1): leases held at once per target host;
  requests to the host go to the one with the fewest in flight;
- ``PROXY_OPERATOR_RETRY_TIMES`` (default 10): how often one request is sent again through a
  new lease after a rate limit, a block, a ban page or a 407, before its response goes to
  the spider (``meta['proxy_operator_gave_up']`` is then true);
- ``PROXY_OPERATOR_NO_MATCH_WAIT`` (default 300, the operator's default rate-limit
  cooldown): how long a request waits for a proxy while the API answers 409 no_match, then
  ``IgnoreRequest``. It waits as the answer says: until the first proxy cooling down for
  the site is free (``Retry-After``), given up at once when that is later than the wait
  allows; polling with a backoff (0.5 s to 10 s) while proxies at capacity may free a place
  sooner (a drain, a crawl holding every place);
- ``PROXY_OPERATOR_API_WAIT`` (default 60): how long one call to the API is retried while
  the API is away (connection errors, timeouts, 5xx, 503 ``Retry-After``), with backoff
  and jitter. A request waits for its lease that long too; a report of a rate limit, a
  block or a ban is sent until it lands (at most that long once the spider closes); any
  other report that could not land is counted as ``reports/lost``, and its page is kept;
- ``PROXY_OPERATOR_HOLDER`` (default ``scrapy/<host name>/<pid>``): the name leases carry;
- ``PROXY_OPERATOR_BAN_POLICY`` (default none): an object, or the import path of a class
  or object, with ``response_is_ban(request, response)`` and, optionally,
  ``exception_is_ban(request, exception)`` (scrapy-rotating-proxies' ``BanDetectionPolicy``
  protocol): a response it calls a ban (a captcha page answered 200) is reported
  ``blocked`` (once, never also ``ok``) and sent again through another proxy.

Timeouts: the wait for a lease happens in ``process_request``, before the download starts,
so ``DOWNLOAD_TIMEOUT`` bounds the download alone and a wait never eats into it.

With Scrapy's RetryMiddleware (550, on by default): this middleware (740) sees each
response first, and owns 401, 403, 407, 429 and ban pages: it reports them and sends the
request again through another proxy, so RetryMiddleware never sees them; a response it
gave up on (``PROXY_OPERATOR_RETRY_TIMES``) reaches the spider with ``dont_retry`` set, so
RetryMiddleware does not retry it either. RetryMiddleware keeps 5xx, 408 and connection
errors (``RETRY_HTTP_CODES``, ``RETRY_TIMES``), each of them reported once, as ``error``,
on the lease it went through; its retries lease as any request does. Leave 429 in
``RETRY_HTTP_CODES`` or take it out: no page is lost between the two either way.

Behaviour: every request to a target host (``meta['proxy_operator_proxy']`` names the
proxy) goes through a lease for that host, in a download slot of its own
(``meta['download_slot']`` = ``proxy-operator:<lease id>``), so ``DOWNLOAD_DELAY`` and
``CONCURRENT_REQUESTS_PER_DOMAIN`` apply per proxy and site. After a 429, 401, 403 or 407
(the server's own table, applied here too so that it holds while the API is away) or a ban
page, the lease is dropped at once with every other lease on that proxy for the host, the
requests queued in its slot move to a new lease, the report lands before the next lease for
the host is asked for, and the request is sent again. Any other status is reported in the
background; an answer that says ``leaseAgain`` (the proxy cools down for the site) drops the
lease. Which proxy comes next, and when a cooled-down one comes back, is the lease book's
to say: the middleware keeps no cooldown of its own. Every report names itself
(``reportID``), so a report sent again counts once. A proxy that could not be reached
(its connection refused, not made in time, no route to it) is reported ``unreachable``:
after a few such reports the lease book takes it out for every crawler (passive health),
and the request goes again through another lease. Any other connection error or timeout
(the site's, through the proxy) is reported as ``error`` and left to Scrapy's retries. A request with
``meta['proxy_operator'] = False``, or with a ``meta['proxy']`` of its own, is left alone.

Every lease is released when the spider closes, whatever closed it (finished, SIGINT or
SIGTERM, ``CloseSpider``), waits on 409 and on the API end at once, and a
``DELETE /v1/leases?holder=`` then ends any lease whose grant answer never arrived; at
interpreter exit, whatever is still held is released (a second Ctrl-C).

Needs the asyncio reactor, Scrapy's default since 2.13.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import re
from typing import Any

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.utils.httpobj import urlparse_cached

from .api import Discovery, default_holder
from .leases import LEASE_AGAIN, Held, LeaseKeeper, NoProxy

logger = logging.getLogger(__name__)

LEASE_META = "proxy_operator_lease"
PROXY_META = "proxy_operator_proxy"
RETRIES_META = "proxy_operator_retries"
GAVE_UP_META = "proxy_operator_gave_up"
SLOT_PREFIX = "proxy-operator:"


class LeaseDropped(Exception):
    """A request queued in the slot of a lease that was dropped: sent again through another."""


class ProxyOperatorMiddleware:
    def __init__(
        self,
        discovery: Discovery,
        *,
        selector: dict[str, str],
        ttl: int,
        renew_margin: float,
        retry_times: int,
        no_match_wait: float,
        leases_per_site: int = 1,
        ban_policy: Any = None,
        stats: Any = None,
        crawler: Any = None,
    ):
        self.discovery = discovery
        self.retry_times = retry_times
        self.ban_policy = ban_policy
        self.stats = stats
        self.crawler = crawler
        self.leases = LeaseKeeper(
            discovery,
            selector=selector,
            ttl=ttl,
            renew_margin=renew_margin,
            leases_per_site=leases_per_site,
            no_match_wait=no_match_wait,
            stopping=self._stopping,
            count=self._count,
            on_drop=self._moved,
        )
        atexit.register(self.leases.release_at_exit)

    @classmethod
    def from_crawler(cls, crawler: Any) -> "ProxyOperatorMiddleware":
        settings = crawler.settings
        url = settings.get("PROXY_OPERATOR_URL")
        if not url:
            raise NotConfigured("PROXY_OPERATOR_URL is not set")
        token = settings.get("PROXY_OPERATOR_TOKEN") or os.environ.get("PROXY_OPERATOR_TOKEN")
        discovery = Discovery(
            url,
            token,
            api_wait=settings.getfloat("PROXY_OPERATOR_API_WAIT", 60.0),
            holder=settings.get("PROXY_OPERATOR_HOLDER") or default_holder("scrapy"),
        )
        middleware = cls(
            discovery,
            selector=settings.getdict("PROXY_OPERATOR_SELECTOR"),
            ttl=settings.getint("PROXY_OPERATOR_TTL", 300),
            renew_margin=settings.getfloat("PROXY_OPERATOR_RENEW_MARGIN", 5.0),
            retry_times=settings.getint("PROXY_OPERATOR_RETRY_TIMES", 10),
            no_match_wait=settings.getfloat("PROXY_OPERATOR_NO_MATCH_WAIT", 300.0),
            leases_per_site=settings.getint("PROXY_OPERATOR_LEASES_PER_SITE", 1),
            ban_policy=_policy(settings.get("PROXY_OPERATOR_BAN_POLICY")),
            stats=crawler.stats,
            crawler=crawler,
        )
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        crawler.proxy_operator = middleware
        return middleware

    # ---- the downloader middleware's hooks ------------------------------------------------

    async def process_request(self, request: Request) -> None:
        if request.meta.get("proxy_operator") is False:
            return None
        if request.meta.get("proxy") and LEASE_META not in request.meta:
            return None  # a proxy of the spider's own: hands off
        try:
            held = await self.leases.acquire(_host(request))
        except NoProxy as error:
            raise IgnoreRequest(f"proxy-operator: {error}") from None
        request.meta["proxy"] = held.lease.url
        request.meta[LEASE_META] = held.lease.id
        request.meta[PROXY_META] = held.lease.proxy
        request.meta["download_slot"] = SLOT_PREFIX + held.lease.id
        return None

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        held = self.leases.done(request.meta.get(LEASE_META))
        if held is None:
            return response
        calls, lease_id, host = self.discovery, held.lease.id, held.host
        ban = self._is_ban("response_is_ban", request, response)
        if ban:
            await self.leases.penalise(held, calls.report_result_call(lease_id, "blocked", host))
        elif response.status in LEASE_AGAIN:
            await self.leases.penalise(held, calls.report_status_call(lease_id, response.status, host))
        else:
            self.leases.report_in_background(held, calls.report_status_call(lease_id, response.status, host))
            return response
        retry = self._retry(request, f"status {response.status}" + (" (a ban page)" if ban else ""))
        if retry is not None:
            return retry
        # Given up: the response goes to the spider, and RetryMiddleware leaves it alone.
        request.meta[GAVE_UP_META] = True
        request.meta["dont_retry"] = True
        return response

    async def process_exception(self, request: Request, exception: Exception) -> Request | None:
        if isinstance(exception, LeaseDropped):
            self._count("rerouted")
            return _again(request, request.meta.get(RETRIES_META, 0))
        if isinstance(exception, IgnoreRequest):
            return None  # ours, from process_request: no lease was used
        held = self.leases.done(request.meta.get(LEASE_META))
        if held is None:
            return None
        calls = self.discovery
        if _is_407(exception):
            # The proxy refused the lease's credentials on CONNECT: lease again.
            await self.leases.penalise(held, None)
            return self._retry(request, "407 on CONNECT")
        if _is_unreachable(exception):
            await self.leases.penalise(held, calls.report_result_call(held.lease.id, "unreachable", held.host))
            return self._retry(request, f"the proxy could not be reached ({type(exception).__name__})")
        if self._is_ban("exception_is_ban", request, exception):
            await self.leases.penalise(held, calls.report_result_call(held.lease.id, "blocked", held.host))
            return self._retry(request, f"a ban ({type(exception).__name__})")
        self.leases.report_in_background(held, calls.report_result_call(held.lease.id, "error", held.host))
        return None

    async def spider_closed(self, spider: Any = None) -> None:
        """Releases every lease the spider held, and then every lease of its holder."""
        await self.leases.close()
        self.leases.api.executor.shutdown(wait=False)

    # ---- helpers ----------------------------------------------------------------------------

    def _moved(self, held: Held) -> None:
        """A dropped lease: the requests queued in its slot go again through another."""
        moved = self._drain(SLOT_PREFIX + held.lease.id)
        if moved:
            self._count("rerouted_queued", moved)

    def _drain(self, slot_key: str) -> int:
        """Fails the requests waiting in the downloader slot `slot_key` with `LeaseDropped`, so
        that `process_exception` sends them again through another lease. Reads the
        downloader's slots (``Downloader.slots``, ``Slot.queue``); with none, nothing moves
        and those requests go through the dropped proxy."""
        slot = getattr(getattr(self._engine(), "downloader", None), "slots", {}).get(slot_key)
        queue = getattr(slot, "queue", None)
        if not queue:
            return 0
        waiting = list(queue)
        queue.clear()
        for request, deferred in waiting:
            deferred.errback(LeaseDropped(f"the lease of {request.url} was dropped"))
        return len(waiting)

    def _is_ban(self, method: str, request: Request, seen: Any) -> bool:
        check = getattr(self.ban_policy, method, None)
        if check is None:
            return False
        try:
            return bool(check(request, seen))
        except Exception:  # noqa: BLE001 - a broken policy must not drop the page
            logger.exception("proxy-operator: the ban policy's %s failed", method)
            return False

    def _stopping(self) -> bool:
        """Whether the crawl is ending: the engine is stopping, or closing the spider."""
        engine = self._engine()
        if engine is None:
            return False
        slot = getattr(engine, "_slot", None)
        return getattr(engine, "running", True) is False or getattr(slot, "closing", None) is not None

    def _engine(self) -> Any:
        """The crawler's engine, or None before the crawl starts (or without a crawler)."""
        try:
            return self.crawler.engine
        except (AttributeError, RuntimeError):
            return None

    def _retry(self, request: Request, why: str) -> Request | None:
        retries = request.meta.get(RETRIES_META, 0) + 1
        if retries > self.retry_times:
            logger.info("proxy-operator: gave up on %s after %d new leases (%s)", request.url, retries - 1, why)
            self._count("gave_up")
            return None
        self._count("retries")
        return _again(request, retries)

    def _count(self, key: str, n: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"proxy_operator/{key}", n)


def _again(request: Request, retries: int) -> Request:
    """`request` once more, to be given a lease afresh."""
    retry = request.replace(dont_filter=True)
    retry.meta[RETRIES_META] = retries
    for key in (LEASE_META, PROXY_META, "proxy", "download_slot"):
        retry.meta.pop(key, None)
    return retry


def _policy(setting: Any) -> Any:
    """The ban policy a setting names: an object, or the import path of a class (made
    without arguments) or of an object."""
    if not setting or not isinstance(setting, str):
        return setting or None
    module, _, name = setting.rpartition(".")
    found = getattr(importlib.import_module(module), name)
    return found() if isinstance(found, type) else found


def _is_407(exception: Exception) -> bool:
    """Whether the proxy refused the credentials of a CONNECT (Scrapy's TunnelError says
    `[{'status': 407, ...}]`)."""
    return type(exception).__name__ == "TunnelError" and re.search(r"\b407\b", str(exception)) is not None


# The errors of a TCP connection that was never made: Twisted's, and Scrapy's wrapping of a
# refused one (``DownloadConnectionRefusedError``, Scrapy 2.13 and later). Through a proxy
# that connection is the proxy's: a site the proxy cannot reach is its 502/503 answer, or a
# TunnelError. A download timeout may be the site's, and is not here; one that cancelled
# the connecting itself is.
UNREACHABLE = frozenset({
    "ConnectionRefusedError", "DownloadConnectionRefusedError", "TCPTimedOutError", "NoRouteError",
    "ConnectingCancelledError",
})


def _is_unreachable(exception: Exception) -> bool:
    """Whether the proxy itself could not be reached."""
    return type(exception).__name__ in UNREACHABLE


def _host(request: Request) -> str:
    return (urlparse_cached(request).hostname or "").lower()
