#!/usr/bin/env python3
"""python-etcd3's Lock on the same etcd member dlock is measured on.

usage: etcd_python_etcd3.py HOST PORT CYCLES HANDOFFS
Prints one JSON object (peer_harness.py): S1 acquire+release latencies ("s1_us") and S4 handoff
latencies ("handoff_us"), in microseconds. A part that fails is reported with its error
("s1_error", "handoff_error") instead of its samples: a failing peer is reported, never dropped.
Lock(ttl=30) is python-etcd3's default use; acquire(timeout=0) tries once."""
import sys
import etcd3

from peer_harness import emit, ping_pong, s1

host, port, cycles, handoffs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def uncontended():
    lock = etcd3.client(host=host, port=port).lock("peer-etcd3-s1", ttl=30)
    return s1(lambda: lock.acquire(timeout=0), lock.release, cycles, min(200, cycles))


def handoff():
    # Two clients (two threads); the waiter gets 3 ms to queue.
    locks = [etcd3.client(host=host, port=port).lock("peer-etcd3-s4", ttl=30) for _ in range(2)]
    return ping_pong([lambda l=l: l.acquire(timeout=30) for l in locks], [l.release for l in locks], handoffs,
                     0.003, "acquire timed out after 30 s", join_timeout_s=60)


emit((("s1", uncontended), ("handoff", handoff if handoffs > 0 else list)))
