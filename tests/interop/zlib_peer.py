"""Interop peer: CPython's zlib module (the C zlib).

  python zlib_peer.py inflate         stdin: one hex zlib stream a line; stdout: hex of each inflated
  python zlib_peer.py deflate LEVEL   stdin: one hex input a line; stdout: hex of each zlib stream
"""
import sys
import zlib


def main():
    mode = sys.argv[1]
    out = []
    for line in sys.stdin.read().split("\n"):
        line = line.strip()
        # Blank lines (the one after the last newline) are no input: "-" is the empty one.
        if not line:
            continue
        if line == "-":
            line = ""
        data = bytes.fromhex(line)
        if mode == "inflate":
            d = zlib.decompressobj()
            res = d.decompress(data) + d.flush()
            if not d.eof or d.unused_data:
                sys.exit("stream not complete or trailing bytes")
            out.append(res.hex())
        elif mode == "deflate":
            out.append(zlib.compress(data, int(sys.argv[2])).hex())
        else:
            sys.exit("usage: zlib_peer.py inflate|deflate LEVEL")
    sys.stdout.write("".join(o + "\n" for o in out))


if __name__ == "__main__":
    main()
