"""Where the HarnessPod's proxy listens: on the kubernetes backend the first free port of
``sandbox.kubernetes.proxy_ports`` (the only ports the run's NetworkPolicy opens to sandbox
pods), several HarnessPods of one pod side by side, a clear error naming the field when the
range is full; elsewhere any free port. And the socket keeps TCP_NODELAY on what it accepts."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import Iterator

import pytest

from actors.harness_pod import HarnessPod
from actors.listen import NoFreePort, listen_tcp
from forge.config import KubernetesConfig, SandboxConfig
from forge.config.sandbox import PROXY_PORTS

HOST = "127.0.0.1"


@contextlib.contextmanager
def free_range(n: int) -> Iterator[tuple[int, int]]:
    """``n`` consecutive ports free on loopback now (high, outside the default range)."""
    for _ in range(200):
        first = random.randrange(22000, 32000 - n)
        socks: list[socket.socket] = []
        try:
            for port in range(first, first + n):
                s = socket.socket()
                socks.append(s)
                s.bind((HOST, port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        yield first, first + n - 1
        return
    raise RuntimeError("no free port range found")


def kube_pod(ports: tuple[int, int], pod_id: str = "hp") -> HarnessPod:
    sandbox = {"backend": "kubernetes", "kubernetes": {"proxy_ports": list(ports)}}
    return HarnessPod(None, pod_id=pod_id, sandbox=sandbox)


def test_the_default_range_is_set_and_named_by_the_kubernetes_config() -> None:
    assert KubernetesConfig().proxy_ports == PROXY_PORTS
    lo, hi = PROXY_PORTS
    assert 8 <= hi - lo + 1 <= 256  # a HarnessPod per port, 8 per KubeRay cpu pod: a small range
    assert SandboxConfig(backend="kubernetes").kubernetes.proxy_ports == PROXY_PORTS
    assert HarnessPod(None, sandbox={"backend": "kubernetes"}).proxy_ports() == PROXY_PORTS
    assert HarnessPod(None).proxy_ports() == (0, 0)  # local: any free port
    assert HarnessPod(None, sandbox={"backend": "docker"}).proxy_ports() == (0, 0)


def test_listen_takes_the_first_free_port_and_names_the_field_when_full() -> None:
    with free_range(3) as (lo, hi):
        held = listen_tcp(HOST, (lo, lo))
        a = listen_tcp(HOST, (lo, hi))
        b = listen_tcp(HOST, (lo, hi))
        try:
            assert [s.getsockname()[1] for s in (held, a, b)] == [lo, lo + 1, lo + 2]
            with pytest.raises(NoFreePort, match=rf"my\.field \[{lo}, {hi}\]"):
                listen_tcp(HOST, (lo, hi), "my.field")
            a.close()  # a port given back is taken again
            again = listen_tcp(HOST, (lo, hi))
            assert again.getsockname()[1] == lo + 1
            again.close()
        finally:
            for s in (held, a, b):
                s.close()
    any_port = listen_tcp(HOST, (0, 0))
    assert any_port.getsockname()[1] > 0
    any_port.close()


def test_accepted_connections_keep_tcp_nodelay() -> None:
    async def main() -> int:
        sock = listen_tcp(HOST, (0, 0))
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=sock)
        _, w = await asyncio.open_connection(HOST, sock.getsockname()[1])
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            w.close()
            server.close()

    assert asyncio.run(main()) != 0


def test_kubernetes_harness_pods_listen_inside_the_range_side_by_side() -> None:
    async def main(ports: tuple[int, int]) -> list[int]:
        pods = [kube_pod(ports, f"hp-{i}") for i in range(3)]
        try:
            for pod in pods:
                await pod.start()
            got = [p for pod in pods for p in (pod.port or 0, pod.egress_port or 0)]
            with pytest.raises(NoFreePort, match=r"sandbox\.kubernetes\.proxy_ports"):
                await kube_pod(ports, "one-too-many").start()
            assert pods[0].egress_address() == f"{pods[0].host}:{pods[0].egress_port}"
            async with asyncio.timeout(10):  # the proxy answers there
                r, w = await asyncio.open_connection(HOST, got[0])
                w.write(b"GET /nope HTTP/1.0\r\n\r\n")
                status = await r.readline()
                w.close()
            assert status.startswith(b"HTTP/1.1 404"), status
            return got
        finally:
            for pod in pods:
                await pod.stop()

    with free_range(6) as (lo, hi):  # each pod: its model proxy's port, then its egress's
        ports = asyncio.run(main((lo, hi)))
    assert ports == list(range(lo, lo + 6))


def test_local_harness_pod_takes_any_free_port_and_an_explicit_one() -> None:
    async def main(explicit: int) -> tuple[int, int]:
        pod, fixed = HarnessPod(None), kube_pod((explicit, explicit + 1))
        await pod.start()
        await fixed.start(explicit)
        try:
            return pod.port or 0, fixed.port or 0
        finally:
            await pod.stop()
            await fixed.stop()

    with free_range(2) as (port, _):  # the egress proxy takes the other port of the range
        got, fixed = asyncio.run(main(port))
    assert got > 0 and fixed == port
