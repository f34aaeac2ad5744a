"""A small client of proxy-operator's discovery API (docs/api.md), standard library only.

The API is a service that blinks: the operator restarts, the lease book moves between
replicas (503 with ``Retry-After``), a connection is refused for a few seconds. Every call
is therefore retried on a connection error, a timeout and a 5xx, with exponential backoff
and full jitter (``Retry-After`` when the answer has one), until ``api_wait`` seconds have
passed since its first attempt; only then does it raise :class:`Unavailable`. Answers the
caller must act on (409 ``no_match``, 404 ``unknown_lease``, a 400) are raised at once.

:class:`Discovery` makes blocking calls (one thread per call); :class:`AsyncDiscovery` runs
the same calls from asyncio, with each attempt on a thread of its own pool and the waits
between attempts on the event loop, so a long outage holds no thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any, Callable


class ApiError(Exception):
    """The API answered an error: `status`, and the `code` of its JSON body."""

    def __init__(self, status: int, code: str, message: str, body: dict[str, Any]):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.body = body


class NoMatch(ApiError):
    """409 no_match: no proxy fits now; `body` holds the counts (considered, atCapacity,
    inCooldown, unhealthy) and, while proxies cool down for the target, when the first of
    them is free again (`retryAt`, `retryAfterSeconds`)."""

    @property
    def retry_after(self) -> float | None:
        """Seconds until the first proxy cooling down for the target leaves its cooldown, by
        the server's clock; None when none is cooling down."""
        seconds = self.body.get("retryAfterSeconds")
        return float(seconds) if isinstance(seconds, (int, float)) else None

    @property
    def only_cooling(self) -> bool:
        """Whether every proxy passed over is cooling down for the target, so that nothing
        frees a place before `retry_after` (a release frees one at capacity at any time)."""
        return self.retry_after is not None and not self.body.get("atCapacity") and not self.body.get("unhealthy")


class Unavailable(ApiError):
    """The API did not answer within ``api_wait`` seconds (connection errors, timeouts,
    5xx); `status` is the last one seen (0 for no answer at all)."""


class Stopped(Exception):
    """The caller is stopping: a call that may be dropped was not retried further."""


class Transient(Exception):
    """One attempt failed in a way worth retrying; `retry_after` is the answer's
    ``Retry-After`` in seconds, if it had one."""

    def __init__(self, status: int, why: str, retry_after: float | None = None):
        super().__init__(why)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class Lease:
    """A granted lease. `url` goes straight into a crawler's proxy setting; it carries
    `user:pass@` when the proxy takes credentials. `server`, `username` and `password` are
    the same apart, as Playwright's ``proxy`` option takes them."""

    id: str
    url: str
    proxy: str
    target: str | None
    expires_at: float
    server: str = ""
    username: str | None = None
    password: str | None = None

    @classmethod
    def of(cls, body: dict[str, Any]) -> "Lease":
        proxy = body["proxy"]
        host = proxy["host"]
        host = f"[{host}]" if ":" in host else host
        return cls(
            id=body["leaseID"],
            url=proxy["url"],
            proxy=f'{proxy["namespace"]}/{proxy["name"]}',
            target=body.get("target"),
            expires_at=time.time() + float(body["ttlSeconds"]),
            server=f'http://{host}:{proxy["port"]}',
            username=proxy.get("username"),
            password=proxy.get("password"),
        )

    def expires_within(self, seconds: float) -> bool:
        return self.expires_at - seconds <= time.time()

    def playwright_proxy(self) -> dict[str, str]:
        """Playwright's ``proxy`` option: ``{"server", "username", "password"}``."""
        parts = {"server": self.server}
        if self.username is not None:
            parts["username"] = self.username
        if self.password is not None:
            parts["password"] = self.password
        return parts


@dataclass(frozen=True)
class Call:
    """One request of the API: method, path and JSON body."""

    method: str
    path: str
    body: dict[str, Any] | None = None


class Backoff:
    """Exponential backoff with full jitter (a random wait up to 0.25 s, doubling to at most
    5 s), or the answer's ``Retry-After``, while `bound` seconds have not passed since the
    first attempt."""

    def __init__(
        self,
        bound: float,
        first: float = 0.25,
        cap: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ):
        self.clock = clock
        self.rng = rng
        self.deadline = clock() + bound
        self.ceiling = first
        self.cap = cap
        self.retries = 0

    def delay(self, retry_after: float | None = None) -> float | None:
        """How long to wait before the next attempt, or None when the bound is spent."""
        left = self.deadline - self.clock()
        if left <= 0:
            return None
        wait = retry_after if retry_after is not None else self.ceiling * self.rng()
        self.ceiling = min(self.ceiling * 2, self.cap)
        self.retries += 1
        return max(0.0, min(wait, left))


def default_holder(library: str) -> str:
    """`<library>/<host name>/<process id>`, in the characters a holder may have."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "host"
    return f"{library}/{host}/{os.getpid()}"[:128]


class Discovery:
    """The discovery API at `base` (`http://proxy-operator-discovery:8090`).

    `timeout` bounds one attempt, `api_wait` a whole call with its retries; `holder` names
    the crawler in every lease (``GET``/``DELETE /v1/leases?holder=``)."""

    def __init__(
        self,
        base: str,
        token: str | None = None,
        timeout: float = 10.0,
        api_wait: float = 60.0,
        holder: str | None = None,
    ):
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.api_wait = api_wait
        self.holder = holder or default_holder("python")

    # ---- the calls ---------------------------------------------------------------------------

    def lease_call(self, target: str | None, selector: dict[str, str] | None, ttl: int) -> Call:
        body: dict[str, Any] = {"selector": selector or {}, "ttlSeconds": ttl, "holder": self.holder}
        if target:
            body["target"] = target
        return Call("POST", "/v1/leases", body)

    def report_status_call(self, lease_id: str, status: int, target: str | None = None) -> Call:
        """The answer says what was recorded, whether to lease again and until when the proxy
        cools down for the site: ``{"result", "leaseAgain", "cooldownUntil", ...}``. The call
        carries a `reportID` of its own, so that sending it again counts it once."""
        return self._report_call(lease_id, {"status": status}, target)

    def report_result_call(self, lease_id: str, result: str, target: str | None = None) -> Call:
        """A result (`ok`, `rate_limited`, `blocked`, `error`) said directly: a connection
        error, or a ban page only the crawler recognises. Answered as a report by status."""
        return self._report_call(lease_id, {"result": result}, target)

    def _report_call(self, lease_id: str, body: dict[str, Any], target: str | None) -> Call:
        body["reportID"] = str(uuid.uuid4())
        if target:
            body["target"] = target
        return Call("POST", f"/v1/leases/{_quote(lease_id)}/report", body)

    def release_call(self, lease_id: str) -> Call:
        return Call("DELETE", f"/v1/leases/{_quote(lease_id)}")

    def release_held_call(self) -> Call:
        """Every active lease of this holder, those whose grant answer never arrived too."""
        return Call("DELETE", "/v1/leases?" + urllib.parse.urlencode({"holder": self.holder}))

    # ---- blocking use ------------------------------------------------------------------------

    def lease(self, target: str | None, selector: dict[str, str] | None = None, ttl: int = 300) -> Lease:
        """Leases the best proxy for `target`; raises `NoMatch` when none fits."""
        return Lease.of(self.run(self.lease_call(target, selector, ttl)))

    def report_status(self, lease_id: str, status: int, target: str | None = None) -> dict[str, Any]:
        return self.run(self.report_status_call(lease_id, status, target))

    def report_result(self, lease_id: str, result: str, target: str | None = None) -> dict[str, Any]:
        return self.run(self.report_result_call(lease_id, result, target))

    def release(self, lease_id: str) -> None:
        """Releases the lease (harmless when it is already gone)."""
        self.run(self.release_call(lease_id))

    def release_held(self) -> int:
        """Releases every active lease of this holder; how many there were."""
        return int(self.run(self.release_held_call()).get("released", 0))

    def run(self, call: Call, stop: threading.Event | None = None, bound: float | None = None) -> dict[str, Any]:
        """`call`, retried as the module says; `stop` set ends the waits with `Stopped`."""
        backoff = Backoff(self.api_wait if bound is None else bound)
        while True:
            try:
                return self.attempt(call)
            except Transient as error:
                delay = backoff.delay(error.retry_after)
                if delay is None:
                    raise unavailable(call, error, backoff.retries) from None
                if stop is None:
                    time.sleep(delay)
                elif stop.wait(delay):
                    raise Stopped(f"{call.method} {call.path}") from None

    def attempt(self, call: Call) -> dict[str, Any]:
        """One exchange: the JSON answer, or `Transient`, `NoMatch`, `ApiError`."""
        data = None if call.body is None else json.dumps(call.body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.base + call.path, data=data, method=call.method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read()
                return json.loads(text) if text else {}
        except urllib.error.HTTPError as error:
            text = error.read()
            try:
                answer = json.loads(text) if text else {}
            except ValueError:
                answer = {}
            if error.code >= 500:
                # The server's message says why (a failover, a book it cannot save): a crawler
                # that gives up says it too.
                why = f": {answer['message']}" if answer.get("message") else ""
                raise Transient(error.code, f"{error.code} {answer.get('error', '')}{why}", _retry_after(error.headers)) from None
            kind = NoMatch if error.code == 409 else ApiError
            raise kind(error.code, answer.get("error", ""), answer.get("message", ""), answer) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
            # Refused, reset, timed out, or an answer cut short: nothing to act on but time.
            raise Transient(0, f"{type(error).__name__}: {error}") from None


class AsyncDiscovery:
    """`Discovery`'s calls from asyncio: an attempt at a time on `executor`'s threads, the
    waits on the loop. `stopping()` true ends the waits of a droppable call with `Stopped`."""

    def __init__(
        self,
        discovery: Discovery,
        executor: concurrent.futures.Executor | None = None,
        stopping: Callable[[], bool] = lambda: False,
    ):
        self.discovery = discovery
        self.executor = executor or concurrent.futures.ThreadPoolExecutor(16, "proxy-operator")
        self.stopping = stopping
        self.retries = 0

    async def run(self, call: Call, droppable: bool = False, bound: float | None = None) -> dict[str, Any]:
        backoff = Backoff(self.discovery.api_wait if bound is None else bound)
        loop = asyncio.get_running_loop()
        while True:
            if droppable and self.stopping():
                raise Stopped(f"{call.method} {call.path}")
            try:
                return await loop.run_in_executor(self.executor, self.discovery.attempt, call)
            except Transient as error:
                delay = backoff.delay(error.retry_after)
                if delay is None:
                    raise unavailable(call, error, backoff.retries) from None
                self.retries += 1
                await self.sleep(delay, droppable)

    async def sleep(self, seconds: float, droppable: bool) -> None:
        """Sleeps, looking at `stopping` every quarter second when the call may be dropped."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if droppable and self.stopping():
                raise Stopped("stopping")
            await asyncio.sleep(min(left, 0.25))


def unavailable(call: Call, error: Transient, retries: int) -> Unavailable:
    message = f"{call.method} {call.path}: no answer after {retries} retries ({error})"
    return Unavailable(error.status, "unavailable", message, {})


def _retry_after(headers: Any) -> float | None:
    try:
        value = float(headers.get("Retry-After", ""))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")
