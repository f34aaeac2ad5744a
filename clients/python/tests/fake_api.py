"""A stand-in of the discovery API for the shims' unit tests: a real HTTP server on loopback
that records every call, maps statuses as the server does, and can be taken away (its port
closed, so connections are refused) or answer 503 for a while."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeApi:
    """Grants leases (after `no_match` 409s) on proxies named by `proxies` in turn, or `p<n>`."""

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
                            return self._answer(409, {"error": "no_match", "message": "none", "considered": 1})
                        api.granted += 1
                        n = api.granted
                        name = api.proxies[(n - 1) % len(api.proxies)] if api.proxies else f"p{n}"
                        api.active.add(f"lease-{n}")
                        api.holders[f"lease-{n}"] = body.get("holder")
                    return self._answer(201, {
                        "leaseID": f"lease-{n}", "target": body.get("target"),
                        "proxy": {"namespace": "crawl", "name": name, "host": "127.0.0.1", "port": 3128,
                                  "url": f"http://{name}:pa%40ss@127.0.0.1:3128", "username": name,
                                  "password": "pa@ss"},
                        "expiresAt": "2030-01-01T00:00:00Z", "ttlSeconds": api.ttl})
                if "status" in body:
                    status = body["status"]
                    result = {429: "rate_limited", 403: "blocked", 401: "blocked", 407: None}.get(
                        status, "error" if status >= 500 else "ok")
                    return self._answer(200, {"result": result, "leaseAgain": status in (401, 403, 407, 429)})
                return self._answer(204)

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

    def paths(self, method: str) -> list[str]:
        return [path for m, path, _ in self.calls if m == method]

    def reports(self) -> list[tuple[str, dict]]:
        return [(path, body) for m, path, body in self.calls if path.endswith("/report")]

    def index(self, method: str, path: str) -> int:
        """Where the first such call is in the record."""
        return next(i for i, (m, p, _) in enumerate(self.calls) if m == method and p == path)
