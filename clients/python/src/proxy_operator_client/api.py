"""A small client of proxy-operator's discovery API (docs/api.md), standard library only.

Blocking calls with a timeout; the Scrapy middleware runs them off the reactor's thread.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


class ApiError(Exception):
    """The API answered an error: `status`, and the `code` of its JSON body."""

    def __init__(self, status: int, code: str, message: str, body: dict[str, Any]):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.body = body


class NoMatch(ApiError):
    """409 no_match: no proxy fits now; `body` holds the counts (considered, atCapacity,
    inCooldown, unhealthy)."""


@dataclass(frozen=True)
class Lease:
    """A granted lease. `url` goes straight into a crawler's proxy setting; it carries
    `user:pass@` when the proxy takes credentials."""

    id: str
    url: str
    proxy: str
    target: str | None
    expires_at: float

    @classmethod
    def of(cls, body: dict[str, Any]) -> "Lease":
        proxy = body["proxy"]
        return cls(
            id=body["leaseID"],
            url=proxy["url"],
            proxy=f'{proxy["namespace"]}/{proxy["name"]}',
            target=body.get("target"),
            expires_at=time.time() + float(body["ttlSeconds"]),
        )

    def expires_within(self, seconds: float) -> bool:
        return self.expires_at - seconds <= time.time()


class Discovery:
    """The discovery API at `base` (`http://proxy-operator-discovery:8090`)."""

    def __init__(
        self,
        base: str,
        token: str | None = None,
        timeout: float = 10.0,
        unavailable_retries: int = 10,
    ):
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.unavailable_retries = unavailable_retries

    def lease(
        self, target: str | None, selector: dict[str, str] | None = None, ttl: int = 300
    ) -> Lease:
        """Leases the best proxy for `target`; raises `NoMatch` when none fits."""
        body: dict[str, Any] = {"selector": selector or {}, "ttlSeconds": ttl}
        if target:
            body["target"] = target
        return Lease.of(self._call("POST", "/v1/leases", body))

    def report_status(self, lease_id: str, status: int, target: str | None = None) -> dict[str, Any]:
        """Reports the HTTP status seen through the lease's proxy; the answer says what was
        recorded and whether to lease again: `{"result": ..., "leaseAgain": ...}`."""
        body: dict[str, Any] = {"status": status}
        if target:
            body["target"] = target
        return self._call("POST", f"/v1/leases/{_quote(lease_id)}/report", body)

    def report_result(self, lease_id: str, result: str, target: str | None = None) -> None:
        """Reports a result (`ok`, `rate_limited`, `blocked`, `error`) directly: for a
        connection error or timeout, or a ban page only the crawler can recognise."""
        body: dict[str, Any] = {"result": result}
        if target:
            body["target"] = target
        self._call("POST", f"/v1/leases/{_quote(lease_id)}/report", body)

    def release(self, lease_id: str) -> None:
        """Releases the lease (harmless when it is already gone)."""
        self._call("DELETE", f"/v1/leases/{_quote(lease_id)}", None)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in range(self.unavailable_retries + 1):
            request = urllib.request.Request(
                self.base + path, data=data, method=method, headers=headers
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    text = response.read()
                    return json.loads(text) if text else {}
            except urllib.error.HTTPError as error:
                text = error.read()
                answer = json.loads(text) if text else {}
                # 503: the lease book is moving between replicas; retry after Retry-After.
                if error.code == 503 and attempt < self.unavailable_retries:
                    time.sleep(float(error.headers.get("Retry-After", "1")))
                    continue
                kind = NoMatch if error.code == 409 else ApiError
                raise kind(
                    error.code,
                    answer.get("error", ""),
                    answer.get("message", ""),
                    answer,
                ) from None
        raise AssertionError("unreachable")


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")
