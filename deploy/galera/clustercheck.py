"""HTTP health of Galera nodes for HAProxy: 200 when a node takes writes, 503 otherwise.

    python deploy/galera/clustercheck.py --user U --password P 9201=127.0.0.1:3311 9202=127.0.0.1:3312 ...

One listening port per node (HAProxy's ``check port``). A node takes writes when
``wsrep_ready`` is ON and its state is Synced (4): a joiner, a donor or a node outside
the primary component answers queries with errors or stale data, so the balancer must
not send it a connection. Each check asks the node afresh (a short connect and read
timeout: a hung node fails its check instead of holding it).
"""

from __future__ import annotations

import argparse
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pymysql

SYNCED = "4"


def writable(host: str, port: int, user: str, password: str) -> tuple[bool, str]:
    try:
        conn = pymysql.connect(
            host=host, port=port, user=user, password=password, connect_timeout=1, read_timeout=1, write_timeout=1
        )
    except pymysql.err.MySQLError as exc:
        return False, f"unreachable: {exc.args[0] if exc.args else exc}"
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state')")
            status = dict(cur.fetchall())
    except pymysql.err.MySQLError as exc:
        return False, f"status unreadable: {exc.args[0] if exc.args else exc}"
    finally:
        conn.close()
    ready, state = status.get("wsrep_ready"), status.get("wsrep_local_state")
    return ready == "ON" and state == SYNCED, f"wsrep_ready={ready} wsrep_local_state={state}"


def serve(listen: int, host: str, port: int, user: str, password: str) -> ThreadingHTTPServer:
    class Check(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok, why = writable(host, port, user, password)
            body = f"{'synced' if ok else 'not available'}: {why}\n".encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # two checks a second: not logged
            pass

    server = ThreadingHTTPServer(("127.0.0.1", listen), Check)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("nodes", nargs="+", help="LISTEN_PORT=HOST:PORT, one per node")
    args = parser.parse_args()
    for spec in args.nodes:
        listen, address = spec.split("=", 1)
        host, port = address.rsplit(":", 1)
        serve(int(listen), host, int(port), args.user, args.password)
    threading.Event().wait()


if __name__ == "__main__":
    main()
