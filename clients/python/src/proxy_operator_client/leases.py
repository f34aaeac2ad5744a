"""The leases of a crawler, kept the way every shim of this package keeps them (asyncio,
standard library only): per target host, up to `leases_per_site` leases, each requester
given the one with the fewest in flight.

- **The book is the one clock.** Which proxy may go to which site, and when again, is the
  lease book's to say: this keeper keeps no cooldown of its own. After a penalty it leases
  again and takes what the book grants; on 409 it waits as long as the answer says
  (``retryAfterSeconds``: when the first proxy cooling down for the site is free), polling
  with a backoff when proxies at capacity may free a place sooner.
- **Each answer is reported once.** Every response is reported, once, on the lease it came
  through (a lease already dropped or released too: the book keeps ended leases for late
  reports), with a report ID of its own, so that a report sent again after an attempt whose
  answer was lost counts once. A penalty's report is sent until it lands, before any new
  lease for the host is asked for: never on another lease.
- **A penalty ends the proxy for the host at once.** After a 429, 401, 403 or 407 (the
  server's own table, :data:`LEASE_AGAIN`, applied here so that it holds while the API is
  away) or a ban page, every lease on that proxy for the host is dropped (`on_drop` hears
  of each, so the crawler can move what it queued on it), the report lands, and the leases
  are released. A report whose answer says ``leaseAgain`` (the proxy cools down for the
  site, whoever reported it) drops its lease too.
- **The API blinks.** Every call is retried as :class:`AsyncDiscovery` says; a request waits
  for a lease at most ``no_match_wait`` on 409 plus ``api_wait`` while the API is away
  (:meth:`LeaseKeeper.lease_wait`).
- **Every lease is released on every ending.** :meth:`LeaseKeeper.close` waits for the
  reports still in the air (at most ``api_wait``), releases every lease held, then every
  lease of the holder (``DELETE /v1/leases?holder=``: the ones whose grant answer never
  arrived too), and ends every wait at once; :meth:`LeaseKeeper.release_at_exit` is the last
  resort, for interpreter exit.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .api import ApiError, AsyncDiscovery, Call, Discovery, Lease, NoMatch, Stopped, Transient, Unavailable

logger = logging.getLogger(__name__)

#: What the server's table says of a status seen through a proxy, for the ones after which
#: a crawler leases again (docs/api.md, Report).
LEASE_AGAIN = {429: "rate_limited", 401: "blocked", 403: "blocked", 407: None}


class NoProxy(Exception):
    """No lease for a host: none fitted within the wait, the API was away longer than its
    bound, or the crawler is stopping."""


@dataclass(eq=False)
class Held:
    """A lease held for a host, and how many requests use it now."""

    lease: Lease
    host: str
    in_flight: int = 0
    dropped: bool = False
    #: What the crawler hangs on it (a browser context, ...).
    extra: Any = None


@dataclass
class Site:
    """The leases of one target host."""

    held: list[Held] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Reports of a penalty on this host not landed yet: a new lease waits for them.
    pending: set[asyncio.Task] = field(default_factory=set)


class LeaseKeeper:
    def __init__(
        self,
        discovery: Discovery,
        *,
        selector: dict[str, str] | None = None,
        ttl: int = 300,
        renew_margin: float = 5.0,
        leases_per_site: int = 1,
        no_match_wait: float = 300.0,
        stopping: Callable[[], bool] = lambda: False,
        count: Callable[[str, int], None] = lambda key, n: None,
        on_drop: Callable[[Held], None] = lambda held: None,
    ):
        self.discovery = discovery
        self.api = AsyncDiscovery(discovery, stopping=lambda: self.closing or stopping())
        self.selector = selector or {}
        self.ttl = ttl
        self.renew_margin = renew_margin
        self.leases_per_site = max(1, leases_per_site)
        self.no_match_wait = no_match_wait
        self.count = count
        self.on_drop = on_drop
        self.sites: dict[str, Site] = {}
        #: Leases granted and not yet released, by ID: what closing releases.
        self.leases: dict[str, Held] = {}
        #: Every lease granted, by ID: requests still in flight when their lease was
        #: dropped are judged (and reported) all the same.
        self.known: dict[str, Held] = {}
        self.background: set[asyncio.Task] = set()
        #: Set, and replaced, whenever a request in flight ends or a lease is dropped.
        self._place_freed = asyncio.Event()
        self.closing = False
        self.closed = False

    def lease_wait(self) -> float:
        """The longest a request waits for a lease: ``no_match_wait`` on 409, plus
        ``api_wait`` while the API is away (for a crawler's own timeouts to allow)."""
        return self.no_match_wait + self.discovery.api_wait

    # ---- leases -----------------------------------------------------------------------------

    async def acquire(self, host: str, per_lease: float = math.inf) -> Held:
        """A lease for `host`, counted in flight until :meth:`done`; raises `NoProxy`. Each
        lease carries at most `per_lease` requests at once: past that, the caller waits here
        until one is done or a lease is dropped."""
        site = self.sites.setdefault(host, Site())
        deadline = time.monotonic() + self.lease_wait()
        while True:
            freed = self._place_freed  # taken before looking: no freeing is missed
            if site.pending:
                # A penalty's report lands before the next lease for the host is asked for.
                left = deadline - time.monotonic()
                _, waiting = await asyncio.wait(list(site.pending), timeout=max(0.0, left))
                if waiting:
                    raise NoProxy(f"a report on a proxy for {host} did not land within the wait")
            async with site.lock:
                if site.pending:
                    continue  # a penalty came while waiting for the lock
                for held in [h for h in site.held if h.lease.expires_within(self.renew_margin)]:
                    self._drop(held)
                    self.in_background(self.release(held))
                if len(site.held) < self.leases_per_site:
                    # The first lease of a site waits for a proxy; the others are a bonus.
                    fresh = await self._new_lease(host, deadline if not site.held else None)
                    if fresh is not None:
                        site.held.append(fresh)
                full = False
                if site.held:
                    held = min(site.held, key=lambda h: h.in_flight)
                    if held.in_flight < per_lease:
                        held.in_flight += 1
                        return held
                    full = True
            if full:
                await freed.wait()
                if self.closing:
                    raise NoProxy("stopping")

    def done(self, lease_id: str | None) -> Held | None:
        """The lease a request went through (dropped or not), no longer counted in flight."""
        held = self.known.get(lease_id or "")
        if held is not None:
            held.in_flight = max(0, held.in_flight - 1)
        self._free_place()
        return held

    def _free_place(self) -> None:
        """Wakes every caller waiting for a place in flight (:meth:`acquire`'s `per_lease`)."""
        self._place_freed.set()
        self._place_freed = asyncio.Event()

    async def _new_lease(self, host: str, deadline: float | None) -> Held | None:
        """A new lease for `host`; with no `deadline`, one try (None on 409), else waiting on
        409 as the answers say, until the deadline."""
        waited, backoff = 0.0, 0.5
        while True:
            left = math.inf if deadline is None else deadline - time.monotonic()
            try:
                call = self.discovery.lease_call(host, self.selector, self.ttl)
                lease = Lease.of(await self.api.run(call, droppable=True, bound=min(self.discovery.api_wait, left)))
            except NoMatch as error:
                self.count("no_match", 1)
                if deadline is None:
                    return None
                wait = self._wait_on_409(error, backoff, min(self.no_match_wait - waited, left))
                if wait is None:
                    raise NoProxy(f"no proxy for {host} within {self.no_match_wait:.0f} s: {error.body}") from None
                logger.info("proxy-operator: no proxy for %s yet (%s); waiting %.1f s", host, error.body, wait)
                try:
                    await self.api.sleep(wait, droppable=True)
                except Stopped:
                    raise NoProxy(f"stopped while waiting for a proxy for {host}") from None
                waited += wait
                backoff = min(backoff * 2, 10.0)
                continue
            except Stopped:
                raise NoProxy(f"stopped while leasing for {host}") from None
            except Unavailable as error:
                raise NoProxy(f"the discovery API is away: {error}") from None
            held = Held(lease, host)
            self.leases[lease.id] = held
            self.known[lease.id] = held
            self.count("leases", 1)
            if self.closing:
                await self.release(held)
                raise NoProxy("stopping")
            logger.debug("proxy-operator: leased %s for %s", lease.proxy, host)
            return held

    @staticmethod
    def _wait_on_409(error: NoMatch, backoff: float, left: float) -> float | None:
        """How long to wait after a 409 before asking again, or None to give up: the time
        the answer names when nothing but cooldowns stands in the way (given up at once when
        that is past the wait), else the backoff, never past that time."""
        if left <= 0:
            return None
        retry_after = error.retry_after
        if error.only_cooling:
            return retry_after if retry_after <= left else None
        return min(backoff, retry_after if retry_after is not None else backoff, left)

    async def penalise(self, held: Held, report: Call | None) -> None:
        """The proxy of `held` is done for its host: drops it (and every other lease on it for
        the host), then lands the report before any new lease for the host, then releases."""
        if not held.dropped:
            self.count("lease_again", 1)
        site = self.sites.setdefault(held.host, Site())
        same = [held] + [o for o in site.held if o is not held and o.lease.proxy == held.lease.proxy]
        for each in same:
            self._drop(each)
        # A penalty's report is sent until it lands (close() bounds it): the book hears of
        # every penalty on the lease it happened on, never later on another one.
        reporting = self._report(held, report, bound=math.inf) if report is not None else asyncio.sleep(0)
        task = asyncio.ensure_future(reporting)
        site.pending.add(task)
        # Shielded, and awaited by close() too: a crawler cancelled while it waits (an
        # error, a stop) still lands the report.
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        task.add_done_callback(site.pending.discard)
        await asyncio.shield(task)
        for each in same:
            self.in_background(self.release(each))

    def report_in_background(self, held: Held, report: Call) -> None:
        """A report nothing waits for (an `ok`, an `error`); a `leaseAgain` answer still
        drops the lease."""
        self.in_background(self._report(held, report))

    def _drop(self, held: Held) -> None:
        if held.dropped:
            return
        held.dropped = True
        site = self.sites.get(held.host)
        if site is not None and held in site.held:
            site.held.remove(held)
        self.on_drop(held)
        self._free_place()  # its site may take another lease

    async def _report(self, held: Held, call: Call, bound: float | None = None) -> None:
        try:
            answer = await self.api.run(call, bound=bound)
        except Unavailable as error:
            logger.warning("proxy-operator: a report on %s did not land: %s", held.lease.proxy, error)
            self.count("reports/lost", 1)
            return
        except ApiError as error:
            # Forgotten (404) or refused: the page is still good.
            logger.warning("proxy-operator: a report on %s failed: %s", held.lease.proxy, error)
            return
        except asyncio.CancelledError:
            self.count("reports/lost", 1)
            raise
        result = (call.body or {}).get("result") or answer.get("result") or "none"
        self.count(f"reports/{result}", 1)
        if answer.get("repeated"):
            self.count("reports/repeated", 1)
        if answer.get("leaseAgain") and not held.dropped:
            logger.debug(
                "proxy-operator: the book cools %s down for %s until %s",
                held.lease.proxy,
                held.host,
                answer.get("cooldownUntil"),
            )
            self.count("lease_again", 1)
            self._drop(held)
            await self.release(held)

    async def release(self, held: Held) -> None:
        if self.leases.pop(held.lease.id, None) is None:
            return
        try:
            await self.api.run(self.discovery.release_call(held.lease.id))
            self.count("releases", 1)
        except ApiError as error:
            self.leases[held.lease.id] = held
            logger.warning("proxy-operator: release of %s failed: %s", held.lease.id, error)

    def in_background(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # ---- endings ----------------------------------------------------------------------------

    async def close(self) -> None:
        """Ends every wait, lands the reports in the air (for at most ``api_wait``), releases
        every lease held and then every lease of the holder."""
        self.closing = True
        self._free_place()
        if self.background:
            _, late = await asyncio.wait(list(self.background), timeout=self.discovery.api_wait)
            for task in late:
                task.cancel()
        for held in list(self.leases.values()):
            self._drop(held)
        await asyncio.gather(*(self.release(h) for h in list(self.leases.values())))
        try:
            answer = await self.api.run(self.discovery.release_held_call())
            self.count("released_by_holder", int(answer.get("released", 0)))
        except ApiError as error:
            logger.warning("proxy-operator: releasing the leases of %s failed: %s", self.discovery.holder, error)
        self.closed = not self.leases

    def release_at_exit(self) -> None:
        """At interpreter exit, whatever is still held (the crawler never closed, as after a
        second Ctrl-C): one attempt per lease with a short timeout, then the holder's."""
        if self.closed or not self.leases:
            return
        d = self.discovery
        quick = Discovery(d.base, d.token, timeout=2.0, holder=d.holder)
        for call in [quick.release_call(lease_id) for lease_id in self.leases] + [quick.release_held_call()]:
            try:
                quick.attempt(call)
            except (ApiError, Transient):
                pass
