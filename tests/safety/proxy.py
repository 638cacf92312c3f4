"""A small TCP proxy on loopback that can delay traffic and blackhole it, for fault tests.

>>> proxy = Proxy("127.0.0.1", server.port).start()      # doctest: +SKIP
>>> client = redis.Redis(port=proxy.port, socket_timeout=0.5)
>>> proxy.set_latency(0.05)       # every chunk, both directions, arrives 50 ms later
>>> proxy.blackhole()             # nothing passes any more; connections stay open
>>> proxy.hold_replies()          # requests still reach the server; its replies are held
>>> proxy.heal()                  # held traffic flows again (as TCP would after a partition)
>>> proxy.heal(reset=True)        # ... or every connection is closed instead
>>> proxy.stop()

The proxy runs an asyncio loop in a daemon thread of the process that starts it; the control
methods may be called from any thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Optional


class Proxy:
    """Forwards ``host:port`` (``port`` 0: any free one) to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.host = host
        self.port = port
        self.latency = 0.0
        self.connections = 0
        #: How many clients closed their connection (end of their stream).
        self.closed_by_clients = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._server: Optional[asyncio.base_events.Server] = None
        self._open: Optional[asyncio.Event] = None
        self._replies: Optional[asyncio.Event] = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Proxy:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="tcp-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def _serve(self, ready: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._open = asyncio.Event()
        self._open.set()
        self._replies = asyncio.Event()
        self._replies.set()
        self._server = loop.run_until_complete(asyncio.start_server(self._accept, self.host, self.port))
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            self._close_all()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.sleep(0)
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults --------------------------------------------------------------------------------
    def set_latency(self, seconds: float) -> None:
        """Delay every chunk by ``seconds`` (in both directions), keeping their order."""
        self.latency = seconds

    def blackhole(self) -> None:
        """Stop forwarding in both directions; traffic is held, connections stay open."""
        self._call(lambda: self._open.clear() if self._open else None)

    def hold_replies(self) -> None:
        """Keep forwarding requests to the server, but hold its replies (a reply in flight)."""
        self._call(lambda: self._replies.clear() if self._replies else None)

    def release_replies(self) -> None:
        """Forward the held replies, and every reply from now on."""
        self._call(lambda: self._replies.set() if self._replies else None)

    def heal(self, reset: bool = False) -> None:
        """Forward again; with ``reset`` close every connection (held traffic is dropped)."""
        if reset:
            self.reset()
        self._call(lambda: self._open.set() if self._open else None)

    def reset(self) -> None:
        """Close every proxied connection now (clients see a connection reset)."""
        self._call(self._close_all)

    def _call(self, fn: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        loop.call_soon_threadsafe(run)
        done.wait(5)

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    # -- forwarding ------------------------------------------------------------------------------
    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        self.connections += 1
        self._writers.update((client_writer, upstream_writer))
        for reader, writer, replies in ((client_reader, upstream_writer, False),
                                        (upstream_reader, client_writer, True)):
            queue: asyncio.Queue = asyncio.Queue()
            for coro in (self._receive(reader, queue, not replies), self._send(queue, writer, replies)):
                task = asyncio.ensure_future(coro)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _receive(self, reader: asyncio.StreamReader, queue: asyncio.Queue, from_client: bool = False) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    if from_client:
                        self.closed_by_clients += 1
                    break
                await queue.put((time.monotonic() + self.latency, data))
        except (OSError, asyncio.IncompleteReadError):
            pass
        await queue.put((0.0, b""))

    async def _send(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, replies: bool = False) -> None:
        assert self._open is not None and self._replies is not None
        try:
            while True:
                due, data = await queue.get()
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._open.wait()
                if replies:
                    await self._replies.wait()
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
