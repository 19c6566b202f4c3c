#!/usr/bin/python3
"""A Redis that misbehaves, on loopback TCP, for rule:shared-counts: it speaks RESP and answers PING, AUTH and
the EVAL of modelgated's script as Redis would (counts kept here, each marker applied once, admissions
within their caps), except where its scenario says otherwise.

  extra      on its first connection, the first answer is followed by one more ("+OK"), which no
             command asked for; later connections are answered right
  wrongtype  on its first connection, the first EVAL is answered "+OK" (a status, not the script's
             array); later connections are answered right
  trickle    every connection's answers go out one at a time, each 1.5 s after the one before
  right      every answer right (the control)

Usage: wrong-redis.py --scenario NAME --port-file FILE
Each connection and answer is a line on stdout ("connection N", "answer N"), flushed.
"""

import argparse
import os
import socketserver
import threading
import time

ARGS = None
LOCK = threading.Lock()
COUNTS = {}     # key: count
MARKERS = set()  # (markers key, marker)
N_CONNECTIONS = [0]


def say(line):
    with LOCK:
        print(line, flush=True)


def read_command(f):
    """one command, an array of bulk strings; None at the end of the connection"""
    line = f.readline()
    if not line:
        return None
    assert line.startswith(b"*"), line
    args = []
    for _ in range(int(line[1:])):
        n = int(f.readline()[1:])
        args.append(f.read(n + 2)[:-2].decode())
    return args


def answer(args):
    """what Redis would answer, as bytes"""
    name = args[0].upper()
    if name == "PING":
        return b"+PONG\r\n"
    if name == "AUTH":
        return b"+OK\r\n"
    if name == "EVAL":
        # KEYS: requests, tokens, markers; ARGV: marker, requests, tokens, cap, tokens cap, expiry, admission
        keys, argv = args[3:6], args[6:]
        with LOCK:
            r, t = COUNTS.get(keys[0], 0), COUNTS.get(keys[1], 0)
            if (keys[2], argv[0]) in MARKERS:
                return b"*3\r\n:2\r\n:%d\r\n:%d\r\n" % (r, t)
            if argv[6] == "1" and (r + int(argv[1]) > float(argv[3]) or t >= float(argv[4])):
                return b"*3\r\n:0\r\n:%d\r\n:%d\r\n" % (r, t)
            r += int(argv[1])
            t += int(argv[2])
            COUNTS[keys[0]], COUNTS[keys[1]] = r, t
            MARKERS.add((keys[2], argv[0]))
            return b"*3\r\n:1\r\n:%d\r\n:%d\r\n" % (r, t)
    return b"-ERR unknown command '%s'\r\n" % name.encode()


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        with LOCK:
            N_CONNECTIONS[0] += 1
            n = N_CONNECTIONS[0]
        say("connection %d" % n)
        first = n == 1
        answered = 0
        last = time.monotonic()
        while True:
            try:
                args = read_command(self.rfile)
            except (OSError, ValueError):
                return
            if args is None:
                return
            reply = answer(args)
            if ARGS.scenario == "wrongtype" and first and args[0].upper() == "EVAL" and answered == 0:
                reply = b"+OK\r\n"
            if ARGS.scenario == "trickle":
                # one answer every 1.5 s: the commands sent meanwhile wait in the socket
                time.sleep(max(0.0, last + 1.5 - time.monotonic()))
            try:
                self.wfile.write(reply)
                if ARGS.scenario == "extra" and first and answered == 0:
                    self.wfile.write(b"+OK\r\n")
                self.wfile.flush()
            except OSError:
                return
            answered += 1
            last = time.monotonic()
            say("answer %d" % n)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", required=True, choices=["extra", "wrongtype", "trickle", "right"])
    p.add_argument("--port-file", required=True)
    ARGS = p.parse_args()
    server = Server(("127.0.0.1", 0), Handler)
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(ARGS.port_file + ".tmp", ARGS.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
