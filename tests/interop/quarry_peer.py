"""Interop peer: PyPI quarry's Buffer1_7.pack_packet / unpack_packet.

  python quarry_peer.py encode THRESHOLD   stdin: one hex packet (ID + data) a line
                                           stdout: hex of the framed stream
  python quarry_peer.py decode THRESHOLD   stdin: hex of a stream; stdout: one hex packet a line

THRESHOLD < 0 means the uncompressed format.
"""
import sys

from quarry.types.buffer import Buffer1_7


def main():
    mode, threshold = sys.argv[1], int(sys.argv[2])
    text = sys.stdin.read()
    if mode == "encode":
        out = b"".join(
            Buffer1_7.pack_packet(bytes.fromhex(line.strip()), threshold)
            for line in text.split("\n")
            if line.strip()
        )
        sys.stdout.write(out.hex() + "\n")
    elif mode == "decode":
        buff = Buffer1_7(bytes.fromhex("".join(text.split())))
        lines = []
        while len(buff) > 0:
            packet = buff.unpack_packet(Buffer1_7, threshold)
            lines.append(packet.read().hex())
        sys.stdout.write("".join(line + "\n" for line in lines))
    else:
        sys.exit("usage: quarry_peer.py encode|decode THRESHOLD")


if __name__ == "__main__":
    main()
