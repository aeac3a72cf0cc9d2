#!/usr/bin/env python3
"""The lab's broker choice: Redis against RabbitMQ under the same tiny Celery app (run by hand).

Not run by bench/run (the leading `_`): CI has no rabbitmq-server. Needs redis-server and
rabbitmq-server (Debian packages) and celery[redis]; both brokers are private instances on
127.0.0.1 in a temporary directory (RabbitMQ: its own node name, ports and epmd), stopped at
the end. Celery is configured like the lab (docs/lab.md): acks_late, prefetch multiplier 1, a
solo-pool worker consuming one queue `dev.x`, no result backend.

Figures per round and broker (RabbitMQ is printed as "orch", Redis as the baseline; goal
`report`): enqueue 10,000 tasks with app.send_task (tasks/s); a burst of 200 no-op tasks until
the worker has run them all (ms/task); one task at a time, send -> task start (ms); the worker's
RSS; the broker's RSS idle and with 10,000 queued messages. Then, once per broker, the
redelivery experiment: a worker A SIGKILLed mid-task, a standby worker B on the same queue,
the seconds until B starts the task again (Redis: visibility_timeout; RabbitMQ: the connection's
close), and RabbitMQ's consumer_timeout on a task that outlives it.

Over 400 lines on purpose: one self-contained script run by hand (its own broker processes, app
and rounds).
"""
from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from _common import figure, num, options  # bench/ is on sys.path (a bench, the tests' fixture)

TASKS = textwrap.dedent("""\
    import os, time
    from celery import Celery

    app = Celery("brokerbench", broker=os.environ["BENCH_BROKER"])
    app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, task_ignore_result=True,
                    task_default_queue="dev.x", worker_hijack_root_logger=False,
                    broker_transport_options={"visibility_timeout":
                                              float(os.environ.get("BENCH_VT", "3600"))})

    @app.task(name="mark")
    def mark(path):
        with open(path, "a") as out:
            out.write(f"{time.time()} {os.getpid()}\\n")

    @app.task(name="hold")
    def hold(path, seconds):
        mark(path)
        time.sleep(seconds)
        with open(path, "a") as out:
            out.write(f"end {time.time()} {os.getpid()}\\n")
    """)


SERIAL = itertools.count()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid: int) -> float:
    """RSS of pid and all its descendants, MiB."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        todo += [int(c) for c in children]
    return total / 1024


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.005)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# -- a private redis-server, shared with bench/lab and the tests' fixture (tests/redis_fixture.py)
# Plain Python (no test runner): bench/run works after the plain install (`pip install .`).
REDIS_START_TIMEOUT = 20.0  # seconds until the server must answer PING


def redis_binary() -> str | None:
    """redis-server's path (the Debian package's binary, never its system service), or None."""
    path = shutil.which("redis-server")
    if path is None and os.access("/usr/bin/redis-server", os.X_OK):
        path = "/usr/bin/redis-server"
    return path


def start_redis(directory: Path, timeout: float = REDIS_START_TIMEOUT, port: int | None = None
                ) -> tuple[subprocess.Popen, str]:
    """Start a redis-server in `directory` on a free loopback port (or `port`: a restart),
    without persistence;
    (process, `redis://127.0.0.1:PORT/0`) once it answers PING (the `redis` client: orch's lab
    extra). RuntimeError when it cannot start. The caller stops the process (`stop`)."""
    import redis

    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-server is not installed")
    port = port or free_port()
    log = directory / "redis.log"
    url = f"redis://127.0.0.1:{port}/0"
    # no persistence (--save '' --appendonly no): a private broker starts empty every time
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
            "--daemonize", "no", "--save", "", "--appendonly", "no", "--dir", str(directory),
            "--logfile", str(log)]
    proc = subprocess.Popen(argv, cwd=directory, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)

    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            return bool(client.ping())
        except redis.exceptions.ConnectionError:
            return False
    try:
        wait_for(answers, timeout, "redis-server to answer PING")
    except BaseException:
        stop(proc)
        raise
    finally:
        client.close()
    return proc, url


def flush(url: str) -> None:
    """Empty the database of `url` (FLUSHDB): queued tasks and keys of earlier users go."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


class Redis:
    name = "redis"

    def __init__(self, tmp: Path) -> None:
        port = free_port()
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp), "--logfile", str(tmp / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: _connects(port), 20, "redis-server")
        self.version = subprocess.run(["redis-server", "--version"], capture_output=True,
                                      text=True, check=True).stdout.split()[2].removeprefix("v=")

    def rss(self) -> float:
        return rss_mb(self.proc.pid)

    def close(self) -> None:
        stop(self.proc)


class Rabbit:
    """A private RabbitMQ node: own node name, AMQP/dist/epmd ports, mnesia and logs in tmp."""
    name = "rabbitmq"
    BIN = Path("/usr/lib/rabbitmq/bin")

    def __init__(self, tmp: Path) -> None:
        base = tmp / "rabbit"
        (base / "home").mkdir(parents=True)
        amqp, dist, epmd = free_port(), free_port(), free_port()
        (base / "rabbitmq.conf").write_text(f"listeners.tcp.1 = 127.0.0.1:{amqp}\n")
        (base / "enabled_plugins").write_text("[].\n")
        (base / "env.conf").write_text("")
        self.node = f"orchbench{amqp}@localhost"
        self.env = dict(os.environ, HOME=str(base / "home"), RABBITMQ_NODENAME=self.node,
                        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_NODE_PORT=str(amqp),
                        RABBITMQ_DIST_PORT=str(dist), ERL_EPMD_PORT=str(epmd),
                        ERL_EPMD_ADDRESS="127.0.0.1", ERL_FLAGS="-start_epmd false",
                        RABBITMQ_MNESIA_BASE=str(base / "mnesia"),
                        RABBITMQ_LOG_BASE=str(base / "log"),
                        RABBITMQ_CONFIG_FILE=str(base / "rabbitmq.conf"),
                        RABBITMQ_CONF_ENV_FILE=str(base / "env.conf"),
                        RABBITMQ_ENABLED_PLUGINS_FILE=str(base / "enabled_plugins"),
                        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface "
                                                            "{127,0,0,1}")
        self.url = f"amqp://guest:guest@127.0.0.1:{amqp}//"
        # our own epmd as a child (not `-daemon`), so it is reaped and stopped with the node
        self.epmd = subprocess.Popen(["epmd", "-port", str(epmd), "-address", "127.0.0.1"],
                                     env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_for(lambda: _connects(epmd), 20, "epmd")
        with open(base / "server.out", "w") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([str(self.BIN / "rabbitmq-server")], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT)
        self.ctl("wait", "--pid", str(self.proc.pid), "--timeout", "120")
        self.version = self.ctl("version").strip()

    def ctl(self, *argv: str) -> str:
        return subprocess.run([str(self.BIN / "rabbitmqctl"), "-n", self.node, *argv],
                              env=self.env, capture_output=True, text=True, check=True,
                              timeout=180).stdout

    def rss(self) -> float:
        return rss_mb(self.proc.pid) + rss_mb(self.epmd.pid)

    def close(self) -> None:
        try:
            self.ctl("stop")
        except (subprocess.SubprocessError, OSError):
            pass
        stop(self.proc)
        stop(self.epmd)


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Lab:
    """The Celery app and its workers against one broker."""

    def __init__(self, broker: Redis | Rabbit, tmp: Path, vt: float = 3600) -> None:
        self.broker, self.tmp = broker, tmp
        self.env = dict(os.environ, BENCH_BROKER=broker.url, BENCH_VT=str(vt),
                        PYTHONPATH=str(tmp))
        os.environ.update(BENCH_BROKER=broker.url, BENCH_VT=str(vt))
        sys.modules.pop("brokerbench_tasks", None)
        import brokerbench_tasks
        self.app = brokerbench_tasks.app

    def worker(self, name: str) -> subprocess.Popen:
        with open(self.tmp / f"worker-{self.broker.name}-{name}.log", "a") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "brokerbench_tasks", "worker", "-P",
                 "solo", "-c", "1", "-Q", "dev.x", "-n", f"{name}@%h", "-l", "warning"],
                cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def marks(self) -> Path:
        """A new file for a task's marks (unique over every Lab of the run)."""
        return self.tmp / f"marks-{self.broker.name}-{next(SERIAL)}"

    def send(self, task: str, *args: object) -> None:
        self.app.send_task(task, args=list(args), queue="dev.x")

    def depth(self) -> int:
        with self.app.connection_for_write() as conn:
            return conn.default_channel.queue_declare("dev.x", passive=True).message_count

    def purge(self) -> None:
        """Empty dev.x (declared first, as Celery declares it: RabbitMQ refuses to purge a
        queue that does not exist)."""
        with self.app.connection_for_write() as conn:
            self.app.amqp.queues["dev.x"](conn.default_channel).declare()
            conn.default_channel.queue_purge("dev.x")

    def warm(self, timeout: float = 60) -> None:
        """Wait until a worker runs tasks (one mark task done)."""
        path = self.marks()
        self.send("mark", str(path))
        wait_for(path.exists, timeout, "a worker to run its first task")


def lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def one_round(lab: Lab, enqueue: int, burst: int, single: int) -> dict[str, float]:
    got = {"broker_idle_mb": lab.broker.rss()}
    lab.purge()
    start = time.perf_counter()
    for _ in range(enqueue):
        lab.send("mark", "/dev/null")
    got["enqueue_per_s"] = enqueue / (time.perf_counter() - start)
    wait_for(lambda: lab.depth() >= enqueue, 60, f"{enqueue} queued messages")
    time.sleep(1)
    got["broker_queued_mb"] = lab.broker.rss()
    lab.purge()
    worker = lab.worker("w")
    try:
        lab.warm()
        path = lab.marks()
        start = time.perf_counter()
        for _ in range(burst):
            lab.send("mark", str(path))
        wait_for(lambda: len(lines(path)) >= burst, 120, f"{burst} tasks run")
        got["burst_ms"] = (time.perf_counter() - start) / burst * 1000
        latencies = []
        path = lab.marks()
        for index in range(single):
            sent = time.time()
            lab.send("mark", str(path))
            wait_for(lambda i=index: len(lines(path)) > i, 30, "one task")
            latencies.append((float(lines(path)[index].split()[0]) - sent) * 1000)
        got["single_ms"] = sorted(latencies)[len(latencies) // 2]
        got["worker_mb"] = rss_mb(worker.pid)
    finally:
        stop(worker)
    return got


def redelivery(lab: Lab, hold: float) -> str:
    """Worker A takes a long task and is SIGKILLed; standby B on dev.x: seconds until B starts
    the same task again (from the kill, and from A's delivery)."""
    lab.purge()
    a = lab.worker("a")
    b = None
    try:
        lab.warm()
        path = lab.marks()
        lab.send("hold", str(path), hold)
        wait_for(lambda: len(lines(path)) >= 1, 60, "A to start the task")
        delivered = float(lines(path)[0].split()[0])
        b = lab.worker("b")
        lab.warm()
        a.kill()
        a.wait(timeout=10)
        killed = time.time()
        wait_for(lambda: len(lines(path)) >= 2, 600, "B to start the task again")
        again = float(lines(path)[1].split()[0])
        return (f"redelivered {again - killed:.2f} s after the SIGKILL, {again - delivered:.1f} s "
                f"after the first delivery")
    except RuntimeError as exc:
        return str(exc)
    finally:
        for proc in (a, b):   # killed: a warm shutdown would wait for the held task
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def consumer_timeout(lab: Lab, rabbit: Rabbit, timeout_ms: int, hold: float) -> str:
    """RabbitMQ closes the channel of a delivery unacked longer than consumer_timeout: one
    worker, a task holding `hold` s; the starts of that task (the worker stays alive)."""
    rabbit.ctl("eval", f"application:set_env(rabbit, consumer_timeout, {timeout_ms}).")
    lab.purge()
    worker = lab.worker("t")
    try:
        lab.warm()
        path = lab.marks()
        lab.send("hold", str(path), hold)
        wait_for(lambda: len(lines(path)) >= 1, 60, "the task to start")
        time.sleep(hold * 2 + 30)
        starts = [float(line.split()[0]) for line in lines(path) if not line.startswith("end")]
        log = (lab.tmp / "worker-rabbitmq-t.log").read_text(errors="replace")
        closed = "timed out" in log or "PRECONDITION_FAILED" in log
        return (f"consumer_timeout {timeout_ms / 1000:g} s, task of {hold:g} s: started "
                f"{len(starts)} times at +" + ", +".join(f"{s - starts[0]:.1f}" for s in starts)
                + f" s; channel closed by the broker: {closed}")
    finally:
        stop(worker)
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            rabbit.ctl("eval", "application:set_env(rabbit, consumer_timeout, 1800000).")


def main() -> int:
    args = options(__doc__, "fewer tasks, no redelivery experiment", rounds=(1, 3))
    enqueue, burst, single = (1000, 50, 10) if args.quick else (10_000, 200, 30)
    missing = [tool for tool in ("redis-server", "epmd") if not shutil.which(tool)]
    if missing or not (Rabbit.BIN / "rabbitmq-server").exists():
        print(f"broker  SKIPPED (missing {missing or 'rabbitmq-server'})")
        return 0
    with tempfile.TemporaryDirectory(prefix="broker.") as name:
        tmp = Path(name)
        (tmp / "brokerbench_tasks.py").write_text(TASKS)
        sys.path.insert(0, str(tmp))
        brokers: list[Redis | Rabbit] = []
        try:
            brokers.append(Redis(tmp))
            brokers.append(Rabbit(tmp))
            rounds: dict[str, list[dict[str, float]]] = {b.name: [] for b in brokers}
            for index in range(args.rounds):
                for broker in brokers[index % 2:] + brokers[:index % 2]:
                    rounds[broker.name].append(one_round(Lab(broker, tmp), enqueue, burst,
                                                         single))
            notes = {"enqueue_per_s": ("tasks/s", f"{enqueue:,} app.send_task to dev.x"),
                     "burst_ms": ("ms/task", f"{burst} queued no-op tasks, solo worker"),
                     "single_ms": ("ms", f"send -> task start, median of {single}"),
                     "worker_mb": ("MiB", "worker RSS, solo pool"),
                     "broker_idle_mb": ("MiB", "broker RSS idle (rabbitmq: +epmd)"),
                     "broker_queued_mb": ("MiB", f"broker RSS with {enqueue:,} queued")}
            for key, (unit, note) in notes.items():
                figure(f"broker[{key}]", [r[key] for r in rounds["rabbitmq"]], unit, "redis",
                       [r[key] for r in rounds["redis"]], "report",
                       note=f"rabbitmq {brokers[1].version} vs redis {brokers[0].version}; {note}")
            if not args.quick:
                vt = 15.0
                print(f"REDELIVERY redis (visibility_timeout {vt:g} s, kombu defaults "
                      f"otherwise): {redelivery(Lab(brokers[0], tmp, vt=vt), 300)}", flush=True)
                print(f"REDELIVERY rabbitmq: {redelivery(Lab(brokers[1], tmp), 300)}",
                      flush=True)
                print(f"CONSUMER_TIMEOUT rabbitmq: "
                      f"{consumer_timeout(Lab(brokers[1], tmp), brokers[1], 5000, 70)}",
                      flush=True)
        finally:
            for broker in brokers:
                broker.close()
    print(f"(medians over {args.rounds} rounds; {num(enqueue)} tasks enqueued per round)")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
