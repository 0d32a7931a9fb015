"""Interop peer: PyPI quarry's Buffer1_7.pack_packet / unpack_packet.

  python quarry_peer.py encode THRESHOLD   stdin: one hex packet (ID + data) a line
                                           stdout: hex of the framed stream
  python quarry_peer.py decode THRESHOLD   stdin: hex of a stream; stdout: one hex packet a line

THRESHOLD < 0 means the uncompressed format.
"""
import sys
import zlib

from quarry.types.buffer import Buffer1_7


def varint(data, at):
    """A VarInt at data[at:]: (value, bytes read)."""
    value = 0
    for i in range(5):
        b = data[at + i]
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, i + 1
    raise ValueError("VarInt longer than 5 bytes")


def check_data_lengths(data, threshold):
    """What quarry's unpack_packet reads and drops: each frame's Data Length must be its body's
    inflated length (at least the threshold), or 0 for a body sent as is below the threshold."""
    at = 0
    while at < len(data):
        length, n = varint(data, at)
        body = data[at + n : at + n + length]
        at += n + length
        declared, m = varint(body, 0)
        if declared == 0:
            if len(body) - m >= threshold:
                raise ValueError(f"{len(body) - m} bytes sent uncompressed at threshold {threshold}")
        else:
            inflated = zlib.decompress(body[m:])
            if declared != len(inflated) or declared < threshold:
                raise ValueError(f"Data Length {declared}, inflated {len(inflated)}")


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
        data = bytes.fromhex("".join(text.split()))
        if threshold >= 0:
            check_data_lengths(data, threshold)
        buff = Buffer1_7(data)
        lines = []
        while len(buff) > 0:
            packet = buff.unpack_packet(Buffer1_7, threshold)
            lines.append(packet.read().hex())
        sys.stdout.write("".join(line + "\n" for line in lines))
    else:
        sys.exit("usage: quarry_peer.py encode|decode THRESHOLD")


if __name__ == "__main__":
    main()
