"""The Celery app every lab process builds the same way: the broker, late acknowledgement,
prefetch 1, JSON only, no result backend (results go to the store), and the broker's
redelivery timeout above the longest cell."""
from __future__ import annotations

import os
from typing import Any

from orchestrator.errors import ConfigError, Failed

TASK = "orch.lab.cell"            # the one task: run lab_cell <id> (orchestrator/lab/cell_task)
QUEUE_PREFIX = "dev."
# Redis redelivers a task its consumer has not acknowledged after this long, even while the
# consumer still runs it: it must exceed the longest cell (timeout ≤ 7 days, plus cooldown).
# A consumer that died is not waited for: the store tells its successor what it had taken.
VISIBILITY_TIMEOUT_S = 8 * 24 * 3600
# Every broker socket has a connect and a read bound: a broker that accepts and never answers
# (a hung Redis, a proxy on the wrong port) is one line within this, never a wait for ever.
# Above kombu's Redis BRPOP poll (1 s), which a consumer's read waits out by design.
BROKER_TIMEOUT_S = 10.0


class LabError(ConfigError):
    """A lab command cannot go on (no broker, an unknown device, ...): one line, exit 2."""


class BrokerSilent(Failed):
    """The broker accepted the connection and did not answer within BROKER_TIMEOUT_S: one
    line, exit 1 (the address is right, the peer is not working; trying later may help)."""


def is_timeout(exc: BaseException) -> bool:
    """A broker read or connect that ran out of time (redis-py's TimeoutError, a socket's, or
    kombu's wrapper of either), as opposed to a refusal or a wrong address."""
    import socket

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (TimeoutError, socket.timeout)) or \
                type(current).__name__ == "TimeoutError":
            return True
        current = current.__cause__ or current.__context__
    return False


def silent(app: Any) -> BrokerSilent:
    from kombu.utils.url import maybe_sanitize_url

    return BrokerSilent(f"broker {maybe_sanitize_url(app.conf.broker_url)} accepted the "
                        f"connection but did not answer within {BROKER_TIMEOUT_S:g} s (a hung "
                        f"server, or not a broker at that port)")


def queue_name(device: str) -> str:
    return QUEUE_PREFIX + device


def task_id(cell_id: int) -> str:
    """A cell's Celery task id: one per lab_cell row, so `orch lab cancel` can revoke it."""
    return f"orch-lab-cell-{cell_id}"


def broker_url(given: str | None) -> str:
    url = given or os.environ.get("ORCH_BROKER")
    if not url:
        raise LabError("no broker: give --broker URL (e.g. redis://127.0.0.1:6379/0) or set "
                       "ORCH_BROKER")
    if "://" not in url:
        raise LabError(f"--broker {url!r}: not a broker URL (redis://HOST:PORT/DB or "
                       f"amqp://USER:PASS@HOST:PORT//)")
    return url


def make_app(broker: str, visibility_timeout_s: float = VISIBILITY_TIMEOUT_S) -> Any:
    """The lab's Celery app. Imported lazily: celery is the `orch[lab]` extra, and `orch run`
    never needs it."""
    try:
        from celery import Celery
    except ImportError:
        raise LabError("the lab needs Celery: install the lab extra "
                       "(.venv/bin/pip install -e '.[lab]': celery, redis)") from None
    app = Celery("orch-lab", broker=broker, set_as_current=False)
    app.conf.update(
        task_acks_late=True,                 # acknowledged when the cell has ended
        task_acks_on_failure_or_timeout=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,        # a consumer holds one cell, never the next
        worker_concurrency=1,
        task_serializer="json", accept_content=["json"],
        task_ignore_result=True, result_backend=None,
        task_default_queue="orch.lab.unrouted",
        broker_connection_retry_on_startup=True,
        # AMQP: a solo worker in a long cell cannot answer broker heartbeats (celery#3430);
        # the broker would drop it and requeue its cell. Redis has none.
        broker_heartbeat=0,
        broker_transport_options={"visibility_timeout": visibility_timeout_s,
                                  "socket_timeout": BROKER_TIMEOUT_S,          # Redis
                                  "socket_connect_timeout": BROKER_TIMEOUT_S,
                                  "connect_timeout": BROKER_TIMEOUT_S},        # AMQP
        broker_connection_timeout=BROKER_TIMEOUT_S,
        redis_socket_timeout=BROKER_TIMEOUT_S,                # a result backend, if one is set
        redis_socket_connect_timeout=BROKER_TIMEOUT_S,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_send_task_events=False,
        worker_enable_remote_control=True,
    )
    return app


def check_broker(app: Any, timeout_s: float = 10.0) -> None:
    """Connect once: a wrong URL or a broker that is down is a one-line error up front."""
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout_s)
            client = getattr(conn.default_channel, "client", None)
            if client is not None:   # Redis: connecting proves nothing of a silent peer
                client.ping()
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; all mean "no broker"
        if is_timeout(exc):
            raise silent(app) from None
        from kombu.utils.url import maybe_sanitize_url

        raise LabError(f"broker {maybe_sanitize_url(app.conf.broker_url)} is not reachable: "
                       f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None


def queue_depths(app: Any, devices: list[str]) -> dict[str, int | None]:
    """Messages waiting in each device's queue, as the broker counts them (None: unknown)."""
    depths: dict[str, int | None] = {}
    try:
        with app.connection_for_read() as conn:
            channel = conn.default_channel
            for device in devices:
                try:
                    depths[device] = channel.queue_declare(queue=queue_name(device),
                                                           passive=True).message_count
                except Exception as exc:  # noqa: BLE001 - a queue never declared: none waits
                    if is_timeout(exc):
                        raise
                    depths[device] = None
    except Exception as exc:  # noqa: BLE001 - status still shows the store's view
        if is_timeout(exc):
            raise silent(app) from None
        return {device: None for device in devices}
    return depths
