#!/usr/bin/env python3
"""A delay line for scripts/wan.sh on kernels without tc netem (stdlib only).

  wan_delay.py --queue Q --delay-ms D [--jitter-ms J] [--loss PCT] [--ready-file PATH]

Holds every packet that an iptables NFQUEUE rule sends to queue Q (in the network namespace it
runs in) for D ms (plus normal jitter of J ms, never below 0), then lets it go on; drops PCT% of
them. It speaks nfnetlink_queue directly: a NETLINK_NETFILTER socket bound to the queue in
metadata-only mode (packets stay in the kernel, only their ids come here) with GSO packets kept
whole, so a 64 KiB TCP burst costs one message and one verdict. Without jitter packets leave in
arrival order and one batch verdict releases every packet that is due. Writes PATH once bound,
then runs until killed.
"""
import argparse
import collections
import heapq
import os
import random
import select
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 1, 2, 3
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_GSO = 4
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
QUEUE_MAXLEN = 1 << 16  # packets held at once: 50 ms at 1 Gbit/s is ~4,200 full-size ones


def attribute(kind, payload):
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


class Queue:
    def __init__(self, number):
        self.number = number
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        try:  # root may exceed rmem_max; a full socket buffer would drop packet notices
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self.sock.bind((0, 0))
        self.seq = 0

    def send(self, message_type, attributes, ack=False):
        self.seq += 1
        body = struct.pack("!BBH", socket.AF_UNSPEC, 0, self.number) + b"".join(attributes)
        flags = NLM_F_REQUEST | (NLM_F_ACK if ack else 0)
        header = struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | message_type,
                             flags, self.seq, 0)
        self.sock.send(header + body)
        if ack:
            reply = self.sock.recv(65536)
            _, kind = struct.unpack_from("=IH", reply)
            error = struct.unpack_from("=i", reply, 16)[0] if kind == NLMSG_ERROR else 0
            if error:
                raise OSError(-error, f"nfnetlink_queue config: {os.strerror(-error)}")

    def bind(self):
        self.send(NFQNL_MSG_CONFIG, [attribute(NFQA_CFG_CMD,
                                               struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0))], ack=True)
        self.send(NFQNL_MSG_CONFIG, [
            attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)),
            attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)),
            attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO)),
            attribute(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO)),
        ], ack=True)

    def verdict(self, packet_id, verdict, batch=False):
        message = NFQNL_MSG_VERDICT_BATCH if batch else NFQNL_MSG_VERDICT
        self.send(message, [attribute(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id))])

    def packet_ids(self):
        """The ids of the packets in one read of the socket."""
        data = self.sock.recv(1 << 20)
        ids = []
        offset = 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if length < 16:
                break
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                at = offset + 20  # nlmsghdr (16) + nfgenmsg (4)
                while at + 4 <= offset + length:
                    size, attr = struct.unpack_from("=HH", data, at)
                    if size < 4:
                        break
                    if attr & 0x7FFF == NFQA_PACKET_HDR:
                        ids.append(struct.unpack_from("!I", data, at + 4)[0])
                        break
                    at += (size + 3) & ~3
            offset += (length + 3) & ~3
        return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0, help="percent of packets dropped")
    parser.add_argument("--ready-file")
    args = parser.parse_args()
    queue = Queue(args.queue)
    queue.bind()
    if args.ready_file:
        with open(args.ready_file, "w") as ready:
            ready.write(f"{os.getpid()}\n")
    delay = args.delay_ms / 1e3
    jitter = args.jitter_ms / 1e3
    loss = args.loss / 100
    fifo = collections.deque()  # (due time, id) in arrival order: constant delay
    heap = []  # (due time, id): with jitter, packets may overtake each other
    while True:
        pending = heap if jitter else fifo
        timeout = max(0.0, pending[0][0] - time.monotonic()) if pending else None
        readable, _, _ = select.select([queue.sock], [], [], timeout)
        now = time.monotonic()
        if readable:
            for packet_id in queue.packet_ids():
                if loss and random.random() < loss:
                    queue.verdict(packet_id, NF_DROP)
                elif jitter:
                    heapq.heappush(heap, (now + max(0.0, random.gauss(delay, jitter)), packet_id))
                else:
                    fifo.append((now + delay, packet_id))
        if jitter:
            while heap and heap[0][0] <= now:
                queue.verdict(heapq.heappop(heap)[1], NF_ACCEPT)
        else:
            last = None
            while fifo and fifo[0][0] <= now:
                last = fifo.popleft()[1]
            # Every id up to the last due one: ids grow with arrival, and dropped ones are gone.
            if last is not None:
                queue.verdict(last, NF_ACCEPT, batch=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
