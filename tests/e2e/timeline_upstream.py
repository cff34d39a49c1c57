#!/usr/bin/python3
"""An upstream that records a timeline of everything in flight at it, for the fault run
(test_fault_run.py). Standard library only; one asyncio loop, so the order of the
recorded times is the order in which the upstream saw things happen.

    timeline_upstream.py --port PORT [--host 127.0.0.1]     (PORT 0 = pick one)

The port it listens on is printed as the first line on stdout. Times are
time.monotonic() (CLOCK_MONOTONIC, the same clock in every process of the machine), so
the test can set them beside the times it injected its faults at.

Each request and tunnel is one event: {"kind": "http"|"ws", "via": X-Probe-Via, "user":
X-Tier-User, "path", "t0", "t1"}. t0 is its arrival (HTTP: the head read; WebSocket: just
before the 101 is written, the handshake accepted), t1 its end, null while in flight.
An end is recorded before the upstream lets go of it (before the answer's bytes are
written, before its close frame is sent), so a proxy that gives the slot back when it sees
the end gives it back after t1: whatever the slot admits next arrives after t1. An end the
proxy causes (it closes the connection early) is recorded when the upstream sees it.

  GET /hold/<ms>      held ms milliseconds (or until the proxy closes), then 200 JSON
  WS  /ws/<ms>        101, held ms milliseconds (or until a frame or EOF from the
                      client side), then a close frame 1000 "done"; waits up to 5 s for
                      the client's close frame, then closes the connection
  GET /__timeline     JSON {"now": monotonic now, "events": [...]}
  anything else       404
"""
import argparse
import asyncio
import base64
import hashlib
import json
import socket
import struct
import sys
import time

from ws_upstream import GUID, hget, http_answer, read_head   # the same as the fleet tests' upstream

EVENTS = []


def now():
    return time.monotonic()


def new_event(kind, headers, path):
    ev = {"kind": kind, "via": hget(headers, "x-probe-via") or "-",
          "user": hget(headers, "x-tier-user") or "-", "path": path, "t0": now(), "t1": None}
    EVENTS.append(ev)
    return ev


def frame(opcode, payload):
    return struct.pack("!BB", 0x80 | opcode, len(payload)) + payload


async def read_frame(reader):
    """(opcode, payload) of the next frame from the client side, None at EOF."""
    try:
        h = await reader.readexactly(2)
        n = h[1] & 0x7F
        if n == 126:
            n = struct.unpack("!H", await reader.readexactly(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", await reader.readexactly(8))[0]
        mask = await reader.readexactly(4) if h[1] & 0x80 else None
        data = await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    if mask:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return h[0] & 0x0F, data


async def held(reader, seconds):
    """Waits seconds, or less when the other side sends anything or closes; True when the
    whole time passed."""
    try:
        await asyncio.wait_for(reader.read(1), seconds)
    except asyncio.TimeoutError:
        return True
    except ConnectionError:
        pass
    return False


def ms_of(path):
    try:
        return max(0, int(path.rsplit("/", 1)[1])) / 1000.0
    except ValueError:
        return 0.0


async def http_hold(reader, writer, headers, path):
    ev = new_event("http", headers, path)
    whole = False
    try:
        whole = await held(reader, ms_of(path))
    finally:
        ev["t1"] = now()
    if whole:
        writer.write(http_answer(200, json.dumps({"path": path}).encode()))
        await writer.drain()
    return whole


async def websocket(reader, writer, headers, path):
    key = hget(headers, "sec-websocket-key") or ""
    accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
    ev = new_event("ws", headers, path)
    try:
        writer.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % accept).encode())
        await writer.drain()
        whole = await held(reader, ms_of(path))
    except ConnectionError:
        whole = False
    finally:
        ev["t1"] = now()
    if not whole:
        return
    writer.write(frame(0x8, struct.pack("!H", 1000) + b"done"))
    await writer.drain()
    try:
        while True:
            f = await asyncio.wait_for(read_frame(reader), 5)
            if f is None or f[0] == 0x8:
                break
    except asyncio.TimeoutError:
        pass


async def handle(reader, writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            req = await read_head(reader)
            if req is None:
                return
            method, target, headers = req
            path = target.split("?", 1)[0]
            if "websocket" in (hget(headers, "upgrade") or "").lower():
                await websocket(reader, writer, headers, path)
                return
            n = int(hget(headers, "content-length") or "0")
            if n:
                await reader.readexactly(n)
            if path.startswith("/hold/"):
                if not await http_hold(reader, writer, headers, path):
                    return
            elif path == "/__timeline":
                body = json.dumps({"now": now(), "events": EVENTS}).encode()
                writer.write(http_answer(200, body))
            else:
                writer.write(http_answer(404, b'{"error":"no such path"}'))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main_async(host, port):
    server = await asyncio.start_server(handle, host, port, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description="an upstream recording what is in flight at it")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    a = ap.parse_args()
    try:
        asyncio.run(main_async(a.host, a.port))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
