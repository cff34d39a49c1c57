"""The framing cases of the Autobahn|Testsuite (crossbario/autobahn-testsuite, its "fuzzing
client" cases), ported to drive a WebSocket through tierproxy to an echoing upstream on raw
sockets: sections 1 (text and binary of 0 to 65536 bytes), 2 (ping and pong), 3 (reserved
bits), 4 (reserved opcodes), 5 (fragmentation), 6 (UTF-8), 7 (close), 9 (large messages and
fragments), 10 (no re-fragmentation), and RSV1 under permessage-deflate from 12/13. The case ids are Autobahn's; what each case sends
follows its description; what is asserted is what a proxy owes.

The relay forwards client frames as they came, masked with the client's own key, and the
upstream's frames as they came (DESIGN.md, "WebSocket"). So each case asserts, byte for byte:
  - the upstream received exactly the bytes the client sent (per frame: head, mask key,
    masked payload), up to the frame the proxy refuses or the client's close;
  - the client received exactly the bytes the upstream sent, and after a refusal nothing
    but the proxy's own close frame.

Three outcomes:
  PASS      a valid exchange: every frame forwarded, every echo back, a clean close.
  FAIL      the proxy must fail the connection (RFC 6455 5.2, 5.4, 5.5): RSV bits without an
            extension that defines them, reserved opcodes, control frames over 125 bytes or
            fragmented, a continuation with nothing to continue, a new data message inside a
            fragmented one. The frames before the bad one reach the upstream unchanged, and
            both sides get close 1002 (the upstream's masked).
  ENDPOINT  the check belongs to the endpoint, not the proxy (section 6, and close payloads
            in section 7): the frames pass unchanged and the upstream decides.

Section 6, what tierproxy does with UTF-8 and why: it does not validate it. The relay never
unmasks a payload (it reads frame heads only, to count messages and refuse malformed
framing); RFC 6455 8.1 gives the check to the endpoint that interprets the text; and with
permessage-deflate the text is only visible after inflating, which a proxy does not do. So
text frames, valid or not, pass byte for byte, and the upstream (here in its /strict mode,
which validates as an endpoint must) fails an invalid message with 1007, which reaches the
client unchanged. The same holds for close payloads (section 7: codes such as 999 or 1004,
a reason that is not UTF-8, a 1-byte payload): the proxy forwards the client's close frame
as it came and the upstream answers it. Only framing that no endpoint could read past is
the proxy's to refuse.
"""
import os
import socket
import struct
import time
import zlib

import pytest

from conftest import SLOW, Catalog, Proxies
from fleet_helpers import read_head, ws_handshake_bytes, xor_mask
from ws_raw_upstream import RawWsUpstream, parse_frame

CONT, TEXT, BIN, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
PASS, FAIL, ENDPOINT = "pass", "fail", "endpoint"


def frame(op, payload=b"", fin=True, rsv=0, mask=True):
    """A client frame: masked with a fresh random key unless mask is False."""
    n = len(payload)
    mbit = 0x80 if mask else 0
    head = bytes([(0x80 if fin else 0) | rsv | op])
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + xor_mask(payload, key)


def close_frame(code=None, reason=b""):
    return frame(CLOSE, b"" if code is None else struct.pack("!H", code) + reason)


def fragments(op, data, size):
    """One message in frames of size bytes: op first, continuations after, FIN on the last."""
    pieces = [data[o:o + size] for o in range(0, len(data), size)] or [b""]
    return [frame(op if i == 0 else CONT, p, fin=i + 1 == len(pieces)) for i, p in enumerate(pieces)]


class Case:
    def __init__(self, cid, frames, outcome=PASS, good=None, send="whole", path="/echo", code=None):
        self.cid = cid
        self.frames = frames        # [bytes]: each one frame (or deliberately broken bytes)
        self.outcome = outcome
        self.good = good            # FAIL: the frames before the refused one
        self.send = send            # "whole", "frames" (each arrives alone) or an int: chop size
        self.path = path
        self.code = code            # FAIL: 1002; ENDPOINT: the upstream's close code

    def __repr__(self):
        return self.cid


CASES = []


def case(*a, **kw):
    CASES.append(Case(*a, **kw))


# --------------------------------------------------------------------------------------
# 1 framing: text and binary messages of each payload length encoding

for op, sec in ((TEXT, 1), (BIN, 2)):
    for i, n in enumerate((0, 125, 126, 127, 128, 65535, 65536), 1):
        body = (b"*" * n) if op == TEXT else os.urandom(n)
        case("1.%d.%d" % (sec, i), [frame(op, body)])
    case("1.%d.8" % sec, [frame(op, (b"*" if op == TEXT else b"\xfe") * 65536)], send=997)

# --------------------------------------------------------------------------------------
# 2 pings and pongs

case("2.1", [frame(PING)])
case("2.2", [frame(PING, b"Hello, world!")])
case("2.3", [frame(PING, bytes([0x00, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0x00, 0xff]))])
case("2.4", [frame(PING, b"\xfe" * 125)])
case("2.5", [frame(PING, b"\xfe" * 126)], FAIL, good=0)          # control frame over 125
case("2.6", [frame(PING, b"\xfe" * 125)], send=1)
case("2.7", [frame(PONG)])                                       # unsolicited: no answer
case("2.8", [frame(PONG, b"unsolicited pong payload")])
case("2.9", [frame(PONG, b"unsolicited pong payload"), frame(PING, b"ping payload")])
case("2.10", [frame(PING, b"payload-%d" % i) for i in range(10)])
case("2.11", [frame(PING, b"payload-%d" % i) for i in range(10)], send=1)

# --------------------------------------------------------------------------------------
# 3 reserved bits: none negotiated, so any RSV bit fails the connection

case("3.1", [frame(TEXT, b"Hello, world!", rsv=0x10)], FAIL, good=0)
case("3.2", [frame(TEXT, b"Hello, world!"), frame(TEXT, b"Hello, world!", rsv=0x20),
             frame(PING)], FAIL, good=1)
case("3.3", [frame(TEXT, b"Hello, world!"), frame(TEXT, b"Hello, world!", rsv=0x30),
             frame(PING)], FAIL, good=1, send="frames")
case("3.4", [frame(TEXT, b"Hello, world!"), frame(TEXT, b"Hello, world!", rsv=0x40),
             frame(PING)], FAIL, good=1, send=1)
case("3.5", [frame(BIN, bytes(range(256)) * 4, rsv=0x50)], FAIL, good=0)
case("3.6", [frame(PING, b"Hello, world!", rsv=0x60)], FAIL, good=0)
case("3.7", [frame(CLOSE, rsv=0x70)], FAIL, good=0)

# --------------------------------------------------------------------------------------
# 4 reserved opcodes

for i, op in enumerate((3, 4, 5, 6, 7), 1):
    if i <= 2:
        case("4.1.%d" % i, [frame(op, b"reserved" if i == 2 else b"")], FAIL, good=0)
    else:
        case("4.1.%d" % i, [frame(TEXT, b"Hello, world!"), frame(op, b"reserved" if i > 3 else b""),
                            frame(PING)], FAIL, good=1, send=1 if i == 5 else "whole")
for i, op in enumerate((11, 12, 13, 14, 15), 1):
    if i <= 2:
        case("4.2.%d" % i, [frame(op, b"reserved" if i == 2 else b"")], FAIL, good=0)
    else:
        case("4.2.%d" % i, [frame(TEXT, b"Hello, world!"), frame(op, b"reserved" if i > 3 else b""),
                            frame(PING)], FAIL, good=1, send=1 if i == 5 else "whole")

# --------------------------------------------------------------------------------------
# 5 fragmentation

case("5.1", [frame(PING, b"fragment1", fin=False), frame(CONT, b"fragment2")], FAIL, good=0)
case("5.2", [frame(PONG, b"fragment1", fin=False), frame(CONT, b"fragment2")], FAIL, good=0)
for cid, send in (("5.3", "whole"), ("5.4", 1), ("5.5", "frames")):
    case(cid, [frame(TEXT, b"fragment1", fin=False), frame(CONT, b"fragment2")], send=send)
for cid, send in (("5.6", "whole"), ("5.7", 1), ("5.8", "frames")):
    case(cid, [frame(TEXT, b"fragment1", fin=False), frame(PING, b"ping payload"),
               frame(CONT, b"fragment2")], send=send)
for cid, send in (("5.9", "whole"), ("5.10", 1), ("5.11", "frames")):
    case(cid, [frame(CONT, b"non-continuation payload"), frame(TEXT, b"Hello, world!")],
         FAIL, good=0, send=send)
for cid, send in (("5.12", "whole"), ("5.13", 1), ("5.14", "frames")):
    case(cid, [frame(CONT, b"non-continuation payload", fin=False),
               frame(TEXT, b"Hello, world!")], FAIL, good=0, send=send)
case("5.15", [frame(TEXT, b"fragment1", fin=False), frame(CONT, b"fragment2"),
              frame(CONT, b"fragment3", fin=False), frame(TEXT, b"fragment4")], FAIL, good=2)
for cid, fin in (("5.16", False), ("5.17", True)):
    case(cid, [frame(CONT, b"fragment1", fin=fin), frame(TEXT, b"fragment2", fin=False),
               frame(CONT, b"fragment3")] * 2, FAIL, good=0)
case("5.18", [frame(TEXT, b"fragment1", fin=False), frame(TEXT, b"fragment2")], FAIL, good=1)
for cid, send in (("5.19", "whole"), ("5.20", "frames")):
    case(cid, [frame(TEXT, b"fragment1", fin=False), frame(CONT, b"fragment2", fin=False),
               frame(PING, b"pongme 1!"), frame(CONT, b"fragment3", fin=False),
               frame(CONT, b"fragment4", fin=False), frame(PING, b"pongme 2!"),
               frame(CONT, b"fragment5")], send=send)

# --------------------------------------------------------------------------------------
# 6 UTF-8: the upstream (/strict) is the endpoint that checks; the proxy passes text as is

VALID_UTF8 = [
    ("6.2.1", "Hello-µ@ßöäüàá-UTF-8!!".encode()),
    ("6.5.1", "κόσμε".encode()),
    ("6.6.11", "κόσμε".encode()),
    ("6.7.1", b"\x00"), ("6.7.2", b"\xc2\x80"), ("6.7.3", b"\xe0\xa0\x80"),
    ("6.7.4", b"\xf0\x90\x80\x80"),
    ("6.9.1", b"\x7f"), ("6.9.2", b"\xdf\xbf"), ("6.9.3", b"\xef\xbf\xbf"),
    ("6.9.4", b"\xf4\x8f\xbf\xbf"),
    ("6.11.1", b"\xed\x9f\xbf"), ("6.11.2", b"\xee\x80\x80"), ("6.11.3", b"\xef\xbf\xbd"),
    ("6.23.1", b"\xef\xbf\xbe"), ("6.23.7", b"\xef\xbb\xbf"),
]
INVALID_UTF8 = [
    ("6.3.1", "κόσμε".encode() + b"\xed\xa0\x80" + b"edited"),
    ("6.6.1", b"\xce"),
    ("6.8.1", b"\xf8\x88\x80\x80\x80"), ("6.8.2", b"\xfc\x84\x80\x80\x80\x80"),
    ("6.10.1", b"\xf7\xbf\xbf\xbf"), ("6.10.2", b"\xfb\xbf\xbf\xbf\xbf"),
    ("6.12.1", b"\x80"), ("6.12.2", b"\xbf"), ("6.12.8", b"\x80\xbf\x80\xbf"),
    ("6.14.1", b"\xc0"), ("6.15.1", b"\xc0\xe0\x80\xf0\x80\x80"),
    ("6.16.1", b"\xfe"), ("6.16.2", b"\xff"),
    ("6.17.1", b"\xc0\xaf"), ("6.18.1", b"\xc1\xbf"), ("6.19.1", b"\xed\xa0\x80"),
    ("6.20.1", b"\xed\xa0\x80\xed\xb0\x80"), ("6.21.1", b"\xf4\x90\x80\x80"),
]
case("6.1.1", [frame(TEXT)], path="/strict")
case("6.1.2", [frame(TEXT, fin=False), frame(CONT, fin=False), frame(CONT)], path="/strict")
case("6.1.3", [frame(TEXT, fin=False), frame(CONT, b"middle frame payload", fin=False),
               frame(CONT)], path="/strict")
for cid, data in VALID_UTF8:
    case(cid, [frame(TEXT, data)], path="/strict")
case("6.2.3", [frame(TEXT, VALID_UTF8[0][1])], path="/strict", send=1)
case("6.2.2", fragments(TEXT, VALID_UTF8[0][1], 7), path="/strict")
case("6.2.4", fragments(TEXT, VALID_UTF8[1][1], 1), path="/strict")
case("6.3.2", fragments(TEXT, INVALID_UTF8[0][1], 1), ENDPOINT, path="/strict", code=1007)
for cid, data in INVALID_UTF8:
    case(cid, [frame(TEXT, data)], ENDPOINT, path="/strict", code=1007)
# 6.4.x: an invalid sequence in the middle fragment of three; the check is the endpoint's
for i, bad in enumerate((b"\xf4\x90\x80\x80", b"\xf4\x90", b"\x80\x80", b"\xed\xa0\x80"), 1):
    case("6.4.%d" % i, [frame(TEXT, "κόσμε".encode(), fin=False), frame(CONT, bad, fin=False),
                        frame(CONT, b"edited")], ENDPOINT, path="/strict", code=1007,
         send="frames")
# the same bytes in binary messages are nobody's business
case("6.x.binary", [frame(BIN, data) for _, data in INVALID_UTF8], path="/strict")

# --------------------------------------------------------------------------------------
# 7 close handling

case("7.1.1", [frame(TEXT, b"Hello World!"), close_frame(1000)])
case("7.1.2", [close_frame(1000), close_frame(1000)])
case("7.1.3", [close_frame(1000), frame(PING)])
case("7.1.4", [close_frame(1000), frame(TEXT, b"after close")])
case("7.1.5", [frame(TEXT, b"fragment1", fin=False), close_frame(1000), frame(CONT, b"fragment2")])
case("7.1.6", [frame(TEXT, b"BAsd7&jh23" * 26214), close_frame(1000), frame(PING)])
case("7.3.1", [close_frame()])
case("7.3.2", [frame(CLOSE, b"a")], ENDPOINT)                      # the upstream answers
case("7.3.3", [close_frame(1000)])
case("7.3.4", [close_frame(1000, b"Hello World!")])
case("7.3.5", [close_frame(1000, b"*" * 123)])
case("7.3.6", [close_frame(1000, b"*" * 124)], FAIL, good=0)       # payload 126 > 125
case("7.5.1", [close_frame(1000, "κόσμε".encode() + b"\xed\xa0\x80" + b"edited")], ENDPOINT)
for i, c in enumerate((1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999,
                       4000, 4999), 1):
    case("7.7.%d" % i, [close_frame(c)])
for i, c in enumerate((0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999), 1):
    case("7.9.%d" % i, [close_frame(c)], ENDPOINT)
for i, c in enumerate((5000, 65535), 1):
    case("7.13.%d" % i, [close_frame(c)], ENDPOINT)

# --------------------------------------------------------------------------------------
# 9 large messages and fragment sizes (smaller than Autobahn's up to 16 MiB: seconds, not
# minutes, on a shared 2-core box)

for i, n in enumerate((64 << 10, 256 << 10, 1 << 20), 1):
    case("9.1.%d" % i, [frame(TEXT, b"BAsd7&jh23" * (n // 10) + b"*" * (n % 10))])
    case("9.2.%d" % i, [frame(BIN, os.urandom(n))])
MSG = os.urandom(1 << 20)
for i, k in enumerate((256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20), 3):
    case("9.3.%d" % i, fragments(BIN, MSG, k))
for i, k in enumerate((64, 256, 1 << 10, 4 << 10), 1):
    case("9.5.%d" % i, [frame(TEXT, b"*" * (256 << 10))], send=k)
case("9.7.1", [frame(TEXT, b"m%d" % i) for i in range(1000)])

# --------------------------------------------------------------------------------------
# 10 a message is never re-fragmented on its way

case("10.1.1", [frame(TEXT, b"*" * 65536)])

# --------------------------------------------------------------------------------------
# 12/13 in part: with permessage-deflate negotiated (RFC 7692), RSV1 marks a compressed
# message on its first frame and passes as it came; anywhere else it is still a 1002


def deflated(data):
    c = zlib.compressobj(wbits=-15)
    return (c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH))[:-4]


TEXT_Z = deflated(b"Hello, compressed world! " * 20)
case("12.x.1", [frame(TEXT, TEXT_Z, rsv=0x40)], path="/deflate")
case("12.x.2", [frame(BIN, deflated(os.urandom(3000)), rsv=0x40)], path="/deflate")
case("12.x.3", [frame(TEXT, TEXT_Z[:10], fin=False, rsv=0x40), frame(PING, b"between"),
                frame(CONT, TEXT_Z[10:])], path="/deflate")
case("12.x.4", [frame(TEXT, TEXT_Z), frame(TEXT, TEXT_Z, rsv=0x40)], path="/deflate")
case("12.x.5", [frame(TEXT, TEXT_Z[:10], fin=False, rsv=0x40),
                frame(CONT, TEXT_Z[10:], rsv=0x40)], FAIL, good=1, path="/deflate")
case("12.x.6", [frame(PING, b"x", rsv=0x40)], FAIL, good=0, path="/deflate")
case("12.x.7", [frame(TEXT, TEXT_Z, rsv=0x40 | 0x20)], FAIL, good=0, path="/deflate")

# --------------------------------------------------------------------------------------
# beyond Autobahn's client cases: what a server must refuse of a client (RFC 6455 5.1)

case("x.unmasked", [frame(TEXT, b"Hello, world!", mask=False)], FAIL, good=0)
case("x.unmasked-after-good", [frame(TEXT, b"Hello"), frame(BIN, b"world", mask=False)],
     FAIL, good=1)


# --------------------------------------------------------------------------------------
# the harness


@pytest.fixture(scope="module")
def tunnel(tmp_path_factory, request):
    """One proxy (memory store, a plan with no limit in the way) in front of one raw
    upstream for all the cases: a case costs a handshake, not a proxy start."""
    tmp = tmp_path_factory.mktemp("ws_framing")
    up = RawWsUpstream()
    catalog = Catalog(tmp / "plans.db").init()
    catalog.plan("frames", "--rate", "1000000/min")
    _, key = catalog.user_key("frames")
    proxies = Proxies(tmp, request)
    p = proxies.start(catalog, store="memory", upstream=up)
    yield p, up, key
    problems = proxies.stop_all()
    up.close()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


class Client:
    """The client's side on a raw socket: everything received is kept, frames parsed as
    they come."""

    def __init__(self, port, path, key):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10 * SLOW)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        offer = [("Sec-WebSocket-Extensions", "permessage-deflate")] if "deflate" in path else []
        self.sock.sendall(ws_handshake_bytes(path, key, offer))
        status, _, rest = read_head(self.sock)
        assert status == 101, status
        self.raw = bytearray(rest)
        self.frames = []
        self.parsed = 0
        self.eof = False

    def _parse(self):
        while True:
            got = parse_frame(self.raw, self.parsed)
            if got is None:
                return
            f, n = got
            self.parsed += n
            self.frames.append(f)

    def read_until(self, pred):
        """Reads until pred(frames) or EOF; returns pred's last value."""
        self._parse()
        while not pred(self.frames) and not self.eof:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                self.eof = True
            self.raw += chunk
            self._parse()
        return pred(self.frames)

    def read_to_eof(self):
        self.read_until(lambda fs: False)

    def close(self):
        self.sock.close()


def send(client, c, conn):
    """Writes the case's frames as the case says."""
    data = b"".join(c.frames)
    if c.send == "whole":
        client.sock.sendall(data)
    elif c.send == "frames":
        # each frame arrives alone: the next goes once the upstream has this one (or, for
        # the refused frame and after it, at once)
        sent = 0
        for i, f in enumerate(c.frames):
            client.sock.sendall(f)
            sent += len(f)
            if c.outcome != FAIL or i < c.good:
                assert wait_for(lambda: len(conn.raw) >= sent), \
                    "frame %d did not reach the upstream" % i
    else:
        for o in range(0, len(data), c.send):
            client.sock.sendall(data[o:o + c.send])


def wait_for(pred, timeout=10):
    deadline = time.monotonic() + timeout * SLOW
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def upto_first_close(frames):
    """The bytes of frames up to and including the first close frame (an endpoint reads
    nothing after it)."""
    out = b""
    for f in frames:
        out += f
        if parse_frame(f)[0].opcode == CLOSE:
            return out, True
    return out, False


def check_forwarded(conn, expect):
    """The upstream received exactly `expect` (after it the upstream reads no more)."""
    got = bytes(conn.raw[:len(expect)])
    assert got == expect, "the upstream received other bytes than the client sent: " \
        "first difference at byte %d of %d; frames %r" % (
            next((i for i, (a, b) in enumerate(zip(got, expect)) if a != b), len(got)),
            len(expect), conn.frames[:8])


def run_pass(client, conn, c):
    sent, has_close = upto_first_close(c.frames)
    if not has_close:
        # the upstream echoes everything; then a clean close
        assert wait_for(lambda: len(conn.raw) >= len(sent)), "not all frames reached the upstream"
        n_echo = sum(1 for f in c.frames if parse_frame(f)[0].opcode != PONG)
        assert client.read_until(lambda fs: len(fs) >= n_echo), \
            "the client got %d of %d echoes" % (len(client.frames), n_echo)
        close = close_frame(1000, b"done")
        client.sock.sendall(close)
        sent += close
    client.read_to_eof()
    assert conn.wait_end(10 * SLOW)
    check_forwarded(conn, sent)
    assert conn.end_how == "closed-by-upstream", conn.end_how
    assert bytes(client.raw) == bytes(conn.sent), \
        "the client did not receive exactly what the upstream sent (%d bytes against %d)" \
        % (len(client.raw), len(conn.sent))
    assert client.frames[-1].opcode == CLOSE


def run_endpoint(client, conn, c):
    sent = b"".join(c.frames)
    assert client.read_until(lambda fs: any(f.opcode == CLOSE for f in fs)), \
        "no close frame came back"
    close = [f for f in client.frames if f.opcode == CLOSE][0]
    if c.code is not None:
        assert close.close_code == c.code, close
        client.sock.sendall(close_frame(c.code))
    client.read_to_eof()
    assert conn.wait_end(10 * SLOW)
    check_forwarded(conn, upto_first_close(c.frames)[0] if c.code is None else sent)
    assert bytes(client.raw) == bytes(conn.sent), \
        "the client did not receive exactly what the upstream sent"


def run_fail(client, conn, c):
    good = b"".join(c.frames[:c.good])
    assert client.read_until(lambda fs: any(f.opcode == CLOSE for f in fs)), \
        "the proxy did not close on case %s" % c.cid
    close = [f for f in client.frames if f.opcode == CLOSE][0]
    assert close.close_code == 1002, "close code %s, expected 1002" % close.close_code
    assert not close.masked
    client.sock.sendall(close_frame(1002))
    client.read_to_eof()
    assert conn.wait_end(10 * SLOW), "the proxy did not end the upstream side"
    check_forwarded(conn, good)
    rest = [f for f in conn.frames if f.opcode == CLOSE]
    assert rest and rest[0].masked and rest[0].close_code == 1002, \
        "the upstream did not get a masked close 1002 after the frames before the bad one: %r" \
        % conn.frames[-3:]
    assert bytes(conn.raw) == good + rest[0].raw, \
        "the upstream got more than the good frames and the close: %r" % conn.frames
    # what the client got: a prefix of what the upstream sent, then the proxy's close
    echoed = bytes(client.raw[:len(client.raw) - len(close.raw)])
    assert bytes(conn.sent).startswith(echoed), "the client got frames the upstream never sent"
    assert client.raw.endswith(close.raw) and client.frames[-1] is close


@pytest.mark.parametrize("c", CASES, ids=[c.cid for c in CASES])
def test_autobahn_case(tunnel, c):
    p, up, key = tunnel
    client = Client(p.port, c.path, key)
    try:
        conn = up.next_conn()
        send(client, c, conn)
        {PASS: run_pass, FAIL: run_fail, ENDPOINT: run_endpoint}[c.outcome](client, conn, c)
    finally:
        client.close()


def test_the_port_has_the_cases_it_claims():
    ids = [c.cid for c in CASES]
    assert len(ids) == len(set(ids)), "a case id twice"
    assert len(ids) >= 100, len(ids)
