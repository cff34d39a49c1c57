#!/usr/bin/python3
"""An asyncio upstream for the fleet tests (concurrency limits, WebSocket). Standard library
only; cheap per connection, so it holds thousands of idle WebSockets.

    ws_upstream.py --port PORT [--host 127.0.0.1]     (PORT 0 = pick one)
                   [--tls-cert CERT.pem --tls-key KEY.pem]   (TLS: https and wss)

The port it listens on is printed as the first line on stdout.

Everything is counted per caller, the X-Tier-User header the proxy added ("-" without one).
"open" counts what is in progress at the upstream: HTTP requests between their arrival and
their last byte (incremented before answering starts, decremented before the last byte is
written) plus WebSocket connections between the upgrade and the end of the TCP connection.

HTTP endpoints (any method):
  /slow/<ms>          waits ms milliseconds, then answers the echo
  /hang               never answers; counted open until the proxy closes the connection
  /stream/<n>/<ms>    chunked, n chunks "chunk i\n" every ms (the first at once); counted
                      open until the last chunk is written or the proxy closes the connection
  /__stats            JSON, see Stats.snapshot()
  /__reset            forgets every counter
  /page/<name>.html   the file tests/e2e/<name>.html, as text/html (the browser test's page)
  anything else       the echo: JSON {method, path, headers}
WebSocket (any path, with Upgrade: websocket):
  /refuse/<status>    answers that status with a JSON body instead of 101
  /greet...           answers 101 and a text frame "hello" in the same write
  .../delay101/<ms>...  (a segment pair anywhere in the path) waits ms before its 101
  .../deflate...      (a segment anywhere in the path) answers 101 with
                      "Sec-WebSocket-Extensions: permessage-deflate"; frames echo with
                      their RSV bits as they came
  .../proto...        (a segment anywhere in the path) answers 101 selecting the first
                      subprotocol offered (Sec-WebSocket-Protocol); elsewhere none is selected
  any other path      answers 101, then
  - echoes every data frame (text, binary, continuation) as a frame with the same FIN bit,
    opcode and payload, so fragmentation comes back as sent;
  - answers a ping with a pong carrying the same payload;
  - on a close frame from the client: records its code and answers a close frame with the
    same payload (code and reason), then closes the connection;
  - on the text message "__close <code>": sends a close frame with that code and reason
    "upstream", waits (up to 5 s) for the client's close frame (recorded), then closes;
  - on the text message "__drop": closes the TCP connection without a close frame.
"""
import argparse
import asyncio
import base64
import hashlib
import json
import os
import re
import socket
import struct
import sys

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Stats:
    def __init__(self):
        self.reset()

    def reset(self):
        self.open = {}            # user -> HTTP in flight + WS open
        self.max_open = {}        # user -> highest "open" seen
        self.http_inflight = {}
        self.http_max = {}
        self.http_done = {}       # user -> answered /slow requests
        self.hang_closed = {}     # user -> /hang requests whose connection the proxy closed
        self.ws_open = {}
        self.ws_max = {}
        self.ws_total = {}        # user -> upgrades accepted
        self.ws_messages = {}     # user -> complete data messages received
        self.ws_ended = []        # {"user", "how": "close"|"eof", "code", "reason"} per WS end
        self.ws_handshakes = []   # header lists of the last 100 upgrade requests
        self.ws_conns = {}        # user -> upgrade requests whose connection is still open
                                  # (from the request, also while its 101 is delayed)
        self.requests = []        # {"method", "target", "headers"} of the last 200 requests

    @staticmethod
    def add(d, user, n):
        d[user] = d.get(user, 0) + n
        return d[user]

    def open_add(self, user, n):
        v = self.add(self.open, user, n)
        if v > self.max_open.get(user, 0):
            self.max_open[user] = v

    def snapshot(self):
        return {k: v for k, v in vars(self).items()}


STATS = Stats()


def encode_frame(opcode, payload, fin=True, rsv=0):
    b0 = (0x80 if fin else 0) | rsv | opcode
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", b0, n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 126, n)
    else:
        head = struct.pack("!BBQ", b0, 127, n)
    return head + payload


async def read_frame(reader):
    """(fin, opcode, payload, rsv) of the next frame, unmasked (rsv: its RSV bits, in
    place); None at EOF."""
    try:
        h = await reader.readexactly(2)
        fin, opcode, rsv = bool(h[0] & 0x80), h[0] & 0x0F, h[0] & 0x70
        masked, n = bool(h[1] & 0x80), h[1] & 0x7F
        if n == 126:
            n = struct.unpack("!H", await reader.readexactly(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", await reader.readexactly(8))[0]
        mask = await reader.readexactly(4) if masked else None
        data = await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    if mask:
        data = unmask(data, mask)
    return fin, opcode, data, rsv


def unmask(data, mask):
    n = len(data)
    if n == 0:
        return data
    m = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ m).to_bytes(n, "big")


def close_payload_code(payload):
    if len(payload) >= 2:
        return struct.unpack("!H", payload[:2])[0], payload[2:].decode("utf-8", "replace")
    return None, ""


async def read_head(reader):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    headers = []
    for ln in lines[1:]:
        if ln:
            k, _, v = ln.partition(":")
            headers.append((k.strip(), v.strip()))
    return parts[0], parts[1], headers


def hget(headers, name):
    for k, v in headers:
        if k.lower() == name.lower():
            return v
    return None


def http_answer(status, body, ctype="application/json"):
    return (b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
            % (status, ctype.encode(), len(body))) + body


async def handle(reader, writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
    try:
        while True:
            req = await read_head(reader)
            if req is None:
                return
            method, target, headers = req
            user = hget(headers, "X-Tier-User") or "-"
            if not target.startswith("/__"):
                STATS.requests.append({"method": method, "target": target, "headers": headers})
                del STATS.requests[:-200]
            if "websocket" in (hget(headers, "Upgrade") or "").lower():
                await websocket(reader, writer, headers, user, target)
                return
            n = int(hget(headers, "Content-Length") or "0")
            if n:
                await reader.readexactly(n)
            path = target.split("?", 1)[0]
            parts = path.strip("/").split("/")
            if parts[0] == "__stats":
                writer.write(http_answer(200, json.dumps(STATS.snapshot()).encode()))
            elif parts[0] == "__reset":
                STATS.reset()
                writer.write(http_answer(200, b"{}"))
            elif parts[0] == "page" and len(parts) == 2 and re.fullmatch(r"[a-z_]+\.html", parts[1]):
                with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), parts[1]), "rb") as f:
                    writer.write(http_answer(200, f.read(), "text/html; charset=utf-8"))
            elif parts[0] == "slow" and len(parts) == 2:
                STATS.open_add(user, 1)
                v = Stats.add(STATS.http_inflight, user, 1)
                STATS.http_max[user] = max(v, STATS.http_max.get(user, 0))
                try:
                    await asyncio.sleep(int(parts[1]) / 1000.0)
                    data = http_answer(200, json.dumps({"path": target, "user": user}).encode())
                    writer.write(data[:-1])
                    await writer.drain()
                finally:
                    STATS.open_add(user, -1)
                    Stats.add(STATS.http_inflight, user, -1)
                Stats.add(STATS.http_done, user, 1)
                writer.write(data[-1:])
            elif parts[0] == "stream" and len(parts) == 3:
                n, ms = int(parts[1]), int(parts[2])
                STATS.open_add(user, 1)
                Stats.add(STATS.http_inflight, user, 1)
                try:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
                    for i in range(n):
                        if i:
                            await asyncio.sleep(ms / 1000.0)
                        data = b"chunk %d\n" % i
                        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                        await writer.drain()
                        if writer.is_closing() or reader.at_eof():
                            raise ConnectionResetError
                    Stats.add(STATS.http_done, user, 1)
                except ConnectionError:
                    Stats.add(STATS.hang_closed, user, 1)
                    return
                finally:
                    STATS.open_add(user, -1)
                    Stats.add(STATS.http_inflight, user, -1)
                writer.write(b"0\r\n\r\n")
            elif parts[0] == "hang":
                STATS.open_add(user, 1)
                Stats.add(STATS.http_inflight, user, 1)
                try:
                    await asyncio.wait_for(reader.read(1), 600)
                except (asyncio.TimeoutError, ConnectionError):
                    pass
                finally:
                    STATS.open_add(user, -1)
                    Stats.add(STATS.http_inflight, user, -1)
                    Stats.add(STATS.hang_closed, user, 1)
                return
            else:
                body = json.dumps({"method": method, "path": target,
                                   "headers": headers}).encode()
                writer.write(http_answer(200, body))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def websocket(reader, writer, headers, user, target):
    key = hget(headers, "Sec-WebSocket-Key") or ""
    accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
    STATS.ws_handshakes.append(headers)
    del STATS.ws_handshakes[:-100]
    parts = target.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "refuse" and len(parts) == 2:
        writer.write(http_answer(int(parts[1]), b'{"refused_by":"upstream"}'))
        await writer.drain()
        return
    Stats.add(STATS.ws_conns, user, 1)
    try:
        await websocket_accepted(reader, writer, user, parts, accept, headers)
    finally:
        Stats.add(STATS.ws_conns, user, -1)


async def websocket_accepted(reader, writer, user, parts, accept, headers):
    if "delay101" in parts[:-1]:
        await asyncio.sleep(int(parts[parts.index("delay101") + 1]) / 1000.0)
    extensions = "Sec-WebSocket-Extensions: permessage-deflate\r\n" if "deflate" in parts else ""
    offered = [p.strip() for p in (hget(headers, "Sec-WebSocket-Protocol") or "").split(",") if p.strip()]
    if "proto" in parts and offered:
        extensions += "Sec-WebSocket-Protocol: %s\r\n" % offered[0]
    writer.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n"
                  % (accept, extensions)).encode()
                 + (encode_frame(0x1, b"hello") if parts[0] == "greet" else b""))
    STATS.open_add(user, 1)
    v = Stats.add(STATS.ws_open, user, 1)
    STATS.ws_max[user] = max(v, STATS.ws_max.get(user, 0))
    Stats.add(STATS.ws_total, user, 1)
    end = {"user": user, "how": "eof", "code": None, "reason": ""}
    text_parts = None        # the text message being assembled, to spot "__close N"
    try:
        await writer.drain()
        while True:
            f = await read_frame(reader)
            if f is None:
                break
            fin, opcode, payload, rsv = f
            if opcode == 0x8:
                code, reason = close_payload_code(payload)
                end.update(how="close", code=code, reason=reason)
                writer.write(encode_frame(0x8, payload))
                await writer.drain()
                break
            if opcode == 0x9:
                writer.write(encode_frame(0xA, payload))
                await writer.drain()
                continue
            if opcode == 0xA:
                continue
            # data: echo the frame as it came
            if opcode == 0x1:
                text_parts = [payload]
            elif opcode == 0x0 and text_parts is not None:
                text_parts.append(payload)
            if fin:
                Stats.add(STATS.ws_messages, user, 1)
                msg = b"".join(text_parts) if text_parts is not None else None
                text_parts = None
                if msg == b"__drop":
                    end.update(how="dropped")
                    break
                if msg is not None and msg.startswith(b"__close "):
                    code = int(msg.split()[1])
                    writer.write(encode_frame(0x8, struct.pack("!H", code) + b"upstream"))
                    await writer.drain()
                    try:
                        while True:
                            g = await asyncio.wait_for(read_frame(reader), 5)
                            if g is None or g[1] == 0x8:
                                if g is not None:
                                    c, r = close_payload_code(g[2])
                                    end.update(how="close-reply", code=c, reason=r)
                                break
                    except asyncio.TimeoutError:
                        pass
                    break
            writer.write(encode_frame(opcode, payload, fin, rsv))
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        STATS.ws_ended.append(end)
        del STATS.ws_ended[:-1000]
        STATS.open_add(user, -1)
        Stats.add(STATS.ws_open, user, -1)
        try:
            writer.close()
        except Exception:
            pass


async def main_async(host, port, tls=None):
    server = await asyncio.start_server(handle, host, port, backlog=4096, limit=1 << 16, ssl=tls)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description="WebSocket echo + concurrency-counting upstream")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--tls-cert", help="serve TLS (wss, https) with this certificate (PEM)")
    ap.add_argument("--tls-key", help="... and this private key (PEM)")
    a = ap.parse_args()
    tls = None
    if a.tls_cert:
        import ssl
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(a.tls_cert, a.tls_key)
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    try:
        asyncio.run(main_async(a.host, a.port, tls))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
