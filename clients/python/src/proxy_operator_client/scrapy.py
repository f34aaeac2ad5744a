"""A Scrapy downloader middleware that crawls through proxy-operator's proxies.

Enable it before Scrapy's own proxy middleware (HttpProxyMiddleware, 750), which turns the
`user:pass@` of `meta['proxy']` into a `Proxy-Authorization` header::

    DOWNLOADER_MIDDLEWARES = {"proxy_operator_client.scrapy.ProxyOperatorMiddleware": 740}
    PROXY_OPERATOR_URL = "http://proxy-operator-discovery:8090"

Settings:

- ``PROXY_OPERATOR_URL`` (required, else the middleware is disabled): the discovery API;
- ``PROXY_OPERATOR_TOKEN`` (default: the environment variable of that name): its bearer token;
- ``PROXY_OPERATOR_SELECTOR`` (default ``{}``): label terms the proxies must carry, e.g.
  ``{"geo": "eu"}``;
- ``PROXY_OPERATOR_TTL`` (default 300): lease duration in seconds; a lease that ends within
  ``PROXY_OPERATOR_RENEW_MARGIN`` (default 5) seconds is replaced before a request uses it;
- ``PROXY_OPERATOR_RETRY_TIMES`` (default 3): how often one request is sent again through a
  new lease after a rate limit, a block or a 407, before its response goes to the spider;
- ``PROXY_OPERATOR_NO_MATCH_WAIT`` (default 60): how long, in seconds, a request waits for a
  proxy while the API answers 409 no_match (backing off from 0.5 s to 10 s), before it is
  dropped with ``IgnoreRequest``.

Behaviour: one lease per target host (``meta['proxy_operator_proxy']`` names the proxy,
``namespace/name``) (per spider: a middleware instance serves one crawler).
Every response's status is reported; the API answers whether to lease again (after 429,
401, 403 and 407), and then the lease is released and the request sent again through a new
one. A connection error or timeout is reported as ``error`` and left to Scrapy's retries. A
request with ``meta['proxy_operator'] = False`` is left alone. Spider code can report a ban
page itself: ``crawler.proxy_operator.report_blocked(response)``. Every lease is released
when the spider closes.

Needs the asyncio reactor, Scrapy's default since 2.13.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import Any

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.utils.httpobj import urlparse_cached

from .api import ApiError, Discovery, Lease, NoMatch

logger = logging.getLogger(__name__)

LEASE_META = "proxy_operator_lease"
PROXY_META = "proxy_operator_proxy"
RETRIES_META = "proxy_operator_retries"


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
        stats: Any = None,
    ):
        self.discovery = discovery
        self.selector = selector
        self.ttl = ttl
        self.renew_margin = renew_margin
        self.retry_times = retry_times
        self.no_match_wait = no_match_wait
        self.stats = stats
        # The lease of each target host, and a lock per host so that concurrent requests
        # to one host share one lease instead of each taking its own.
        self.leases: dict[str, Lease] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def from_crawler(cls, crawler: Any) -> "ProxyOperatorMiddleware":
        settings = crawler.settings
        url = settings.get("PROXY_OPERATOR_URL")
        if not url:
            raise NotConfigured("PROXY_OPERATOR_URL is not set")
        token = settings.get("PROXY_OPERATOR_TOKEN") or os.environ.get("PROXY_OPERATOR_TOKEN")
        middleware = cls(
            Discovery(url, token),
            selector=settings.getdict("PROXY_OPERATOR_SELECTOR"),
            ttl=settings.getint("PROXY_OPERATOR_TTL", 300),
            renew_margin=settings.getfloat("PROXY_OPERATOR_RENEW_MARGIN", 5.0),
            retry_times=settings.getint("PROXY_OPERATOR_RETRY_TIMES", 3),
            no_match_wait=settings.getfloat("PROXY_OPERATOR_NO_MATCH_WAIT", 60.0),
            stats=crawler.stats,
        )
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        crawler.proxy_operator = middleware
        return middleware

    # ---- the downloader middleware's hooks ------------------------------------------------

    async def process_request(self, request: Request) -> None:
        if request.meta.get("proxy_operator") is False:
            return None
        host = _host(request)
        lease = await self._lease_for(host)
        request.meta["proxy"] = lease.url
        request.meta[LEASE_META] = lease.id
        request.meta[PROXY_META] = lease.proxy
        return None

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        lease_id = request.meta.get(LEASE_META)
        if lease_id is None:
            return response
        try:
            answer = await asyncio.to_thread(
                self.discovery.report_status, lease_id, response.status, _host(request)
            )
        except ApiError as error:
            # The lease was forgotten (404) or the API failed: the page is still good.
            logger.warning("proxy-operator: report of %s failed: %s", request.url, error)
            return response
        self._count(f"reports/{answer.get('result') or 'none'}")
        if answer.get("leaseAgain"):
            await self._drop(_host(request), lease_id)
            retry = self._retry(request, f"status {response.status}")
            if retry is not None:
                return retry
        return response

    async def process_exception(self, request: Request, exception: Exception) -> Request | None:
        lease_id = request.meta.get(LEASE_META)
        if lease_id is None:
            return None
        if _is_407(exception):
            # The proxy refused the lease's credentials on CONNECT: lease again.
            await self._drop(_host(request), lease_id)
            return self._retry(request, "407 on CONNECT")
        try:
            await asyncio.to_thread(
                self.discovery.report_result, lease_id, "error", _host(request)
            )
            self._count("reports/error")
        except ApiError as error:
            logger.warning("proxy-operator: report of %s failed: %s", request.url, error)
        return None

    def spider_closed(self, spider: Any = None) -> None:
        """Releases every lease the spider held."""
        for host, lease in list(self.leases.items()):
            self._release(lease)
            del self.leases[host]

    # ---- for spider code --------------------------------------------------------------------

    def report_blocked(self, response: Response) -> None:
        """Reports a ban page the status does not show (a captcha answered with 200) and drops
        the lease, so the next request to the host gets another proxy."""
        lease_id = response.request.meta.get(LEASE_META) if response.request else None
        if lease_id is None:
            return
        host = _host(response.request)
        self.discovery.report_result(lease_id, "blocked", host)
        self._count("reports/blocked")
        lease = self.leases.get(host)
        if lease is not None and lease.id == lease_id:
            del self.leases[host]
            self._release(lease)

    # ---- leases -----------------------------------------------------------------------------

    async def _lease_for(self, host: str) -> Lease:
        lock = self._locks.setdefault(host, asyncio.Lock())
        async with lock:
            lease = self.leases.get(host)
            if lease is not None and not lease.expires_within(self.renew_margin):
                return lease
            if lease is not None:
                del self.leases[host]
                await asyncio.to_thread(self._release, lease)
            lease = await self._new_lease(host)
            self.leases[host] = lease
            return lease

    async def _new_lease(self, host: str) -> Lease:
        waited, backoff = 0.0, 0.5
        while True:
            try:
                lease = await asyncio.to_thread(
                    self.discovery.lease, host, self.selector, self.ttl
                )
                self._count("leases")
                logger.debug("proxy-operator: leased %s for %s", lease.proxy, host)
                return lease
            except NoMatch as error:
                self._count("no_match")
                if waited >= self.no_match_wait:
                    raise IgnoreRequest(
                        f"proxy-operator: no proxy for {host} after {waited:.1f} s: {error.body}"
                    ) from None
                logger.info("proxy-operator: no proxy for %s yet (%s); waiting %.1f s", host, error.body, backoff)
                await asyncio.sleep(backoff)
                waited += backoff
                backoff = min(backoff * 2, 10.0)

    async def _drop(self, host: str, lease_id: str) -> None:
        """Forgets and releases the lease of `host` if it is still `lease_id`."""
        lease = self.leases.get(host)
        if lease is not None and lease.id == lease_id:
            del self.leases[host]
            await asyncio.to_thread(self._release, lease)

    def _release(self, lease: Lease) -> None:
        try:
            self.discovery.release(lease.id)
            self._count("releases")
        except (ApiError, OSError) as error:
            logger.warning("proxy-operator: release of %s failed: %s", lease.id, error)

    def _retry(self, request: Request, why: str) -> Request | None:
        retries = request.meta.get(RETRIES_META, 0) + 1
        if retries > self.retry_times:
            logger.info("proxy-operator: gave up on %s after %d new leases (%s)", request.url, retries - 1, why)
            return None
        self._count("lease_again")
        retry = request.replace(dont_filter=True)
        retry.meta[RETRIES_META] = retries
        retry.meta.pop(LEASE_META, None)
        return retry

    def _count(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"proxy_operator/{key}")


def _is_407(exception: Exception) -> bool:
    """Whether the proxy refused the credentials of a CONNECT (Scrapy's TunnelError says
    `[{'status': 407, ...}]`)."""
    return type(exception).__name__ == "TunnelError" and re.search(r"\b407\b", str(exception)) is not None


def _host(request: Request) -> str:
    return (urlparse_cached(request).hostname or "").lower()
