#!/usr/bin/env python3
"""A kazoo lock holder driven line by line on stdin, for zookeeper_modes_test's interop cases.

usage: zookeeper_kazoo_peer.py HOSTS PATH KIND    (KIND: write | read)

KIND `write` is kazoo's WriteLock, `read` its ReadLock, each told dlock's node shapes with
`extra_lock_patterns` (the configuration docs/backends/zookeeper.md gives): a writer counts dlock's
exclusive (`-lock-`, or `-__WRIT__` with `curator_recipe: read_write_lock`) and shared (`-__READ__`)
nodes as contenders, a reader dlock's exclusive ones.
Commands: `try` (non-blocking acquire: prints `held` or `busy`), `wait SECONDS` (blocking acquire:
`held` or `timeout`), `release` (`released`), `quit`. Prints `ready` once connected.
"""
import sys

from kazoo.client import KazooClient


def main():
    hosts, path, kind = sys.argv[1:4]
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    if kind == "write":
        lock = zk.WriteLock(path, extra_lock_patterns=["-lock-", "-__WRIT__", "-__READ__"])
    else:
        lock = zk.ReadLock(path, extra_lock_patterns=["-lock-", "-__WRIT__"])
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "try":
            print("held" if lock.acquire(blocking=False) else "busy", flush=True)
        elif words[0] == "wait":
            print("held" if lock.acquire(blocking=True, timeout=float(words[1])) else "timeout", flush=True)
        elif words[0] == "release":
            lock.release()
            print("released", flush=True)
        elif words[0] == "quit":
            break
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()
