"""Prints core/src/prudp/vectors.rs: PRUDP packets encoded by the peer, NintendoClients.

Run with PyPI nintendoclients 4.4.0 and anynet 1.1.0 on Python 3.11:
    python tests/vectors/prudp_gen.py > core/src/prudp/vectors.rs
Every packet is built with the library's own PRUDPMessageV0 / PRUDPMessageV1 /
PRUDPLiteMessage classes and signed with its calc_packet_signature, the way its client and
server send them (nintendo/nex/prudp.py, send_packet / process_syn / process_connect).
"""
import hmac, hashlib
from nintendo.nex import prudp, settings as nex_settings

ACCESS_KEY = "ridfebb9"
SESSION_KEY = bytes(range(0x10, 0x20))
CLIENT_ADDR = ("192.168.1.10", 60000)
SERVER_ADDR = ("10.0.0.1", 60001)

out = []

def emit(name, doc, data):
    out.append("/// %s" % doc)
    out.append("pub(crate) const %s: [u8; %d] = [" % (name, len(data)))
    for i in range(0, len(data), 16):
        out.append("    " + " ".join("0x%02x," % b for b in data[i:i + 16]))
    out.append("];")
    out.append("")

def settings(version, sigver=0, flags=1, checksum=1):
    s = nex_settings.default()
    s["prudp.access_key"] = ACCESS_KEY
    s["prudp_v0.signature_version"] = sigver
    s["prudp_v0.flags_version"] = flags
    s["prudp_v0.checksum_version"] = checksum
    if version == "lite":
        s["prudp.transport"] = s.TRANSPORT_WEBSOCKET
    return s

def packet(version, type, flags, src=(10, 15), dst=(10, 1), session=0, substream=0, seq=0,
           frag=0, conn_sig=None, payload=b"", minor=0, functions=0, unrel=0, max_sub=0):
    p = prudp.PRUDPPacket(type, flags)
    p.version = version
    p.source_type, p.source_port = src
    p.dest_type, p.dest_port = dst
    p.session_id, p.substream_id, p.packet_id, p.fragment_id = session, substream, seq, frag
    p.connection_signature = conn_sig
    p.payload = payload
    p.minor_version, p.supported_functions = minor, functions
    p.initial_unreliable_id, p.max_substream_id = unrel, max_sub
    return p

def encode(msg, p, session_key, conn_sig):
    p.signature = msg.calc_packet_signature(p, session_key, conn_sig)
    data = msg.encode(p)
    # The library must read back what it wrote.
    assert len(msg.decode(data)) == 1
    return data

T, F = prudp, prudp

# --- v0, NEX (u16 type/flags, 1-byte checksum), signature version 0 ---
v0 = prudp.PRUDPMessageV0(settings(0))
client_sig = v0.calc_connection_signature(SERVER_ADDR)  # the client's signature for the server
server_sig = v0.calc_connection_signature(CLIENT_ADDR)  # the server's signature for the client
emit("V0_CONN_SIG_CLIENT", "v0 connection signature for %s:%d" % CLIENT_ADDR, server_sig)
emit("V0_CONN_SIG_SERVER", "v0 connection signature for %s:%d" % SERVER_ADDR, client_sig)
emit("V0_SYN", "v0 NEX SYN, NEED_ACK, connection signature zeroed, keys (empty, empty)",
     encode(v0, packet(0, T.TYPE_SYN, F.FLAG_NEED_ACK, conn_sig=bytes(4)), b"", b""))
emit("V0_SYN_ACK", "v0 NEX SYN-ACK from the server carrying its signature for the client",
     encode(v0, packet(0, T.TYPE_SYN, F.FLAG_ACK, src=(10, 1), dst=(10, 15), conn_sig=server_sig), b"", b""))
emit("V0_CONNECT", "v0 NEX CONNECT, RELIABLE|NEED_ACK|HAS_SIZE, session 0x5a, seq 1, payload 'hello', keys (empty, server's signature)",
     encode(v0, packet(0, T.TYPE_CONNECT, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=1, conn_sig=client_sig, payload=b"hello"), b"", server_sig))
emit("V0_DATA", "v0 NEX DATA, RELIABLE|NEED_ACK|HAS_SIZE, session 0x5a, seq 2, fragment 0, payload 00..0c, keys (SESSION_KEY, server's signature), signature version 0",
     encode(v0, packet(0, T.TYPE_DATA, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=2, payload=bytes(range(13))), SESSION_KEY, server_sig))
emit("V0_DATA_NO_SIZE", "v0 NEX DATA without HAS_SIZE, RELIABLE|NEED_ACK, session 0x5a, seq 3, fragment 1, payload 'abc', keys (SESSION_KEY, server's signature)",
     encode(v0, packet(0, T.TYPE_DATA, F.FLAG_RELIABLE | F.FLAG_NEED_ACK, session=0x5A, seq=3, frag=1, payload=b"abc"), SESSION_KEY, server_sig))
emit("V0_DISCONNECT", "v0 NEX DISCONNECT, RELIABLE|NEED_ACK, session 0x5a, seq 4, keys (SESSION_KEY, server's signature), signature version 0",
     encode(v0, packet(0, T.TYPE_DISCONNECT, F.FLAG_RELIABLE | F.FLAG_NEED_ACK, session=0x5A, seq=4), SESSION_KEY, server_sig))
emit("V0_PING", "v0 NEX PING, RELIABLE|NEED_ACK|HAS_SIZE, session 0x5a, seq 5, keys (SESSION_KEY, server's signature)",
     encode(v0, packet(0, T.TYPE_PING, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=5), SESSION_KEY, server_sig))
emit("V0_DATA_ACK", "v0 NEX DATA ACK|HAS_SIZE from the server, session 0x21, seq 2, keys (SESSION_KEY, client's signature)",
     encode(v0, packet(0, T.TYPE_DATA, F.FLAG_ACK | F.FLAG_HAS_SIZE, src=(10, 1), dst=(10, 15), session=0x21, seq=2), SESSION_KEY, client_sig))
v0s1 = prudp.PRUDPMessageV0(settings(0, sigver=1))
emit("V0_SIG1_DATA", "v0 NEX signature version 1 DATA, RELIABLE|NEED_ACK|HAS_SIZE, session 0x5a, seq 2, payload 'xyz', keys (SESSION_KEY, server's signature)",
     encode(v0s1, packet(0, T.TYPE_DATA, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=2, payload=b"xyz"), SESSION_KEY, server_sig))
emit("V0_SIG1_DATA_EMPTY", "v0 NEX signature version 1 DATA, empty payload (signature 0x12345678), HAS_SIZE, session 0x5a, seq 6",
     encode(v0s1, packet(0, T.TYPE_DATA, F.FLAG_HAS_SIZE, session=0x5A, seq=6), SESSION_KEY, server_sig))

# A datagram holding two packets (both with HAS_SIZE), which the library reads as two.
two = (encode(v0, packet(0, T.TYPE_PING, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=5), SESSION_KEY, server_sig)
       + encode(v0, packet(0, T.TYPE_DATA, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=2, payload=bytes(range(13))), SESSION_KEY, server_sig))
assert len(v0.decode(two)) == 2
emit("V0_TWO_PACKETS", "v0 NEX datagram: V0_PING then V0_DATA", two)

# --- v0, Quazal (u8 type/flags, 4-byte checksum): no Quazal peer runs here; these come from
# the library's flags_version 0 / checksum_version 0 path, which follows the Quazal documentation.
vq = prudp.PRUDPMessageV0(settings(0, sigver=0, flags=0, checksum=0))
emit("QUAZAL_SYN", "Quazal v0 SYN, NEED_ACK, ports 0x31 -> 0x3f (written from the documentation, no Quazal peer)",
     encode(vq, packet(0, T.TYPE_SYN, F.FLAG_NEED_ACK, src=(3, 1), dst=(3, 15), conn_sig=bytes(4)), b"", b""))
emit("QUAZAL_DATA", "Quazal v0 DATA, RELIABLE|NEED_ACK|HAS_SIZE, session 7, seq 9, fragment 0, payload 'quazal', keys (empty, V0_CONN_SIG_CLIENT) (written from the documentation, no Quazal peer)",
     encode(vq, packet(0, T.TYPE_DATA, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, src=(3, 1), dst=(3, 15), session=7, seq=9, payload=b"quazal"), b"", server_sig))
emit("QUAZAL_PING", "Quazal v0 PING, RELIABLE|NEED_ACK, session 7, seq 10, no HAS_SIZE, keys (empty, V0_CONN_SIG_CLIENT) (written from the documentation, no Quazal peer)",
     encode(vq, packet(0, T.TYPE_PING, F.FLAG_RELIABLE | F.FLAG_NEED_ACK, src=(3, 1), dst=(3, 15), session=7, seq=10), b"", server_sig))

# --- v1 ---
v1 = prudp.PRUDPMessageV1(settings(2))
c1 = v1.calc_connection_signature(SERVER_ADDR)
s1 = v1.calc_connection_signature(CLIENT_ADDR)
emit("V1_CONN_SIG_CLIENT", "v1 connection signature for %s:%d (the library's HMAC form)" % CLIENT_ADDR, s1)
emit("V1_CONN_SIG_SERVER", "v1 connection signature for %s:%d (the library's HMAC form)" % SERVER_ADDR, c1)
emit("V1_SYN", "v1 SYN, NEED_ACK, options minor 4 functions 0x104, signature zeroed, max substream 1, keys (empty, empty)",
     encode(v1, packet(1, T.TYPE_SYN, F.FLAG_NEED_ACK, conn_sig=bytes(16), minor=4, functions=0x104, max_sub=1), b"", b""))
emit("V1_SYN_ACK", "v1 SYN-ACK carrying the server's signature for the client, keys (empty, empty)",
     encode(v1, packet(1, T.TYPE_SYN, F.FLAG_ACK, src=(10, 1), dst=(10, 15), conn_sig=s1, minor=4, functions=0x104, max_sub=1), b"", b""))
emit("V1_CONNECT", "v1 CONNECT, RELIABLE|NEED_ACK|HAS_SIZE, session 0x5a, seq 1, unreliable seq 0x1234, payload 'hello', keys (empty, server's signature)",
     encode(v1, packet(1, T.TYPE_CONNECT, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=1, conn_sig=c1, minor=4, functions=0x104, unrel=0x1234, max_sub=1, payload=b"hello"), b"", s1))
emit("V1_CONNECT_ACK", "v1 CONNECT-ACK, ACK|HAS_SIZE, session 0x21, seq 1, signature zeroed, payload 01 02 03 04, keys (empty, client's signature)",
     encode(v1, packet(1, T.TYPE_CONNECT, F.FLAG_ACK | F.FLAG_HAS_SIZE, src=(10, 1), dst=(10, 15), session=0x21, seq=1, conn_sig=bytes(16), minor=4, functions=0x104, max_sub=1, payload=b"\x01\x02\x03\x04"), b"", c1))
emit("V1_DATA", "v1 DATA, RELIABLE|NEED_ACK|HAS_SIZE, session 0x5a, substream 1, seq 2, fragment 3, payload 00..0c, keys (SESSION_KEY, server's signature)",
     encode(v1, packet(1, T.TYPE_DATA, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, substream=1, seq=2, frag=3, payload=bytes(range(13))), SESSION_KEY, s1))
emit("V1_DATA_ACK", "v1 DATA ACK|HAS_SIZE from the server, session 0x21, substream 1, seq 2, fragment 3, keys (SESSION_KEY, client's signature)",
     encode(v1, packet(1, T.TYPE_DATA, F.FLAG_ACK | F.FLAG_HAS_SIZE, src=(10, 1), dst=(10, 15), session=0x21, substream=1, seq=2, frag=3), SESSION_KEY, c1))
emit("V1_PING", "v1 PING, RELIABLE|NEED_ACK|HAS_SIZE, session 0x5a, seq 3, keys (SESSION_KEY, server's signature)",
     encode(v1, packet(1, T.TYPE_PING, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=3), SESSION_KEY, s1))
emit("V1_DISCONNECT", "v1 DISCONNECT, RELIABLE|NEED_ACK|HAS_SIZE, session 0x5a, seq 4, no session key yet: keys (empty, server's signature)",
     encode(v1, packet(1, T.TYPE_DISCONNECT, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=4), b"", s1))

two = (encode(v1, packet(1, T.TYPE_PING, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, seq=3), SESSION_KEY, s1)
       + encode(v1, packet(1, T.TYPE_DATA, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, session=0x5A, substream=1, seq=2, frag=3, payload=bytes(range(13))), SESSION_KEY, s1))
assert len(v1.decode(two)) == 2
emit("V1_TWO_PACKETS", "v1 datagram: V1_PING then V1_DATA", two)

# --- Lite ---
lite = prudp.PRUDPLiteMessage(settings("lite"))
ls = lite.calc_connection_signature(CLIENT_ADDR)
emit("LITE_CONN_SIG", "Lite server connection signature (the library's HMAC form for %s:%d)" % CLIENT_ADDR, ls)
emit("LITE_SYN", "Lite SYN, NEED_ACK, types 10 -> 10, ports 15 -> 1, option supported functions (minor 5, functions 0)",
     encode(lite, packet(None, T.TYPE_SYN, F.FLAG_NEED_ACK, minor=5), b"", b""))
emit("LITE_SYN_ACK", "Lite SYN-ACK with the server connection signature option",
     encode(lite, packet(None, T.TYPE_SYN, F.FLAG_ACK, src=(10, 1), dst=(10, 15), conn_sig=ls, minor=5), b"", b""))
emit("LITE_CONNECT", "Lite CONNECT, RELIABLE|NEED_ACK|HAS_SIZE, seq 1, payload 'hello', lite signature over the server's connection signature",
     encode(lite, packet(None, T.TYPE_CONNECT, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, seq=1, minor=5, payload=b"hello"), b"", ls))
emit("LITE_CONNECT_ACK", "Lite CONNECT-ACK, ACK|HAS_SIZE, seq 1",
     encode(lite, packet(None, T.TYPE_CONNECT, F.FLAG_ACK | F.FLAG_HAS_SIZE, src=(10, 1), dst=(10, 15), seq=1, minor=5), b"", b""))
emit("LITE_DATA", "Lite DATA, RELIABLE|NEED_ACK|HAS_SIZE, seq 2, fragment 2, ports 0x3f -> 0x71, payload 'stream'",
     encode(lite, packet(None, T.TYPE_DATA, F.FLAG_RELIABLE | F.FLAG_NEED_ACK | F.FLAG_HAS_SIZE, src=(10, 0x3F), dst=(10, 0x71), seq=2, frag=2, payload=b"stream"), b"", b""))

print("//! PRUDP packets encoded by the peer that runs here: NintendoClients 4.4.0 (anynet 1.1.0,")
print("//! Python 3.11), generated by tests/vectors/prudp_gen.py with access key %r," % ACCESS_KEY)
print("//! session key 10 11 .. 1f, client %s:%d, server %s:%d. Do not edit by hand." % (CLIENT_ADDR + SERVER_ADDR))
print()
print("\n".join(out).rstrip())
