"""The sender thread's HTTP client: one kept-alive HTTP/1.1 connection, one request at a time.

The sender posts its passes one after another from its own thread, so a connection pool, an
async-capable core and a readiness check of the socket before every request buy it nothing:
httpx's sync client spent four to five times the CPU of the standard library's ``http.client``
per request, most of the sender's cost per activity (docs/benchmarks.md, "2026-12-07 (late evening)").
What httpx did for the plugin is kept: certificates are checked as it checks them
(``httpx.create_ssl_context``: certifi's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), and a
proxy the environment names for the service's address (``HTTPS_PROXY``, ``HTTP_PROXY``,
``ALL_PROXY``, unless ``NO_PROXY`` covers it) is gone through: a tunnel (``CONNECT``) for an https
service, the absolute address for a plain one.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger("task_status_interceptors.reporter")

# A connection the service (or a proxy) closed while it sat idle fails the next request before an
# answer: that request goes once more, on a new connection. Any other failure is the caller's.
_CLOSED_WHILE_IDLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class RequestFailed(Exception):
    """No answer: the service could not be reached, cut the connection, or did not answer in time."""


@dataclass(frozen=True)
class Reply:
    """A whole answer, its body read."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class KeptAliveClient:
    """JSON posts to one service over one connection, opened when first needed and again after a
    failure; not thread-safe (the sender thread's alone)."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        url = urllib.parse.urlsplit(base_url)
        if url.scheme.lower() not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) address: {base_url!r}")
        self._https = url.scheme.lower() == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._origin = f"{url.scheme.lower()}://{url.netloc}"
        self._prefix = url.path.rstrip("/")
        self._timeout = timeout
        self.ssl_context: ssl.SSLContext | None = httpx.create_ssl_context() if self._https else None
        self._headers = {"Content-Type": "application/json", "User-Agent": "task-status-observer-plugin", **headers}
        self._proxy = _environment_proxy(url.scheme.lower(), self._host)
        self._connection: http.client.HTTPConnection | None = None

    def post(self, path: str, body: Any) -> Reply:
        """POST ``body`` as JSON to ``path`` (under the base address); raises ``RequestFailed``."""
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        target, headers = self._prefix + path, self._headers
        if self._proxy is not None and not self._https:  # a plain service through a proxy: its absolute address
            target, headers = self._origin + target, {**headers, **self._proxy[2]}
        for last in (False, True):
            connection = self._connection
            reused = connection is not None and connection.sock is not None
            if connection is None:
                connection = self._connection = self._connect()
            try:
                connection.request("POST", target, body=data, headers=headers)
                response = connection.getresponse()
                return Reply(response.status, response.read())
            except _CLOSED_WHILE_IDLE as exc:
                self.close()
                if last or not reused:
                    raise RequestFailed(type(exc).__name__) from exc
            except (OSError, http.client.HTTPException) as exc:  # refused, timed out, a malformed answer
                self.close()
                raise RequestFailed(type(exc).__name__) from exc
        raise AssertionError("unreachable")

    def _connect(self) -> http.client.HTTPConnection:
        host, port = (self._host, self._port) if self._proxy is None else self._proxy[:2]
        connection: http.client.HTTPConnection
        if self._https:
            connection = http.client.HTTPSConnection(host, port, timeout=self._timeout, context=self.ssl_context)
            if self._proxy is not None:
                connection.set_tunnel(self._host, self._port, headers=self._proxy[2])
        else:
            connection = http.client.HTTPConnection(host, port, timeout=self._timeout)
        return connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _environment_proxy(scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """(host, port, its authorization header) of the http proxy the environment names for this
    service, or None: none named, ``NO_PROXY`` covers the host, or not an http proxy."""
    proxies = urllib.request.getproxies()
    named = proxies.get(scheme) or proxies.get("all")
    if not named or urllib.request.proxy_bypass(host):
        return None
    proxy = urllib.parse.urlsplit(named if "://" in named else f"http://{named}")
    if proxy.scheme.lower() != "http" or not proxy.hostname:
        # (the address may hold credentials: only its scheme is logged)
        log.warning("the status service is reached directly: only http:// proxies are used, not %s://", proxy.scheme)
        return None
    headers = {}
    if proxy.username is not None:
        credentials = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    return proxy.hostname, proxy.port or 80, headers
