"""Prints core/src/nex/vectors.rs: NEX primitives, RMC messages, the authentication and
secure-connection messages, the PRUDP compression payload and the Switch key, as the peer
encodes them: NintendoClients 4.4.0.

Run with PyPI nintendoclients 4.4.0 and anynet 1.1.0 on Python 3.11:
    python tests/vectors/nex_gen.py > core/src/nex/vectors.rs
Primitives come from the library's StreamOut; RMC from its RMCMessage; Login, LoginEx,
RequestTicket and Register from its own AuthenticationClient / SecureConnectionClient (the
request bodies they send) answered by its AuthenticationServer / SecureConnectionServer
handlers (the reply bodies), each reply parsed back by the client. The verbose RMC form has
no implementation in the library: those vectors are laid out here from the documentation
(the NEX wiki's "Verbose" RMC tables) and are marked as such.
"""
import struct
import anyio
from nintendo.nex import (
    streams, common, rmc, settings as nex_settings, authentication, secure, prudp, kerberos,
)

out = []


def emit(name, doc, data):
    out.append("/// %s" % doc)
    out.append("pub(crate) const %s: [u8; %d] = [" % (name, len(data)))
    for i in range(0, len(data), 16):
        out.append("    " + " ".join("0x%02x," % b for b in data[i:i + 16]))
    out.append("];")
    out.append("")


def emit_u64(name, doc, value):
    out.append("/// %s" % doc)
    out.append("pub(crate) const %s: u64 = 0x%x;" % (name, value))
    out.append("")


def settings(pid_size=4, struct_header=False, version=40000):
    s = nex_settings.default()
    s["nex.pid_size"] = pid_size
    s["nex.struct_header"] = int(struct_header)
    s["nex.version"] = version
    return s


def stream(fn, **kw):
    s = streams.StreamOut(settings(**kw))
    fn(s)
    return s.get()


# --- primitives ---
emit("STRING_HELLO", "String 'hello'", stream(lambda s: s.string("hello")))
emit("STRING_EMPTY", "String '' (length 1, the NUL alone)", stream(lambda s: s.string("")))
emit("STRING_NONE", "String None (length 0)", stream(lambda s: s.string(None)))
emit("STRING_UTF8", "String 'Grüße' (UTF-8)", stream(lambda s: s.string("Grüße")))
emit("BUFFER", "Buffer 00 01 02 03 04", stream(lambda s: s.buffer(bytes(range(5)))))
emit("QBUFFER", "qBuffer 'abc'", stream(lambda s: s.qbuffer(b"abc")))
emit("LIST_U32", "List<u32> [1, 2, 0xdeadbeef]", stream(lambda s: s.list([1, 2, 0xDEADBEEF], s.u32)))
emit("LIST_STRING", "List<String> ['a', 'bc', '']", stream(lambda s: s.list(["a", "bc", ""], s.string)))
emit("PID32", "PID 0x12345678, nex.pid_size 4", stream(lambda s: s.pid(0x12345678)))
emit("PID64", "PID 0x123456789abcdef0, nex.pid_size 8", stream(lambda s: s.pid(0x123456789ABCDEF0), pid_size=8))
dt = common.DateTime.make(2026, 12, 1, 11, 43, 48)
emit_u64("DATETIME_VALUE", "DateTime.make(2026, 12, 1, 11, 43, 48).value()", dt.value())
emit("DATETIME", "DateTime 2026-12-01 11:43:48", stream(lambda s: s.datetime(dt)))
UNIX = 951868799  # 2000-02-29 23:59:59, a leap day
emit_u64("DATETIME_UNIX", "a Unix time", UNIX)
emit_u64("DATETIME_FROM_UNIX", "DateTime.fromtimestamp(DATETIME_UNIX).value()", common.DateTime.fromtimestamp(UNIX).value())
emit_u64("DATETIME_FUTURE", "DateTime.future().value(): 9999-12-31 23:59:59", common.DateTime.future().value())
emit("RESULT_ERROR", "Result RendezVous::InvalidPassword (error)",
     stream(lambda s: s.result(common.Result.error("RendezVous::InvalidPassword"))))
emit("RESULT_SUCCESS", "Result success (0x00010001)", stream(lambda s: s.result(common.Result.success())))
emit("VARIANT_NONE", "Variant None", stream(lambda s: s.variant(None)))
emit("VARIANT_I64", "Variant -5 (type 1)", stream(lambda s: s.variant(-5)))
emit("VARIANT_F64", "Variant 1.5 (type 2)", stream(lambda s: s.variant(1.5)))
emit("VARIANT_BOOL", "Variant True (type 3)", stream(lambda s: s.variant(True)))
emit("VARIANT_STRING", "Variant 'hi' (type 4)", stream(lambda s: s.variant("hi")))
emit("VARIANT_DATETIME", "Variant DateTime 2026-12-01 11:43:48 (type 5)", stream(lambda s: s.variant(dt)))
emit("VARIANT_U64", "Variant 7 (type 6)", stream(lambda s: s.variant(7)))
SECURE_URL = common.StationURL("prudps", address="10.0.0.1", port=60001, PID=2, CID=1, sid=1, stream=10, type=2)
emit("STATION_URL", "StationURL %s" % SECURE_URL, stream(lambda s: s.stationurl(SECURE_URL)))
emit("STATION_URL_EMPTY_PARAMS", "StationURL prudp:/", stream(lambda s: s.stationurl(common.StationURL.parse("prudp:/"))))


def auth_info():
    info = authentication.AuthenticationInfo()
    info.token = "tok"
    info.ngs_version = 3
    info.token_type = 1
    info.server_version = 0
    return info


emit("ANY_DATA", "AnyDataHolder AuthenticationInfo(token 'tok', ngs 3, type 1, server 0), no structure headers",
     stream(lambda s: s.anydata(auth_info())))
emit("ANY_DATA_HEADERS", "the same AnyDataHolder with structure headers (Data then AuthenticationInfo, each version 0)",
     stream(lambda s: s.anydata(auth_info()), struct_header=True))


def rv_data(time):
    d = authentication.RVConnectionData()
    d.main_station = SECURE_URL
    d.special_protocols = [3, 0x7A]
    d.special_station = common.StationURL.parse("prudp:/")
    d.server_time = time
    return d


emit("RV_CONNECTION_DATA_V0", "RVConnectionData, NEX 3.0 without structure headers, special protocols [3, 0x7a]",
     stream(lambda s: s.add(rv_data(dt)), version=30000))
emit("RV_CONNECTION_DATA_35_NO_HEADERS", "RVConnectionData, NEX 3.5 without structure headers: no version, so no time",
     stream(lambda s: s.add(rv_data(dt)), version=30500))
emit("RV_CONNECTION_DATA_V1", "RVConnectionData, NEX 3.5 with structure headers (version 1) and the server time",
     stream(lambda s: s.add(rv_data(dt)), struct_header=True, version=30500))

# --- RMC, packed ---
S = settings()
emit("RMC_REQUEST", "RMC request protocol 10, call 7, method 1, body String '1800000001'",
     rmc.RMCMessage.request(S, 10, 1, 7, stream(lambda s: s.string("1800000001"))).encode())
emit("RMC_REQUEST_EXTENDED", "RMC request protocol 0x1234 (extended), call 0x01020304, method 0x55, body 'xy'",
     rmc.RMCMessage.request(S, 0x1234, 0x55, 0x01020304, b"xy").encode())
emit("RMC_RESPONSE", "RMC response protocol 11, call 9, method 1, body 01 02 03",
     rmc.RMCMessage.response(S, 11, 1, 9, b"\x01\x02\x03").encode())
emit("RMC_RESPONSE_EXTENDED", "RMC response protocol 0x80 (extended), call 1, method 2, empty body",
     rmc.RMCMessage.response(S, 0x80, 2, 1, b"").encode())
emit("RMC_ERROR", "RMC error protocol 10, call 3, method 3, Core::AccessDenied",
     rmc.RMCMessage.error(S, 10, 3, 3, common.Result.error("Core::AccessDenied").code()).encode())
# The library reads its own messages back.
for data in [rmc.RMCMessage.request(S, 0x1234, 0x55, 0x01020304, b"xy").encode()]:
    m = rmc.RMCMessage.parse(S, data)
    assert (m.protocol, m.method, m.call_id, m.body) == (0x1234, 0x55, 0x01020304, b"xy")

# --- RMC, verbose: from the documentation, no peer ---
def verbose(fields):
    return struct.pack("<I", len(fields)) + fields


def vstring(s):
    return stream(lambda o: o.string(s))


emit("VERBOSE_REQUEST", "verbose RMC request (from the documentation, no peer): protocol 'Auth', call 7, "
     "method 'Auth::Login', class versions [('AuthInfo', 2)], body 01 02",
     verbose(vstring("Auth") + b"\x01" + struct.pack("<I", 7) + vstring("Auth::Login")
             + struct.pack("<I", 1) + vstring("AuthInfo") + struct.pack("<H", 2) + b"\x01\x02"))
emit("VERBOSE_RESPONSE", "verbose RMC response (from the documentation, no peer): protocol 'Auth', call 7, "
     "method 'Auth::Login*', body 09",
     verbose(vstring("Auth") + b"\x00\x01" + struct.pack("<I", 7) + vstring("Auth::Login*") + b"\x09"))
emit("VERBOSE_ERROR", "verbose RMC error (from the documentation, no peer): protocol 'Auth', call 7, "
     "Core::AccessDenied",
     verbose(vstring("Auth") + b"\x00\x00" + struct.pack("<II", 0x80010006, 7)))


# --- protocols 10 and 11: the library's client sends, its server answers ---
class Peer:
    """Stands in for the RMC client: hands each request body to the server handler and
    returns the reply body it writes."""

    def __init__(self, settings, server, handler):
        self.settings = settings
        self.server = server
        self.handler = handler
        self.bodies = []

    async def request(self, protocol, method, body):
        self.bodies.append(body)
        output = streams.StreamOut(self.settings)
        await getattr(self.server, self.handler)(None, streams.StreamIn(body, self.settings), output)
        self.bodies.append(output.get())
        return output.get()


def login_response(pid, ticket):
    r = rmc.RMCResponse()
    r.result = common.Result.success()
    r.pid = pid
    r.ticket = ticket
    r.connection_data = rv_data(dt)
    r.server_name = "branch:origin/project/wup-agmj build:3_8_15_2004_0"
    return r


TICKET = bytes(range(0x20, 0x40))


class Auth(authentication.AuthenticationServer):
    async def login(self, client, username):
        assert username == "1800000001"
        return login_response(1800000001, TICKET)

    async def login_ex(self, client, username, extra_data):
        assert username == "1800000001" and extra_data.token == "tok"
        return login_response(1800000001, TICKET)

    async def request_ticket(self, client, source, target):
        assert (source, target) == (1800000001, 2)
        r = rmc.RMCResponse()
        r.result = common.Result.success()
        r.ticket = TICKET[:16]
        return r


class Secure(secure.SecureConnectionServer):
    async def register(self, client, urls):
        assert [str(u) for u in urls] == ["prudp:/address=192.168.1.10;port=60000;sid=15;type=3",
                                          "prudp:/address=203.0.113.7;port=61000;sid=15;type=3"]
        r = rmc.RMCResponse()
        r.result = common.Result.success()
        r.connection_id = 0x1234
        r.public_station = common.StationURL("prudp", address="203.0.113.7", port=61000, RVCID=0x1234, type=3)
        return r


async def protocols():
    ctx = settings(struct_header=True, version=30500)
    p = Peer(ctx, Auth(), "handle_login")
    reply = await authentication.AuthenticationClient(p).login("1800000001")
    assert reply.pid == 1800000001 and reply.ticket == TICKET
    emit("LOGIN_REQUEST", "Login('1800000001') request body", p.bodies[0])
    emit("LOGIN_RESPONSE", "Login reply body: success, PID 1800000001, ticket 20..3f, RVConnectionData v1 "
         "(NEX 3.5, structure headers), build name", p.bodies[1])

    p = Peer(ctx, Auth(), "handle_login_ex")
    await authentication.AuthenticationClient(p).login_ex("1800000001", auth_info())
    emit("LOGIN_EX_REQUEST", "LoginEx('1800000001', AuthenticationInfo('tok')) request body, structure headers", p.bodies[0])
    emit("LOGIN_EX_RESPONSE", "LoginEx reply body (as Login's)", p.bodies[1])

    ctx8 = settings(pid_size=8, struct_header=True, version=40000)
    p = Peer(ctx8, Auth(), "handle_request_ticket")
    reply = await authentication.AuthenticationClient(p).request_ticket(1800000001, 2)
    assert reply.ticket == TICKET[:16]
    emit("REQUEST_TICKET_REQUEST", "RequestTicket(1800000001, 2) request body, 64-bit PIDs", p.bodies[0])
    emit("REQUEST_TICKET_RESPONSE", "RequestTicket reply body: success, ticket 20..2f", p.bodies[1])

    p = Peer(ctx, Secure(), "handle_register")
    urls = [common.StationURL("prudp", address="192.168.1.10", port=60000, sid=15, type=3),
            common.StationURL("prudp", address="203.0.113.7", port=61000, sid=15, type=3)]
    reply = await secure.SecureConnectionClient(p).register(urls)
    assert reply.connection_id == 0x1234
    emit("REGISTER_REQUEST", "Register([local, public]) request body", p.bodies[0])
    emit("REGISTER_RESPONSE", "Register reply body: success, connection id 0x1234, public StationURL", p.bodies[1])


anyio.run(protocols)

# --- the PRUDP compression payload ---
z = prudp.ZlibCompression()
PLAIN = bytes((i * 7) % 13 for i in range(300))
emit("COMPRESSION_PLAIN", "300 bytes (i * 7) % 13", PLAIN)
emit("COMPRESSION_PAYLOAD", "ZlibCompression().compress(COMPRESSION_PLAIN): ratio byte, zlib", z.compress(PLAIN))
assert z.decompress(z.compress(PLAIN)) == PLAIN
NOISE = bytes((i * 0x9E3779B1 >> 13) & 0xFF for i in range(40))
emit("COMPRESSION_NOISE", "40 bytes that do not compress", NOISE)
emit("COMPRESSION_NOISE_PAYLOAD", "ZlibCompression().compress(COMPRESSION_NOISE) (ratio 1)", z.compress(NOISE))

# --- the Switch key derivation ---
emit("SWITCH_KEY", "KeyDerivationNew().derive_key(b'hunter2', 0x0123456789abcdef)",
     kerberos.KeyDerivationNew().derive_key(b"hunter2", 0x0123456789ABCDEF))

print("//! NEX values encoded by the peer that runs here: NintendoClients 4.4.0 (anynet 1.1.0,")
print("//! Python 3.11), generated by tests/vectors/nex_gen.py; the verbose RMC vectors come from")
print("//! the documentation (no peer implements that form). Do not edit by hand.")
print()
print("\n".join(out).rstrip())
