"""A real nginx in front of status API replicas and Centrifugo nodes, configured with what ships
in deploy/nginx (the locations file is included as it is; only the upstream addresses and the
listening port are this run's)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.processes import REPO_ROOT, free_port, missing_service, needs_service, wait_until

LOCATIONS = REPO_ROOT / "deploy" / "nginx" / "task-observer-locations.conf"


def nginx_binary() -> str:
    needs_service("nginx", "scripts/services install nginx")
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found is None:
        missing_service("nginx", "scripts/services install nginx")
    assert found is not None
    return found


@dataclass
class Nginx:
    workdir: Path
    api_ports: Sequence[int]
    realtime_ports: Sequence[int]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/connection/websocket"

    def config(self) -> str:
        def servers(ports: Sequence[int]) -> str:
            return "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;" for p in ports)

        return f"""
worker_processes 1;
pid {self.workdir}/nginx.pid;
error_log {self.workdir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {self.workdir}/access.log;
    client_body_temp_path {self.workdir}/body;
    proxy_temp_path {self.workdir}/proxy;
    fastcgi_temp_path {self.workdir}/fastcgi;
    uwsgi_temp_path {self.workdir}/uwsgi;
    scgi_temp_path {self.workdir}/scgi;
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}
    upstream task_observer_api {{
{servers(self.api_ports)}
        keepalive 32;
    }}
    upstream task_observer_realtime {{
{servers(self.realtime_ports)}
    }}
    server {{
        listen 127.0.0.1:{self.port};
        include {LOCATIONS};
    }}
}}
"""

    def check(self) -> str:
        """``nginx -t`` of this configuration (raises with nginx's words if it is refused)."""
        path = self._write()
        done = subprocess.run([nginx_binary(), "-t", "-p", str(self.workdir), "-c", str(path)], capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode())
        return done.stderr.decode()

    def start(self) -> Nginx:
        path = self._write()
        with (self.workdir / "nginx.out").open("ab") as log:
            self.process = subprocess.Popen(
                [nginx_binary(), "-p", str(self.workdir), "-c", str(path), "-g", "daemon off;"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(self._listening, 15, "nginx")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def _listening(self) -> bool:
        import socket

        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"nginx exited: {(self.workdir / 'nginx.out').read_text()}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def _write(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "nginx.conf"
        path.write_text(self.config())
        return path
