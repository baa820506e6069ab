"""The sender's HTTP client against real sockets: one kept-alive connection, a connection the
service closed while idle replaced once, failures as ``RequestFailed``, certificates checked for
an https service, and the environment's proxy gone through (docs/architecture.md, "The plugin's
sender")."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator

import pytest
from task_status_interceptors._http_client import KeptAliveClient, RequestFailed
from task_status_interceptors._transport import HttpTransport, TransportError

ANSWER = b'{"results": []}'


def answer(conn: socket.socket, body: bytes = ANSWER, status: str = "200 OK") -> None:
    conn.sendall(
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body
    )


def read_request(conn: socket.socket) -> tuple[list[str], bytes] | None:
    """(the head's lines, the body) of the next request on ``conn``; None when the client closed it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    length = next((int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length:")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return lines, body


class Listener:
    """A server on a free port: each accepted connection is handed to ``serve(conn, n)`` (n counts
    the connections from 1) on a thread of its own; what the handlers record goes in ``seen``."""

    def __init__(self, serve: Callable[[socket.socket, int], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.serve = serve
        self.connections = 0
        self.seen: list[list[str]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn, self.connections), daemon=True).start()

    def _handle(self, conn: socket.socket, n: int) -> None:
        with conn:
            self.serve(conn, n)

    def close(self) -> None:
        self.sock.close()


Listen = Callable[[Callable[[socket.socket, int], None]], Listener]


@pytest.fixture
def listen() -> Iterator[Listen]:
    listeners: list[Listener] = []

    def start(serve: Callable[[socket.socket, int], None]) -> Listener:
        listeners.append(Listener(serve))
        return listeners[-1]

    yield start
    for listener in listeners:
        listener.close()


@pytest.fixture(autouse=True)
def no_proxy_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_requests_share_one_kept_alive_connection_and_carry_the_headers(listen: Listen) -> None:
    bodies: list[bytes] = []

    def serve(conn: socket.socket, n: int) -> None:
        while (request := read_request(conn)) is not None:
            listener.seen.append(request[0])
            bodies.append(request[1])
            answer(conn, json.dumps({"n": len(bodies)}).encode())

    listener = listen(serve)
    client = KeptAliveClient(f"http://127.0.0.1:{listener.port}/base/", {"Authorization": "Bearer t"}, 2.0)
    try:
        assert client.post("/a", {"x": "é"}).json() == {"n": 1}
        reply = client.post("/b", [1, 2])
    finally:
        client.close()
    assert (reply.status_code, reply.json()) == (200, {"n": 2})
    assert listener.connections == 1
    assert [lines[0] for lines in listener.seen] == ["POST /base/a HTTP/1.1", "POST /base/b HTTP/1.1"]
    assert "Authorization: Bearer t" in listener.seen[0] and "Content-Type: application/json" in listener.seen[0]
    assert [json.loads(b) for b in bodies] == [{"x": "é"}, [1, 2]]


def test_a_connection_closed_while_idle_is_replaced_once(listen: Listen) -> None:
    # Each connection answers one request and is then closed without a word, as a service's
    # keep-alive timeout closes an idle one: the next request meets the closed connection.
    def serve(conn: socket.socket, n: int) -> None:
        if read_request(conn) is not None:
            answer(conn)

    listener = listen(serve)
    client = KeptAliveClient(f"http://127.0.0.1:{listener.port}", {}, 2.0)
    try:
        assert [client.post("/", {}).status_code for _ in range(3)] == [200, 200, 200]
    finally:
        client.close()
    assert listener.connections == 3


def test_a_new_connection_cut_before_its_answer_is_not_tried_again(listen: Listen) -> None:
    def serve(conn: socket.socket, n: int) -> None:
        read_request(conn)  # and closed without an answer

    listener = listen(serve)
    client = KeptAliveClient(f"http://127.0.0.1:{listener.port}", {}, 2.0)
    with pytest.raises(RequestFailed):
        client.post("/", {})
    assert listener.connections == 1


def test_no_service_and_no_answer_in_time_are_transport_errors(listen: Listen) -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(TransportError, match="ConnectionRefusedError"):
        HttpTransport(f"http://127.0.0.1:{port}", "t", 1.0).report_events([])

    silent = threading.Event()

    def serve(conn: socket.socket, n: int) -> None:
        read_request(conn)
        silent.wait(5)

    listener = listen(serve)
    transport = HttpTransport(f"http://127.0.0.1:{listener.port}", "t", 0.2)
    try:
        with pytest.raises(TransportError, match="TimeoutError"):
            transport.report_events([])
    finally:
        silent.set()
        transport.close()
    assert listener.connections == 1  # a request that timed out is the caller's to retry, not this client's


def test_an_https_service_is_verified_and_a_plain_one_loads_no_certificates() -> None:
    def verify_mode(url: str) -> ssl.VerifyMode | None:
        context = KeptAliveClient(url, {}, 1.0).ssl_context
        return None if context is None else context.verify_mode

    assert verify_mode("https://status.example") is ssl.CERT_REQUIRED
    assert verify_mode("HTTPS://status.example") is ssl.CERT_REQUIRED
    assert verify_mode("http://127.0.0.1:8000") is None


def test_a_plain_service_is_reached_through_the_environments_proxy_unless_no_proxy_covers_it(
    listen: Listen,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def serve(conn: socket.socket, n: int) -> None:
        while (request := read_request(conn)) is not None:
            proxy.seen.append(request[0])
            answer(conn)

    proxy = listen(serve)
    monkeypatch.setenv("HTTP_PROXY", f"http://op%40s:p%3Aw@127.0.0.1:{proxy.port}")
    client = KeptAliveClient("http://status.internal:8000/api", {}, 2.0)
    try:
        assert client.post("/x", {}).status_code == 200
    finally:
        client.close()
    assert proxy.seen[0][0] == "POST http://status.internal:8000/api/x HTTP/1.1"
    assert f"Proxy-Authorization: Basic {base64.b64encode(b'op@s:p:w').decode()}" in proxy.seen[0]

    monkeypatch.setenv("NO_PROXY", "status.internal")
    assert KeptAliveClient("http://status.internal:8000", {}, 2.0)._proxy is None


def test_an_https_service_is_reached_through_a_tunnel_of_the_environments_proxy(
    listen: Listen,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def serve(conn: socket.socket, n: int) -> None:
        request = read_request(conn)
        if request is not None:
            proxy.seen.append(request[0])
            answer(conn, b"", "403 Forbidden")

    proxy = listen(serve)
    monkeypatch.setenv("HTTPS_PROXY", f"127.0.0.1:{proxy.port}")
    client = KeptAliveClient("https://status.example", {}, 2.0)
    with pytest.raises(RequestFailed):  # the proxy refused the tunnel
        client.post("/x", {})
    assert proxy.seen[0][0] == "CONNECT status.example:443 HTTP/1.0"


def test_a_proxy_that_is_not_plain_http_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALL_PROXY", "socks5://user:secret@127.0.0.1:1080")
    assert KeptAliveClient("http://status.internal", {}, 1.0)._proxy is None
