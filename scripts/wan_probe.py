#!/usr/bin/env python3
"""Measures a link set up by scripts/wan.sh: TCP round-trip time and throughput (stdlib only).

  wan_probe.py serve HOST PORT [--connections 2]     # in one namespace: answers a ping-pong
                                                     # connection and a bulk one, then exits
  wan_probe.py measure HOST PORT --rtt-ms MS --rate-bps BPS [--seconds S] [--judge-rate 0|1]
                     [--rtt-only] [--label NAME]     # in another: one line each, exit 1 if off

RTT: the median of 20 round trips of a 64-byte message on one TCP_NODELAY connection (after 3
warm-up trips), judged within 20% + 2 ms of the configured RTT. Throughput: the sender writes for
S seconds; the receiver counts bytes and reports the rate over the second half of that time, so
that TCP's ramp-up (several RTTs at 100 ms) does not count; judged at >= 50% of the configured
rate (netem's and tbf's rates are approximate, and TCP over a long fat link does not fill it
exactly).
"""
import argparse
import socket
import statistics
import struct
import sys
import time

MESSAGE = 64
PINGS = 20
WARMUP_PINGS = 3
CHUNK = 1 << 20


def recv_exact(sock, size):
    data = bytearray()
    while len(data) < size:
        part = sock.recv(size - len(data))
        if not part:
            raise ConnectionError("peer closed the connection")
        data += part
    return bytes(data)


def serve(host, port, connections):
    listener = socket.create_server((host, port))
    for _ in range(connections):
        conn, _ = listener.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            kind = recv_exact(conn, 1)
            if kind == b"p":  # ping-pong: echo fixed-size messages until the peer closes
                while True:
                    try:
                        conn.sendall(recv_exact(conn, MESSAGE))
                    except ConnectionError:
                        break
            else:  # bulk: count bytes by arrival time, reply with the second half's rate
                recv_exact(conn, 8)  # the sender's duration: it decides when to stop
                marks = []  # (time, total bytes so far)
                total = 0
                while True:
                    part = conn.recv(CHUNK)
                    if not part:
                        break
                    total += len(part)
                    marks.append((time.monotonic(), total))
                start, end = marks[0][0], marks[-1][0]
                middle = start + (end - start) / 2
                first = next(m for m in marks if m[0] >= middle)
                rate = (total - first[1]) * 8 / max(end - first[0], 1e-9)
                # The sender has shut down its side; reply on the still-open reverse direction.
                conn.sendall(struct.pack("!dQ", rate, total))


def connect(host, port):
    deadline = time.monotonic() + 10
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:  # the server may not be listening yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def measure_rtt_ms(host, port):
    with connect(host, port) as sock:
        sock.sendall(b"p")
        message = b"x" * MESSAGE
        samples = []
        for i in range(WARMUP_PINGS + PINGS):
            start = time.perf_counter()
            sock.sendall(message)
            recv_exact(sock, MESSAGE)
            if i >= WARMUP_PINGS:
                samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def measure_rate_bps(host, port, seconds):
    with connect(host, port) as sock:
        sock.sendall(b"b" + struct.pack("!d", seconds))
        block = b"\0" * CHUNK
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sock.sendall(block)
        sock.shutdown(socket.SHUT_WR)
        rate, _ = struct.unpack("!dQ", recv_exact(sock, 16))
    return rate


def human_rate(bps):
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    serve_parser = sub.add_parser("serve")
    measure_parser = sub.add_parser("measure")
    for p in (serve_parser, measure_parser):
        p.add_argument("host")
        p.add_argument("port", type=int)
    serve_parser.add_argument("--connections", type=int, default=2)
    measure_parser.add_argument("--rtt-only", action="store_true")
    measure_parser.add_argument("--label", default="")
    measure_parser.add_argument("--rtt-ms", type=float, required=True)
    measure_parser.add_argument("--rate-bps", type=float, required=True)
    measure_parser.add_argument("--seconds", type=float, default=3.0)
    measure_parser.add_argument("--judge-rate", type=int, default=1)
    args = parser.parse_args()
    if args.mode == "serve":
        serve(args.host, args.port, args.connections)
        return 0

    label = f"{args.label} " if args.label else ""
    rtt = measure_rtt_ms(args.host, args.port)
    rtt_ok = abs(rtt - args.rtt_ms) <= 0.2 * args.rtt_ms + 2
    print(f"{label}rtt        {rtt:8.2f} ms      configured {args.rtt_ms:g} ms"
          f"      {'ok' if rtt_ok else 'FAIL (allowed: within 20% + 2 ms)'}", flush=True)
    if args.rtt_only:
        return 0 if rtt_ok else 1
    rate = measure_rate_bps(args.host, args.port, args.seconds)
    rate_ok = rate >= 0.5 * args.rate_bps or not args.judge_rate
    verdict = "ok" if rate >= 0.5 * args.rate_bps else "FAIL (allowed: at least 50%)"
    if not args.judge_rate:
        verdict = "not judged (loss > 0)"
    print(f"{label}throughput {human_rate(rate):>14}  configured {human_rate(args.rate_bps)}"
          f"  {rate / args.rate_bps:.0%}  {verdict}")
    return 0 if rtt_ok and rate_ok else 1


if __name__ == "__main__":
    sys.exit(main())
