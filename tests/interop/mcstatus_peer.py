"""Interop peer for `wirekit proxy`: PyPI mcstatus asks a server for its status.

    python mcstatus_peer.py status PORT   the modern Status Request (JavaServer.status())
    python mcstatus_peer.py legacy PORT   the legacy ping as mcstatus sends it, FE 01 FA with
                                          no MC|PingHost (LegacyServer.status())
    python mcstatus_peer.py ping PORT     a Ping alone after the handshake (JavaServer.ping())

Prints one JSON object: motd (plain text), version, protocol, online, max; for `ping`, latency
(milliseconds). One try each (mcstatus tries three times by default, the legacy ping on a new
connection each time, which would hide a proxy that fails the first).
"""
import json
import sys

from mcstatus import JavaServer, LegacyServer

mode, port = sys.argv[1], int(sys.argv[2])
if mode == "ping":
    print(json.dumps({"latency": JavaServer("127.0.0.1", port, timeout=5).ping(tries=1)}))
    sys.exit(0)
server = (JavaServer if mode == "status" else LegacyServer)("127.0.0.1", port, timeout=5)
status = server.status(tries=1)
print(json.dumps({
    "motd": status.motd.to_plain(),
    "version": status.version.name,
    "protocol": status.version.protocol,
    "online": status.players.online,
    "max": status.players.max,
}))
