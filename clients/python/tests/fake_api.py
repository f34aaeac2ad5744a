"""A stand-in of the discovery API for the shims' unit tests: a real HTTP server on loopback
that records every call, maps statuses as the server does, answers reports as it does (the
result, leaseAgain, the cooldown's end, a report ID heard before), and can be taken away
(its port closed, so connections are refused) or answer 503 for a while."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


RESULTS = {429: "rate_limited", 403: "blocked", 401: "blocked", 407: None}


class FakeApi:
    """Grants leases (after `no_match` 409s, each saying `no_match_body`) on proxies named by
    `proxies` in turn, or `p<n>`; a rate_limited or blocked report cools (proxy, target) down
    for `cooldown` seconds, which the answers to later reports say too."""

    def __init__(self, token: str = "t0ken"):
        self.token = token
        self.calls: list[tuple[str, str, dict]] = []
        self.times: list[float] = []
        self.no_match = 0
        self.unavailable = 0
        self.granted = 0
        self.ttl = 300
        self.proxies: list[str] = []
        self.active: set[str] = set()
        self.holders: dict[str, str] = {}
        self.no_match_body: dict = {"considered": 1, "atCapacity": 1, "inCooldown": 0, "unhealthy": 0}
        self.cooldown = 300.0
        #: (proxy, target) -> when its cooldown ends (time.time()).
        self.cooling: dict[tuple[str, str], float] = {}
        #: lease ID -> (proxy, target).
        self.lease_of: dict[str, tuple[str, str]] = {}
        self.heard: set[tuple[str, str]] = set()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        self._serve()

    def _serve(self) -> None:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Closes the port: connections are refused until `start`."""
        self.server.shutdown()
        self.server.server_close()

    def start(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._serve()

    def outage(self, seconds: float) -> None:
        """Away for `seconds`, from now."""
        self.stop()
        threading.Timer(seconds, self.start).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body=None, headers=()):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self, method):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                assert self.headers["Authorization"] == f"Bearer {api.token}"
                with api.lock:
                    api.calls.append((method, self.path, body))
                    api.times.append(time.monotonic())
                    if api.unavailable > 0:
                        api.unavailable -= 1
                        return body, True
                return body, False

            def do_POST(self):
                body, away = self._record("POST")
                if away:
                    return self._answer(503, {"error": "unavailable", "message": "moving"}, [("Retry-After", "0")])
                if self.path == "/v1/leases":
                    with api.lock:
                        if api.no_match > 0:
                            api.no_match -= 1
                            return self._answer(409, {"error": "no_match", "message": "none", **api.no_match_body})
                        api.granted += 1
                        n = api.granted
                        name = api.proxies[(n - 1) % len(api.proxies)] if api.proxies else f"p{n}"
                        api.active.add(f"lease-{n}")
                        api.holders[f"lease-{n}"] = body.get("holder")
                        api.lease_of[f"lease-{n}"] = (name, body.get("target"))
                    return self._answer(201, {
                        "leaseID": f"lease-{n}", "target": body.get("target"),
                        "proxy": {"namespace": "crawl", "name": name, "host": "127.0.0.1", "port": 3128,
                                  "url": f"http://{name}:pa%40ss@127.0.0.1:3128", "username": name,
                                  "password": "pa@ss"},
                        "expiresAt": "2030-01-01T00:00:00Z", "ttlSeconds": api.ttl})
                return self._answer(200, api.report(self.path.split("/")[3], body))

            def do_DELETE(self):
                _, away = self._record("DELETE")
                if away:
                    return self._answer(503, {"error": "unavailable", "message": "moving"}, [("Retry-After", "0")])
                if self.path.startswith("/v1/leases?holder="):
                    holder = self.path.split("=", 1)[1].replace("%2F", "/")
                    with api.lock:
                        mine = [i for i in api.active if api.holders.get(i) == holder]
                        api.active -= set(mine)
                    return self._answer(200, {"released": len(mine)})
                with api.lock:
                    api.active.discard(self.path.rsplit("/", 1)[1])
                self._answer(204)

        return Handler

    def report(self, lease_id: str, body: dict) -> dict:
        """The answer to a report, as the server makes it."""
        with self.lock:
            if "status" in body:
                status = body["status"]
                result = RESULTS.get(status, "error" if status >= 500 else "ok")
                asks = status in (401, 403, 407, 429)
            else:
                result = body["result"]
                asks = result in ("rate_limited", "blocked", "unreachable")
            proxy, target = self.lease_of.get(lease_id, ("?", None))
            target = body.get("target", target)
            repeated = (lease_id, body["reportID"]) in self.heard if "reportID" in body else False
            if "reportID" in body:
                self.heard.add((lease_id, body["reportID"]))
            if result in ("rate_limited", "blocked") and not repeated:
                until = time.time() + self.cooldown
                self.cooling[(proxy, target)] = max(until, self.cooling.get((proxy, target), 0))
            until = self.cooling.get((proxy, target), 0)
            cooling = until > time.time()
            return {"result": result, "leaseAgain": asks or cooling or lease_id not in self.active,
                    "target": target, "cooldownUntil": until if cooling else None,
                    "cooldownSeconds": max(1, int(until - time.time() + 0.999)) if cooling else None,
                    "repeated": repeated}

    def paths(self, method: str) -> list[str]:
        return [path for m, path, _ in self.calls if m == method]

    def reports(self) -> list[tuple[str, dict]]:
        """Every report that reached the API, without its report ID (`report_ids` has them)."""
        return [(path, {k: v for k, v in body.items() if k != "reportID"})
                for m, path, body in self.calls if path.endswith("/report")]

    def report_ids(self, path: str) -> list[str]:
        """The report IDs of the reports that reached `path`, in order."""
        return [body["reportID"] for m, p, body in self.calls if p == path and p.endswith("/report")]

    def index(self, method: str, path: str) -> int:
        """Where the first such call is in the record."""
        return next(i for i, (m, p, _) in enumerate(self.calls) if m == method and p == path)
