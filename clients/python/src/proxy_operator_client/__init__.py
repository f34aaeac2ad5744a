"""Clients of proxy-operator's discovery API: `Discovery` and `AsyncDiscovery` (standard
library only); with Scrapy installed, `proxy_operator_client.scrapy.ProxyOperatorMiddleware`;
with Playwright installed, `proxy_operator_client.playwright.LeasedContexts`."""

from .api import ApiError, AsyncDiscovery, Backoff, Discovery, Lease, NoMatch, Stopped, Unavailable

__all__ = ["ApiError", "AsyncDiscovery", "Backoff", "Discovery", "Lease", "NoMatch", "Stopped", "Unavailable"]
