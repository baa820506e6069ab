"""Which origins reach Centrifugo, on each transport the client may use.

Centrifugo checks ``client.allowed_origins`` on the WebSocket upgrade (403 otherwise); on
HTTP-streaming and SSE it answers CORS for an allowed origin only, so the browser itself refuses
another origin's page the response. In Chromium, a page on an allowed origin connects over each of
the three, and a page on any other origin over none — with a valid connection token in hand.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.support.browser import chromium
from tests.support.processes import REPO_ROOT, CentrifugoNode, free_port
from tests.support.realtime import connection_token

TRANSPORTS = {"websocket": "/connection/websocket", "http_stream": "/connection/http_stream", "sse": "/connection/sse"}

# Each transport alone, as the client's fallback list would try it; CONNECTED or what stopped it.
PAGE = """<!doctype html><html><body><script src="centrifuge.js"></script><script>
function connect(transport, endpoint, token) {
  return new Promise((resolve) => {
    let over = false;
    const client = new Centrifuge([{ transport, endpoint }], {
      token, emulationEndpoint: endpoint.replace(/\\/connection\\/.*/, '/emulation'),
    });
    const finish = (result) => {
      if (over) return;
      over = true;
      resolve(result);
      client.disconnect();
    };
    client.on('connected', (ctx) => finish('CONNECTED ' + ctx.transport));
    client.on('disconnected', (ctx) => finish('DISCONNECTED ' + ctx.code));
    setTimeout(() => finish("NOT CONNECTED"), 5000);
    client.connect();
  });
}
</script></body></html>"""


@contextlib.contextmanager
def _site(root: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_only_an_allowed_origin_connects_over_websocket_http_streaming_and_sse(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(REPO_ROOT / "web" / "node_modules" / "centrifuge" / "dist" / "centrifuge.js", site)
    (site / "page.html").write_text(PAGE)
    with _site(site) as allowed, _site(site) as refused:
        node = CentrifugoNode(workdir=tmp_path, allowed_origins=[allowed]).start()
        try:
            base = node.ws_url.removesuffix("/connection/websocket")
            token = connection_token(node.token_secret, "acme/alice", [])
            seen: dict[str, dict[str, str]] = {}
            with chromium() as (_, browser):
                for origin in (allowed, refused):
                    page = browser.new_page()
                    page.goto(f"{origin}/page.html")
                    seen[origin] = {}
                    for transport, path in TRANSPORTS.items():
                        endpoint = (base if transport == "websocket" else base.replace("ws://", "http://")) + path
                        seen[origin][transport] = page.evaluate(
                            "([t, e, k]) => connect(t, e, k)", [transport, endpoint, token]
                        )
                    page.close()
        finally:
            node.stop()
    assert seen[allowed] == {t: f"CONNECTED {t}" for t in TRANSPORTS}, seen
    assert not [r for r in seen[refused].values() if r.startswith("CONNECTED")], seen
