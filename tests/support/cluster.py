"""Local scale-out deployments for the tests: a Redis Cluster and a Sentinel-managed primary.

Everything runs as private redis-server processes on loopback ports, in temporary directories,
started and stopped by the fixtures of the test modules that use them:

* :class:`LocalCluster` — 3 primaries + 3 replicas (``--cluster-enabled yes``), joined with
  ``redis-cli --cluster create ... --cluster-replicas 1``.
* :class:`LocalSentinel` — a primary, a replica and 3 sentinels (``redis-server sentinel.conf
  --sentinel``) with short failure detection, so a failover test stays bounded.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from typing import Any, Optional

import redis

from django_redis_coord.testing.server import RedisServer, find_redis_cli

#: Redis 6.2 puts the cluster bus on port + 10000, so cluster ports stay below 55536.
PORT_RANGE = (20000, 30000)


def _port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def cluster_ports(count: int, taken: Optional[set[int]] = None) -> list[int]:
    """``count`` ports whose cluster bus ports (port + 10000) are free too."""
    taken = set() if taken is None else taken
    ports: list[int] = []
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    while len(ports) < count:
        port = rng.randrange(*PORT_RANGE)
        if port in taken or port in ports or port + 10000 in taken:
            continue
        if _port_is_free(port) and _port_is_free(port + 10000):
            ports.append(port)
    return ports


def wait_until(predicate: Any, timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; raise AssertionError after ``timeout``."""
    stop_at = time.monotonic() + timeout
    last_error: Optional[BaseException] = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # not ready yet
            last_error = exc
        if time.monotonic() > stop_at:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error!r})")
        time.sleep(interval)


class LocalCluster:
    """A Redis Cluster of ``primaries`` primaries with one replica each, on loopback."""

    def __init__(self, primaries: int = 3, replicas_per_primary: int = 1, node_timeout_ms: int = 2000) -> None:
        self.primaries = primaries
        self.replicas_per_primary = replicas_per_primary
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []

    def start(self, timeout: float = 30.0) -> LocalCluster:
        count = self.primaries * (1 + self.replicas_per_primary)
        try:
            while len(self.nodes) < count:
                self.nodes.append(self._start_node())
            cli = find_redis_cli()
            if cli is None:
                raise RuntimeError("redis-cli is needed to create a local cluster")
            result = subprocess.run(
                [
                    cli, "--cluster", "create",
                    *[f"{node.host}:{node.port}" for node in self.nodes],
                    "--cluster-replicas", str(self.replicas_per_primary),
                    "--cluster-yes",
                ],
                capture_output=True, text=True, timeout=timeout,
            )
            if result.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {result.stdout}\n{result.stderr}")
            wait_until(self._ready, timeout, what="cluster_state:ok on every node")
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, attempts: int = 5) -> RedisServer:
        """One cluster-enabled node; another port when the chosen one was taken meanwhile."""
        taken = {node.port for node in self.nodes}
        for attempt in range(attempts):
            (port,) = cluster_ports(1, taken)
            node = RedisServer(
                port,
                args=[
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-require-full-coverage", "yes",
                ],
            )
            try:
                return node.start()
            except RuntimeError:
                node.cleanup()
                taken.add(port)
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def _ready(self) -> bool:
        for node in self.nodes:
            client = node.client(socket_timeout=1)
            try:
                if client.cluster("info").get("cluster_state") != "ok":
                    return False
                roles = client.cluster("nodes")
                if len(roles) != len(self.nodes):
                    return False
                # Every node must know every slot range's replicas (clients read this map).
                for entry in client.execute_command("CLUSTER SLOTS"):
                    if len(entry) < 3 + self.replicas_per_primary:
                        return False
            finally:
                client.close()
        # Replicas must have finished their initial sync before tests write and WAIT.
        for node in self.nodes:
            client = node.client(socket_timeout=1)
            try:
                info = client.info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
            finally:
                client.close()
        return True

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()
        self.nodes = []

    # -- topology ---------------------------------------------------------------------------
    def role_of(self, node: RedisServer) -> str:
        client = node.client(socket_timeout=1)
        try:
            return client.info("replication")["role"]
        finally:
            client.close()

    def primary_nodes(self) -> list[RedisServer]:
        return [node for node in self.nodes if self.role_of(node) == "master"]

    def replica_nodes(self) -> list[RedisServer]:
        return [node for node in self.nodes if self.role_of(node) == "slave"]

    # -- clients -----------------------------------------------------------------------------
    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(node.host, node.port) for node in self.nodes]

    def client(self, **kwargs: Any) -> Any:
        from redis.cluster import ClusterNode, RedisCluster

        nodes = [ClusterNode(host, port) for host, port in self.startup_nodes]
        return RedisCluster(startup_nodes=nodes, **kwargs)

    def async_client(self, **kwargs: Any) -> Any:
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        nodes = [ClusterNode(host, port) for host, port in self.startup_nodes]
        return RedisCluster(startup_nodes=nodes, **kwargs)

    def flushall(self) -> None:
        for node in self.primary_nodes():
            client = node.client(socket_timeout=2)
            try:
                client.flushall()
            finally:
                client.close()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SentinelProcess(RedisServer):
    """``redis-server sentinel.conf --sentinel`` with a config file written to its own directory."""

    def __init__(self, service: str, primary: RedisServer, quorum: int, down_after_ms: int,
                 failover_timeout_ms: int) -> None:
        super().__init__()
        self.config_path = os.path.join(self.workdir, "sentinel.conf")
        with open(self.config_path, "w", encoding="utf-8") as fh:
            fh.write(
                f"port {self.port}\n"
                f"bind {self.host}\n"
                "protected-mode no\n"
                f"dir {self.workdir}\n"
                f"sentinel monitor {service} {primary.host} {primary.port} {quorum}\n"
                f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
                f"sentinel failover-timeout {service} {failover_timeout_ms}\n"
                f"sentinel parallel-syncs {service} 1\n"
            )

    def command_line(self) -> list[str]:
        return [self.binary, self.config_path, "--sentinel"]


class LocalSentinel:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels monitoring them as ``service``."""

    def __init__(self, service: str = "coord", replicas: int = 1, sentinels: int = 3,
                 down_after_ms: int = 400, failover_timeout_ms: int = 2000) -> None:
        self.service = service
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.primary: Optional[RedisServer] = None
        self.replicas: list[RedisServer] = []
        self.sentinels: list[SentinelProcess] = []

    def start(self, timeout: float = 20.0) -> LocalSentinel:
        try:
            # A replica announces itself with ``replica-announce-ip`` so sentinels see loopback.
            self.primary = RedisServer(args=["--replica-announce-ip", "127.0.0.1"]).start()
            for _ in range(self.replica_count):
                replica = RedisServer(
                    args=["--replicaof", self.primary.host, str(self.primary.port),
                          "--replica-announce-ip", "127.0.0.1"]
                )
                self.replicas.append(replica.start())
            quorum = self.sentinel_count // 2 + 1
            for _ in range(self.sentinel_count):
                sentinel = SentinelProcess(
                    self.service, self.primary, quorum, self.down_after_ms, self.failover_timeout_ms
                )
                self.sentinels.append(sentinel.start())
            wait_until(self._ready, timeout, what="replicas in sync and sentinels aware of each other")
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        for replica in self.replicas:
            client = replica.client(socket_timeout=1)
            try:
                if client.info("replication").get("master_link_status") != "up":
                    return False
            finally:
                client.close()
        for sentinel in self.sentinels:
            client = sentinel.client(socket_timeout=1)
            try:
                state = client.sentinel_master(self.service)
                if int(state.get("num-other-sentinels", 0)) < self.sentinel_count - 1:
                    return False
                if int(state.get("num-slaves", 0)) < self.replica_count:
                    return False
            finally:
                client.close()
        return True

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(sentinel.host, sentinel.port) for sentinel in self.sentinels]

    def sentinel(self, **connection_kwargs: Any) -> Any:
        from redis.sentinel import Sentinel

        return Sentinel(self.sentinel_addresses, socket_timeout=1.0, **connection_kwargs)

    def async_sentinel(self, **connection_kwargs: Any) -> Any:
        from redis.asyncio.sentinel import Sentinel

        return Sentinel(self.sentinel_addresses, socket_timeout=1.0, **connection_kwargs)

    def current_primary_port(self) -> int:
        client = self.sentinels[0].client(socket_timeout=1)
        try:
            host, port = client.sentinel_get_master_addr_by_name(self.service)
        finally:
            client.close()
        return int(port)

    def server_on(self, port: int) -> RedisServer:
        for server in [self.primary, *self.replicas]:
            if server is not None and server.port == port:
                return server
        raise LookupError(port)

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.cleanup()
        for server in [*self.replicas, self.primary]:
            if server is not None:
                server.cleanup()
        self.sentinels = []
        self.replicas = []
        self.primary = None

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def plain_client(server: RedisServer, **kwargs: Any) -> redis.Redis:
    """A client of one server with small timeouts, for checks made by the tests themselves."""
    kwargs.setdefault("socket_timeout", 2)
    return server.client(**kwargs)


__all__ = ["LocalCluster", "LocalSentinel", "SentinelProcess", "cluster_ports", "plain_client", "wait_until"]

if __name__ == "__main__":  # a manual smoke run: python -m tests.support.cluster
    started = time.monotonic()
    with LocalCluster() as cluster:
        print("cluster up in", round(time.monotonic() - started, 2), "s:", cluster.startup_nodes)
    started = time.monotonic()
    with LocalSentinel() as sentinel:
        print("sentinel up in", round(time.monotonic() - started, 2), "s:", sentinel.sentinel_addresses)
