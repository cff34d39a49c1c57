"""A WebSocket upstream inside the test process, on raw sockets, that records every byte the
proxy sends it after the handshake. Used where the test must see the upstream's side
exactly: byte-for-byte equality of forwarded frames, the close frame the proxy sends and
whether it is masked (RFC 6455 5.3: the proxy is the upstream's client).

    up = RawWsUpstream()             # listens on 127.0.0.1, a thread per connection
    up.url                           # for the proxy's upstream
    conn = up.next_conn(timeout)     # the next tunnel the proxy opened, in order
    conn.wait_end(timeout)           # until the proxy closed its side (EOF or reset)
    conn.raw                         # every byte received after the handshake head
    conn.frames                      # [Frame] parsed from raw
    up.close()

Per connection (chosen by the handshake's path):
  echo (default)  data frames come back as they came (FIN, RSV bits, opcode, payload,
                  unmasked), a ping gets a pong with its payload; a close frame is answered
                  with a close frame carrying the same payload, then the upstream closes
  /mute...        echoes as above, but never answers a close frame nor closes: the proxy
                  must end the tunnel by itself
  /strict...      echoes as above, and checks what an endpoint must (RFC 6455 8.1): a text
                  message that is not UTF-8 gets close 1007 (then the client's close ends it)
  /half...        echoes as above; on the text message "half N" it sends the head and the
                  first half of an N-byte binary frame (half_payload(N)), and the second
                  half only once a close frame arrives (then its answering close)
  .../deflate...  the 101 accepts permessage-deflate
"""
import base64
import hashlib
import socket
import struct
import threading
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Frame:
    def __init__(self, fin, rsv, opcode, masked, payload, raw):
        self.fin, self.rsv, self.opcode, self.masked = fin, rsv, opcode, masked
        self.payload = payload   # unmasked
        self.raw = raw           # the frame's bytes as received

    @property
    def close_code(self):
        return struct.unpack("!H", self.payload[:2])[0] if len(self.payload) >= 2 else None

    def __repr__(self):
        return "<Frame fin=%d rsv=%#x op=%#x masked=%d %r>" % (
            self.fin, self.rsv, self.opcode, self.masked, self.payload[:60])


def unmask(data, key):
    n = len(data)
    if n == 0:
        return b""
    m = int.from_bytes((key * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ m).to_bytes(n, "big")


def parse_frame(buf, at=0):
    """(Frame, length) of the frame at buf[at:], or None when it is not whole yet."""
    if len(buf) < at + 2:
        return None
    b0, b1 = buf[at], buf[at + 1]
    n, off = b1 & 0x7F, at + 2
    if n == 126:
        if len(buf) < at + 4:
            return None
        n, off = struct.unpack("!H", bytes(buf[at + 2:at + 4]))[0], at + 4
    elif n == 127:
        if len(buf) < at + 10:
            return None
        n, off = struct.unpack("!Q", bytes(buf[at + 2:at + 10]))[0], at + 10
    masked = bool(b1 & 0x80)
    key = bytes(buf[off:off + 4]) if masked else None
    off += 4 if masked else 0
    if len(buf) < off + n:
        return None
    payload = bytes(buf[off:off + n])
    if masked:
        payload = unmask(payload, key)
    return (Frame(bool(b0 & 0x80), b0 & 0x70, b0 & 0x0F, masked, payload, bytes(buf[at:off + n])),
            off + n - at)


def half_payload(n):
    """The payload of the frame /half sends in two parts."""
    return (bytes(range(250)) * (n // 250 + 1))[:n]


def is_utf8(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def server_frame(b0, payload):
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", b0, n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 126, n)
    else:
        head = struct.pack("!BBQ", b0, 127, n)
    return head + payload


class Conn:
    def __init__(self, sock, path):
        self.sock = sock
        self.path = path
        self.raw = bytearray()       # every byte received after the handshake
        self.sent = bytearray()      # every byte sent after the 101
        self.frames = []
        self.ended = threading.Event()
        self.end_how = None            # "eof" | "reset" | "closed-by-upstream"
        self.t_end = None

    def send(self, data):
        self.sent += data
        self.sock.sendall(data)

    def wait_end(self, timeout):
        return self.ended.wait(timeout)

    def wait_frames(self, pred, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(list(self.frames)):
                return True
            time.sleep(0.01)
        return pred(list(self.frames))

    def close_frames(self):
        return [f for f in self.frames if f.opcode == 0x8]


class RawWsUpstream:
    def __init__(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(128)
        self.port = self.lsock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.conns = []
        self._taken = 0
        self._cv = threading.Condition()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def next_conn(self, timeout=10):
        """The next tunnel opened to this upstream (in the order they arrived)."""
        with self._cv:
            if not self._cv.wait_for(lambda: len(self.conns) > self._taken, timeout):
                raise AssertionError("no WebSocket reached the upstream within %ss" % timeout)
            c = self.conns[self._taken]
            self._taken += 1
            return c

    def close(self):
        self._stop = True
        try:
            self.lsock.close()
        except OSError:
            pass
        for c in list(self.conns):
            try:
                c.sock.close()
            except OSError:
                pass

    def _accept(self):
        while not self._stop:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _serve(self, s):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        try:
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    s.close()
                    return
                buf += chunk
        except OSError:
            s.close()
            return
        end = buf.index(b"\r\n\r\n") + 4
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        key = ""
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            if k.strip().lower() == "sec-websocket-key":
                key = v.strip()
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
        ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n" if "deflate" in path else ""
        s.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n"
                   % (accept, ext)).encode())
        conn = Conn(s, path)
        with self._cv:
            self.conns.append(conn)
            self._cv.notify_all()
        self._relay(conn, bytearray(buf[end:]))

    def _relay(self, conn, pending):
        s = conn.sock
        mute = conn.path.startswith("/mute")
        strict = conn.path.startswith("/strict")
        half = conn.path.startswith("/half")
        held = b""               # the rest of a frame in flight (half)
        text = None              # the text message being assembled (strict)
        closing = False          # we sent our close (strict): the client's close ends it
        conn.raw += pending
        try:
            while True:
                while True:
                    got = parse_frame(pending)
                    if got is None:
                        break
                    f, n = got
                    del pending[:n]
                    conn.frames.append(f)
                    if f.opcode == 0x8 and held:
                        conn.send(held)
                        held = b""
                    if half and f.opcode == 0x1 and f.payload.startswith(b"half "):
                        n = int(f.payload.split()[1])
                        big = server_frame(0x82, half_payload(n))
                        cut = len(big) - n + n // 2
                        conn.send(big[:cut])
                        held = big[cut:]
                        continue
                    if f.opcode == 0x8 and not mute:
                        if not closing:
                            conn.send(server_frame(0x88, f.payload))
                        conn.end_how = "closed-by-upstream"
                        return
                    if closing:
                        continue
                    if strict and f.opcode in (0x0, 0x1):
                        text = [f.payload] if f.opcode == 0x1 else \
                            (text + [f.payload] if text is not None else None)
                        if text is not None and f.fin:
                            message, text = b"".join(text), None
                            if not is_utf8(message):
                                conn.send(server_frame(0x88, struct.pack("!H", 1007) + b"not UTF-8"))
                                closing = True
                                continue
                    if f.opcode == 0x9:
                        conn.send(server_frame(0x8A, f.payload))
                    elif f.opcode < 0x8:
                        conn.send(server_frame((0x80 if f.fin else 0) | f.rsv | f.opcode, f.payload))
                chunk = s.recv(1 << 20)
                if not chunk:
                    conn.end_how = "eof"
                    return
                conn.raw += chunk
                pending += chunk
        except ConnectionResetError:
            conn.end_how = "reset"
        except OSError:
            conn.end_how = conn.end_how or "error"
        finally:
            conn.t_end = time.monotonic()
            conn.ended.set()
            try:
                s.close()
            except OSError:
                pass
