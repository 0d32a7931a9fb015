"""Interop peer for NEX over PRUDP: PyPI nintendoclients 4.4.0 (with anynet 1.1.0, Python 3.11).

  python nex_peer.py login HOST PORT --username U --password P [options]
      Logs in as a 3DS / Wii U client does: PRUDP handshake with the authentication server,
      Login, the ticket decrypted with the password's key (RequestTicket if it names another
      server), the secure server's CONNECT with the ticket, then Register (an RMC call on the
      secure server), and TestConnectivity with --test-connectivity; LoginEx with an
      AuthenticationInfo token with --token T. Prints one JSON line: {"ok": true, "pid",
      "secure_address", "test_connectivity",
      "registered": {"result", "connection_id", "public_station"}} or
      {"ok": false, "stage", "error"} and exits 1.

  python nex_peer.py serve PORT --username U --password P --pid N [options]
      The library's own server side, for wirekit's client: an authentication server on PORT
      and a secure server on PORT+1 that accept that one account. Prints
      {"listening": PORT} once ready and serves until stdin closes.

  python nex_peer.py selftest
      Runs `serve` and `login` against each other over loopback (v0 and v1): checks this
      driver on this machine's Python before the wirekit server exists.

  python nex_peer.py login HOST PORT --lite ...
      The same login as a Switch client makes it: PRUDP Lite over WebSocket (subprotocol NEX),
      the library's Lite transport. Plain WebSocket (ws://): the library would wrap it in TLS
      (wss://) for a real server, which a front proxy terminates; the wirekit listener is plain.

  python nex_peer.py ws-probe HOST PORT --subprotocol P [--send-hex H] [--send-size N]
      A raw WebSocket client of the library (anynet): upgrades offering subprotocol P, sends
      the binary messages given, and prints {"ok": true, "received": [hex...]} with what came
      back until the server closed or --timeout passed, with "close" (the status code of the
      server's close frame), "timed_out" and "end" (the name of the exception that ended the
      reads: EndOfStream for a closed WebSocket, null when the timeout did); {"ok": false,
      "error"} if the upgrade was refused.

Options: --access-key (default ridfebb9), --nex-version (default 30500), --prudp-version (0
or 1, default 1), --timeout seconds (default 10).
"""
import argparse
import json
import secrets
import sys

import anyio
from nintendo.nex import authentication, common, kerberos, rmc, secure, settings as nex_settings

SECURE_PID = 2


def make_settings(args):
    s = nex_settings.default()
    s.configure(args.access_key, args.nex_version)
    s["prudp.version"] = args.prudp_version
    if getattr(args, "lite", False):
        s["prudp.transport"] = s.TRANSPORT_WEBSOCKET
    return s


class _PlainWebSocket:
    """Stands in for anynet's `tls` module in the backend: its TLSContext() becomes None, so
    the Lite transport's WebSocket is plain ws:// instead of wss://."""

    @staticmethod
    def TLSContext():  # noqa: N802 - the name the backend calls
        return None


def derive(password, pid):
    return kerberos.KeyDerivationOld(65000, 1024).derive_key(password.encode(), pid)


async def login(args):
    from nintendo.nex import backend

    s = make_settings(args)
    if getattr(args, "lite", False):
        backend.tls = _PlainWebSocket
    stage = "auth-connect"
    try:
        with anyio.fail_after(args.timeout):
            async with backend.connect(s, args.host, args.port) as be:
                stage = "login"
                auth_info = None
                if args.token is not None:
                    auth_info = authentication.AuthenticationInfo()
                    auth_info.token = args.token
                async with be.login(args.username, args.password, auth_info) as client:
                    stage = "register"
                    proto = secure.SecureConnectionClient(client)
                    local = common.StationURL(
                        scheme="prudp", address="127.0.0.1", port=0, type=2, sid=15
                    )
                    reg = await proto.register([local])
                    stage = "test_connectivity"
                    tested = False
                    if args.test_connectivity:
                        await proto.test_connectivity()
                        tested = True
                    return {
                        "test_connectivity": tested,
                        "ok": True,
                        "pid": client.pid(),
                        "secure_address": "%s:%i" % client.remote_address(),
                        "registered": {
                            "result": reg.result.code(),
                            "connection_id": reg.connection_id,
                            "public_station": str(reg.public_station),
                        },
                    }
    except BaseException as e:  # noqa: BLE001 - any failure is the report
        if isinstance(e, KeyboardInterrupt):
            raise
        # anyio wraps a task's failure in groups: report the innermost cause.
        while isinstance(e, BaseExceptionGroup) and e.exceptions:
            e = e.exceptions[0]
        return {"ok": False, "stage": stage, "error": "%s: %s" % (type(e).__name__, e)}


class AuthServer(authentication.AuthenticationServer):
    def __init__(self, s, args):
        super().__init__()
        self.settings = s
        self.args = args
        self.secure_key = secrets.token_bytes(16)

    def ticket(self, source):
        session_key = secrets.token_bytes(self.settings["kerberos.key_size"])
        internal = kerberos.ServerTicket()
        internal.timestamp = common.DateTime.now()
        internal.source = source
        internal.session_key = session_key
        outer = kerberos.ClientTicket()
        outer.session_key = session_key
        outer.target = SECURE_PID
        outer.internal = internal.encrypt(self.secure_key, self.settings)
        return outer.encrypt(derive(self.args.password, source), self.settings)

    async def login(self, client, username):
        if username != self.args.username:
            raise common.RMCError("RendezVous::InvalidUsername")
        station = common.StationURL(
            scheme="prudp", address="127.0.0.1", port=self.args.port + 1,
            PID=SECURE_PID, CID=1, type=2, sid=1, stream=10,
        )
        data = authentication.RVConnectionData()
        data.main_station = station
        data.special_protocols = []
        data.special_station = common.StationURL()
        data.server_time = common.DateTime.now()
        response = rmc.RMCResponse()
        response.result = common.Result.success()
        response.pid = self.args.pid
        response.ticket = self.ticket(self.args.pid)
        response.connection_data = data
        response.server_name = "nex_peer.py"
        return response

    async def request_ticket(self, client, source, target):
        response = rmc.RMCResponse()
        response.result = common.Result.success()
        response.ticket = self.ticket(source)
        return response


class SecureServer(secure.SecureConnectionServer):
    async def register(self, client, urls):
        response = rmc.RMCResponse()
        response.result = common.Result.success()
        response.connection_id = 1
        address, port = client.remote_address()
        response.public_station = common.StationURL(
            scheme="prudp", address=address, port=port, type=3
        )
        return response


async def serve(args, ready=None):
    s = make_settings(args)
    auth = AuthServer(s, args)
    async with rmc.serve(s, [auth], "127.0.0.1", args.port):
        async with rmc.serve(s, [SecureServer()], "127.0.0.1", args.port + 1, key=auth.secure_key):
            if ready is not None:
                ready.set()
                await anyio.sleep_forever()
            print(json.dumps({"listening": args.port}), flush=True)
            # Serve until stdin closes (the test harness's handle on this process).
            await anyio.to_thread.run_sync(sys.stdin.read)


async def ws_probe(args):
    from anynet import websocket

    received, upgraded, closes = [], False, []
    timed_out, end = False, None
    try:
        with anyio.move_on_after(args.timeout) as scope:
            async with websocket.connect(
                "ws://%s:%i" % (args.host, args.port), protocols=[args.subprotocol],
                disconnect_timeout=1,
            ) as ws:
                upgraded = True
                # The server's close frame: anynet answers it without telling its status code,
                # so the code is read off the frame on its way in.
                handle = ws.process_packet

                async def spy(opcode, payload):
                    if opcode == websocket.OPCODE_DISCONNECT:
                        code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                        closes.append(code)
                    await handle(opcode, payload)

                ws.process_packet = spy
                for h in args.send_hex or []:
                    await ws.send(bytes.fromhex(h))
                if args.send_size:
                    await ws.send(bytes(args.send_size))
                while True:
                    received.append((await ws.recv()).hex())
    except BaseException as e:  # noqa: BLE001 - a refusal or the server's close ends the probe
        if isinstance(e, KeyboardInterrupt):
            raise
        while isinstance(e, BaseExceptionGroup) and e.exceptions:
            e = e.exceptions[0]
        if not upgraded:
            return {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        end = type(e).__name__
    else:
        timed_out = scope.cancelled_caught
    return {
        "ok": True,
        "received": received,
        # The status code of the server's close frame (None: no close frame came).
        "close": closes[0] if closes else None,
        "timed_out": timed_out,
        # What ended the reads after the upgrade: a closed WebSocket is EndOfStream; anything
        # else (a transport error, a bad frame) is named for the test to see.
        "end": end,
    }


def _free_port_pair():
    """A UDP port free on loopback with the one after it free too (serve binds both)."""
    import socket

    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port == 65535:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port


def _address_in_use(e):
    """Whether `e` (or the first of a group's) is a bind refused for an address in use."""
    import errno

    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return isinstance(e, OSError) and e.errno == errno.EADDRINUSE


async def selftest(args):
    results = []
    for version in (1, 0):
        # The pair is free when probed and released before the servers bind it: another
        # process may take a port in between, so a bind refused for that is tried again.
        for attempt in range(3):
            a = argparse.Namespace(**vars(args))
            a.prudp_version, a.port, a.host = version, _free_port_pair(), "127.0.0.1"
            a.username, a.password, a.pid = "alice", "wonderland", 1000
            a.token, a.test_connectivity = None, False
            ready = anyio.Event()
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(serve, a, ready)
                    await ready.wait()
                    r = await login(a)
                    group.cancel_scope.cancel()
                break
            except BaseException as e:  # noqa: BLE001 - re-raised unless a port race
                if attempt == 2 or not _address_in_use(e):
                    raise
        r["prudp_version"] = version
        results.append(r)
    ok = all(r["ok"] and r["pid"] == 1000 for r in results)
    return {"ok": ok, "runs": results}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("login", "serve", "selftest", "ws-probe"):
        c = sub.add_parser(name)
        if name in ("login", "ws-probe"):
            c.add_argument("host")
        if name == "ws-probe":
            c.add_argument("port", type=int)
            c.add_argument("--subprotocol", default="NEX")
            c.add_argument("--send-hex", action="append")
            c.add_argument("--send-size", type=int, default=0)
        if name in ("login", "serve"):
            c.add_argument("port", type=int)
            c.add_argument("--username", required=True)
            c.add_argument("--password", required=True)
        if name == "serve":
            c.add_argument("--pid", type=int, required=True)
        if name == "login":
            c.add_argument("--token", help="log in with LoginEx and this AuthenticationInfo token")
            c.add_argument("--test-connectivity", action="store_true",
                           help="call SecureConnection.TestConnectivity after Register")
            c.add_argument("--lite", action="store_true",
                           help="PRUDP Lite over plain WebSocket (subprotocol NEX)")
        c.add_argument("--access-key", default="ridfebb9")
        c.add_argument("--nex-version", type=int, default=30500)
        c.add_argument("--prudp-version", type=int, choices=(0, 1), default=1)
        c.add_argument("--timeout", type=float, default=10.0)
    args = p.parse_args()
    if args.command == "serve":
        anyio.run(serve, args)
        return
    command = {"login": login, "selftest": selftest, "ws-probe": ws_probe}[args.command]
    result = anyio.run(command, args)
    print(json.dumps(result), flush=True)
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
