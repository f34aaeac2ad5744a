"""The API client's retries: backoff with jitter within a bound, Retry-After, what is
retried and what is not."""

from __future__ import annotations

import time

import pytest

from fake_api import FakeApi
from proxy_operator_client.api import Backoff, Discovery, NoMatch, Unavailable


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_backoff_doubles_its_jittered_ceiling_to_a_cap_within_the_bound():
    clock = Clock()
    backoff = Backoff(10.0, first=0.25, cap=1.0, clock=clock, rng=lambda: 1.0)
    assert [backoff.delay() for _ in range(4)] == [0.25, 0.5, 1.0, 1.0]
    low = Backoff(10.0, clock=clock, rng=lambda: 0.0)
    assert low.delay() == 0.0, "full jitter: anywhere from nothing to the ceiling"
    assert backoff.delay(retry_after=3.0) == 3.0, "Retry-After wins"
    clock.now = 9.5
    assert backoff.delay(retry_after=3.0) == pytest.approx(0.5), "never past the bound"
    clock.now = 10.0
    assert backoff.delay() is None


def test_503_and_refused_connections_are_retried_and_409_is_not():
    api = FakeApi()
    try:
        discovery = Discovery(api.url, "t0ken", api_wait=5, holder="me")
        api.unavailable = 2
        lease = discovery.lease("a.example")
        assert lease.username == "p1" and lease.server == "http://127.0.0.1:3128"
        assert lease.playwright_proxy() == {"server": "http://127.0.0.1:3128", "username": "p1", "password": "pa@ss"}
        assert len(api.paths("POST")) == 3
        api.no_match = 1
        with pytest.raises(NoMatch):
            discovery.lease("a.example")
        api.outage(0.5)
        started = time.monotonic()
        discovery.release(lease.id)
        assert time.monotonic() - started >= 0.4
        assert discovery.release_held() == 0
    finally:
        api.close()


def test_a_call_gives_up_with_unavailable_after_the_bound():
    api = FakeApi()
    api.stop()
    discovery = Discovery(api.url, "t0ken", api_wait=0.3)
    started = time.monotonic()
    with pytest.raises(Unavailable, match="no answer after"):
        discovery.release("lease-1")
    assert time.monotonic() - started < 2


def test_giving_up_on_503s_says_what_the_server_said():
    api = FakeApi()
    try:
        api.unavailable = 1000
        discovery = Discovery(api.url, "t0ken", api_wait=0.3)
        with pytest.raises(Unavailable, match=r"\(503 unavailable: moving\)$"):
            discovery.release("lease-1")
    finally:
        api.close()
