"""Clients of proxy-operator's discovery API: `Discovery` (standard library only) and, with
Scrapy installed, `proxy_operator_client.scrapy.ProxyOperatorMiddleware`."""

from .api import ApiError, Discovery, Lease, NoMatch

__all__ = ["ApiError", "Discovery", "Lease", "NoMatch"]
