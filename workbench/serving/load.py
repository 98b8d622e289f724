"""Requests under load: one model instance serving from a queue, one request at a time, fed by N
closed-loop client streams or by an open-loop Poisson arrival process (MLPerf's server
scenario). Each request records its arrival, the start of its compute and its completion, so
queueing delay and compute time are kept apart."""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from workbench.serving.records import LoadPoint, LoopKind
from workbench.timing import Measurement

# Fixed, so a rerun offers the same arrival pattern.
ARRIVAL_SEED = 0


@dataclass
class Request:
    arrival: float  # perf_counter seconds: when it was sent (or scheduled, open loop)
    started: float = 0.0
    finished: float = 0.0
    error: str = ""
    done: threading.Event = field(default_factory=threading.Event)


class Server:
    """One model instance: takes requests off a queue in arrival order and serves each with
    `call` (one synchronized request), on the calling thread.

    The model runs on the thread that measured the batch sweep, and the clients run on their own
    threads, which only sleep and wait: torch's intra-op pool belongs to the thread that calls
    it, and the same call from a new thread measured 4x slower on 2 cores (tiny-transformer,
    batch 1: 1.5 ms against 0.38 ms)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._call = call
        self._queue: queue.Queue[Request | None] = queue.Queue()

    def submit(self, request: Request) -> None:
        self._queue.put(request)

    def run(self, producers: list[threading.Thread]) -> None:
        """Start the producers and serve until every one of them has finished and every request
        they sent is served."""

        def close_when_done() -> None:
            for producer in producers:
                producer.join()
            self._queue.put(None)  # after every request sent: FIFO serves them first

        for producer in producers:
            producer.start()
        closer = threading.Thread(target=close_when_done, name="serving-closer")
        closer.start()
        while (request := self._queue.get()) is not None:
            request.started = perf_counter()
            try:
                output = self._call()
                del output
            except Exception as exc:  # the request fails; its client sees it, serving goes on
                request.error = f"{type(exc).__name__}: {exc}"
            request.finished = perf_counter()
            request.done.set()
        closer.join()


def _point(
    loop: LoopKind,
    requests: list[Request],
    streams: int | None,
    rate: float | None,
    cut_short: bool,
    slo_s: float | None,
    q: float,
) -> LoadPoint:
    done = [r for r in requests if r.done.is_set() and not r.error]
    if not done:
        return LoadPoint(loop, streams, rate, 0, 0.0, None, None, None, None, cut_short)
    latency = Measurement([r.finished - r.arrival for r in done])
    seconds = max(r.finished for r in done) - min(r.arrival for r in done)
    held = None if slo_s is None else latency.tail(q)[1] <= slo_s
    return LoadPoint(
        loop, streams, rate, len(done), seconds, latency,
        Measurement([r.started - r.arrival for r in done]),
        Measurement([r.finished - r.started for r in done]),
        held, cut_short,
    )  # fmt: skip


def closed_loop(
    call: Callable[[], Any],
    streams: int,
    requests: int,
    budget_s: float,
    slo_s: float | None,
    q: float,
) -> LoadPoint:
    """`streams` clients, each sending its next request when its last one returns, until
    `requests` were sent in all or `budget_s` passed."""
    sent: list[Request] = []
    lock = threading.Lock()
    deadline = perf_counter() + budget_s
    cut = threading.Event()

    def client(server: Server) -> None:
        while True:
            with lock:
                if len(sent) >= requests:
                    return
                if perf_counter() >= deadline:
                    cut.set()
                    return
                request = Request(perf_counter())
                sent.append(request)
            server.submit(request)
            request.done.wait()

    server = Server(call)
    server.run([threading.Thread(target=client, args=(server,)) for _ in range(streams)])
    return _point("closed", sent, streams, None, cut.is_set(), slo_s, q)


def open_loop(
    call: Callable[[], Any],
    rate: float,
    requests: int,
    budget_s: float,
    slo_s: float | None,
    q: float,
) -> LoadPoint:
    """Poisson arrivals at `rate` per second, whatever the server's progress, until `requests`
    were sent or `budget_s` passed; then every request sent is waited for (a queue that grows
    without bound is what an overloaded service does, and its latency says so)."""
    draw = random.Random(ARRIVAL_SEED)
    sent: list[Request] = []
    cut = threading.Event()
    server = Server(call)

    def arrivals() -> None:
        start = perf_counter()
        scheduled = start
        for _ in range(requests):
            scheduled += draw.expovariate(rate)
            if scheduled - start > budget_s:
                cut.set()
                return
            wait = scheduled - perf_counter()
            if wait > 0:
                time.sleep(wait)
            # Latency counts from the scheduled arrival, as MLPerf's LoadGen does: a late
            # sender never hides queueing.
            request = Request(scheduled)
            sent.append(request)
            server.submit(request)

    server.run([threading.Thread(target=arrivals, name="arrivals")])
    return _point("open", sent, None, rate, cut.is_set(), slo_s, q)
