"""`orch serve`: the store's pages, a live lab page and JSON endpoints over HTTP
(docs/serve.md). Thin: the app is orchestrator/serve's, the server uvicorn."""
from __future__ import annotations

import ipaddress
import socket

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import db_option, errors
from orchestrator.errors import ConfigError

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (127.0.0.0/8, ::1, `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one), or a ConfigError."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


@click.command()
@click.option("--host", default=LOOPBACK, show_default=True,
              help="Address to listen on. Anything but a loopback address makes the pages "
                   "reachable from that network (a warning says so).")
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True,
              help="Port to listen on (0: any free port; the line printed names it).")
@click.option("--poll", "poll_s", type=click.FloatRange(0.2, 60), default=1.0,
              show_default=True, metavar="SECONDS", help="How often the lab page refreshes.")
@db_option
@friendly
def serve(host: str, port: int, poll_s: float, db: str | None) -> None:
    """Serve the store's pages live: the lab page (/lab: every device's state, running cell
    with its tokens and tok/s as they stream, temperature, free RAM, queue, recent failures),
    the site's pages where orch has them, and JSON endpoints (/api/lab, /api/devices,
    /api/sessions, /api/runs/ID). Read-only: nothing it serves writes the store. Runs until
    Ctrl-C. Needs the serve extra (`pip install -e '.[serve]'`)."""
    try:
        import uvicorn
    except ImportError:
        raise ConfigError("orch serve needs uvicorn and starlette: "
                          "pip install -e '.[serve]'") from None
    from orchestrator.db.store import resolve_url
    from orchestrator.serve import create_app

    # on an IPv4 loopback address, only requests naming it (or localhost) are answered; the
    # middleware cannot parse an IPv6 Host header, and another address may have many names
    local = host == "localhost" or (is_loopback(host) and ":" not in host)
    app = create_app(resolve_url(db), poll_s=poll_s,
                     allowed_hosts=sorted({host, "localhost", "127.0.0.1"}) if local else None)
    shown = f"[{host}]" if ":" in host else host
    if not is_loopback(host):
        errors.print(f"warning: --host {host} is not a loopback address: the pages and /api/ "
                     f"are reachable from that network (read-only, no login)",
                     markup=False, highlight=False)
    sock = bind(host, port)
    errors.print(f"orch serve: http://{shown}:{sock.getsockname()[1]}/lab "
                 f"(store {app.state.store.url}; Ctrl-C stops)", markup=False, highlight=False)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
