"""Seeds for proxy_parse: v2 headers repeating one TLV (or one SSL sub-TLV) 2 to 200 times.

The late features of proxy_parse's campaigns were hit-count buckets of the per-TLV code (the
kind lookup, the typed views, the re-encoder's check) summed over one header's TLVs, which
mutations reach only by chance. Every distinct TLV and SSL sub-TLV of the corpus's v2 headers
(CRC32C left out: a copy would no longer match) is repeated 2, 3, 5, 10, 20, 60 and 200 times
(past 10 only values of at most 16 bytes) in a TCP4 header. Merge the output into the corpus:

    python3 fuzz/seeds/proxy_parse_tlv_repeats.py fuzz/corpus/proxy_parse /tmp/seeds
    fuzz/target/x86_64-unknown-linux-gnu/release/proxy_parse -merge=1 -max_len=65536 \
        fuzz/corpus/proxy_parse /tmp/seeds
"""
import hashlib
import os
import struct
import sys
SIG = b"\r\n\r\n\x00\r\nQUIT\n"
ALEN = {0x00:0, 0x11:12, 0x12:12, 0x21:36, 0x22:36, 0x31:216, 0x32:216}
def walk(area):
    out = []; i = 0
    while i + 3 <= len(area):
        t = area[i]; n = struct.unpack('>H', area[i+1:i+3])[0]
        if i + 3 + n > len(area): break
        out.append((t, area[i+3:i+3+n])); i += 3 + n
    return out
tlvs = set(); subs = set()
d, out_dir = sys.argv[1], sys.argv[2]
os.makedirs(out_dir, exist_ok=True)
for f in os.listdir(d):
    b = open(os.path.join(d, f), 'rb').read()
    if not b.startswith(SIG) or len(b) < 16: continue
    fam = b[13]; ln = struct.unpack('>H', b[14:16])[0]
    if fam not in ALEN or 16 + ln > len(b) or ln < ALEN[fam]: continue
    for t, v in walk(b[16 + ALEN[fam]:16 + ln]):
        if t == 0x03: continue
        tlvs.add((t, v))
        if t == 0x20 and len(v) >= 5:
            for st, sv in walk(v[5:]): subs.add((v[:5], st, sv))
print(len(tlvs), 'distinct TLVs', len(subs), 'distinct SSL sub-TLVs')
def header(area):
    if len(area) > 65000:
        return b"x" * 70000  # past the maximum: not emitted
    body = bytes([127,0,0,1, 127,0,0,2]) + struct.pack('>HH', 1000, 25565) + area
    return SIG + bytes([0x21, 0x11]) + struct.pack('>H', len(body)) + body
def tlv(t, v): return bytes([t]) + struct.pack('>H', len(v)) + v
n = 0
def emit(h):
    global n
    if len(h) > 65535: return
    open(os.path.join(out_dir, hashlib.sha1(h).hexdigest()), 'wb').write(h); n += 1
KS = [2, 3, 5, 10, 20, 60, 200]
for t, v in tlvs:
    for k in KS:
        if k <= 10 or len(v) <= 16: emit(header(tlv(t, v) * k))
for pre, st, sv in subs:
    for k in KS:
        if k > 10 and len(sv) > 16: continue
        inner = pre + tlv(st, sv) * k
        if len(inner) < 65000: emit(header(tlv(0x20, inner)))
print(n, 'seeds')
