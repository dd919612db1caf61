"""The event API server under hostile clients: health-check round trips while 1,000
half-sent requests are open, against the same server idle (measured in the same run);
the server's threads; its memory after four requests that announce and stream 60 MiB.

The server (``control.events.EventServer`` with its default limits, in front of a
handler that accepts everything) runs in a child process, so the client's sockets,
threads and buffers do not count in its figures."""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import emit, stop_child
from control.cli import OneLineErrors

HALF_SENT = (
    b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{"
)
BIG_BODY_BYTES = 60 * 1024 * 1024


def serve() -> None:
    """Child process: serve until standard input closes."""
    from control.events import EventHandler, EventServer, ServerLimits

    class Accept(EventHandler):
        def __init__(self) -> None:
            self.count = 0

        def handle_event(self, raw: Any) -> dict[str, Any]:
            self.count += 1
            return {"count": self.count}

        def status(self) -> dict[str, Any]:
            return {"count": self.count}

    # Half-sent requests stay open for the whole measurement (the default is 10 s).
    server = EventServer(
        Accept(), tcp_addr="127.0.0.1:0", limits=ServerLimits(request_timeout_s=120.0)
    )
    server.start()
    print(server.url, flush=True)
    sys.stdin.read()
    server.stop()


def _proc(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _round_trips(host: str, port: int, count: int) -> list[float]:
    connection = http.client.HTTPConnection(host, port, timeout=30)
    samples = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            connection.request("GET", "/v1/health")
            response = connection.getresponse()
            response.read()
            samples.append(time.perf_counter() - started)
            assert response.status == 200
    finally:
        connection.close()
    return samples


def _summary_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 3),
        "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))] * 1e3, 3),
        "max_ms": round(ordered[-1] * 1e3, 3),
    }


def _stream_big_body(host: str, port: int) -> tuple[int, int]:
    """Announce and try to send 60 MiB; returns (status, bytes the server let through)."""
    sock = socket.create_connection((host, port), timeout=30)
    sent = 0
    chunk = b" " * 65536
    try:
        sock.sendall(
            b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % BIG_BODY_BYTES
        )
        sock.settimeout(5)
        try:
            while sent < BIG_BODY_BYTES:
                sent += sock.send(chunk)
        except OSError:
            pass  # the server stopped reading: what it should do
        sock.settimeout(30)
        reply = b""
        try:
            while b"\r\n" not in reply:
                data = sock.recv(4096)
                if not data:
                    break
                reply += data
        except OSError:
            pass
        status = int(reply.split()[1]) if reply.startswith(b"HTTP/1.1 ") else 0
    finally:
        sock.close()
    return status, sent


def main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    half_open, requests, repeats = (200, 100, 1) if args.quick else (1000, 300, 3)
    from control.events import raise_open_files_limit

    raise_open_files_limit(half_open + 200)
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_events_api", "--serve"],
        cwd=Path(__file__).resolve().parents[1],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        host, _, port_text = child.stdout.readline().strip().rpartition(":")
        port = int(port_text)
        idle: list[float] = []
        loaded: list[float] = []
        threads_idle = threads_loaded = 0
        evicted = 0
        for _ in range(repeats):
            idle += _round_trips(host, port, requests)
            threads_idle = _proc(child.pid, "Threads")
            sockets = []
            for _ in range(half_open):
                sock = socket.create_connection((host, port), timeout=30)
                sock.sendall(HALF_SENT)
                sockets.append(sock)
            loaded += _round_trips(host, port, requests)
            threads_loaded = _proc(child.pid, "Threads")
            for sock in sockets:
                sock.setblocking(False)
                try:
                    evicted += sock.recv(1) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    evicted += 1
                sock.close()
        rss_before_kib = _proc(child.pid, "VmRSS")
        big = [_stream_big_body(host, port) for _ in range(4)]
        time.sleep(1.0)
        rss_after_kib = _proc(child.pid, "VmRSS")
        idle_ms, loaded_ms = _summary_ms(idle), _summary_ms(loaded)
        emit(
            {
                "half_open_connections": half_open,
                "health_requests_per_phase": requests * repeats,
                "health_idle": idle_ms,
                "health_with_half_open": loaded_ms,
                "p50_ratio_loaded_vs_idle": round(loaded_ms["p50_ms"] / idle_ms["p50_ms"], 2),
                "server_threads_idle": threads_idle,
                "server_threads_with_half_open": threads_loaded,
                "half_open_closed_by_server": evicted,
                "big_body_statuses": [status for status, _ in big],
                "big_body_bytes_sent_max": max(sent for _, sent in big),
                "server_rss_growth_mib_after_4x60mib": round(
                    (rss_after_kib - rss_before_kib) / 1024, 1
                ),
                "server_rss_mib": round(rss_after_kib / 1024, 1),
            }
        )
    finally:
        stop_child(child, 20)


if __name__ == "__main__":
    main()
