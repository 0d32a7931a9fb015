// Interop peer: npm minecraft-protocol's own framing and compression transforms.
//
//   node mc_peer.js encode THRESHOLD   stdin: one hex packet (ID + data) a line
//                                      stdout: hex of the framed (compressed when THRESHOLD >= 0) stream
//   node mc_peer.js decode THRESHOLD   stdin: hex of a stream; stdout: one hex packet a line
//
// THRESHOLD < 0 means the uncompressed format. The stream is fed in chunks of varying size to exercise
// the splitter's buffering.
'use strict'
const framing = require('minecraft-protocol/src/transforms/framing')
const compression = require('minecraft-protocol/src/transforms/compression')
const zlib = require('zlib')

const [mode, thresholdArg] = process.argv.slice(2)
const threshold = Number(thresholdArg ?? '-1')
const input = require('fs').readFileSync(0, 'utf8')

// A packet of the compressed format: Data Length (VarInt), then the body or its zlib stream.
function strictInflate (packet) {
  let value = 0
  let at = 0
  for (let shift = 0; ; shift += 7) {
    const b = packet[at++]
    value |= (b & 0x7f) << shift
    if ((b & 0x80) === 0) break
  }
  if (value === 0) return
  const z = packet.subarray(at)
  let info
  try {
    info = zlib.inflateSync(z, { info: true })
  } catch (e) {
    console.error('strict inflate: ' + e.message)
    process.exit(1)
  }
  if (info.engine.bytesWritten !== z.length || info.buffer.length !== value) {
    console.error('strict inflate: ' + info.engine.bytesWritten + ' of ' + z.length +
      ' bytes read, ' + info.buffer.length + ' inflated where the packet declares ' + value)
    process.exit(1)
  }
}

function collect (stream, done) {
  const parts = []
  stream.on('data', (c) => parts.push(Buffer.from(c)))
  stream.on('end', () => done(parts))
  stream.on('error', (e) => { console.error(e); process.exit(1) })
}

if (mode === 'encode') {
  const framer = framing.createFramer()
  let head = framer
  if (threshold >= 0) {
    head = compression.createCompressor(threshold)
    head.pipe(framer)
  }
  collect(framer, (parts) => process.stdout.write(Buffer.concat(parts).toString('hex') + '\n'))
  for (const line of input.split('\n')) {
    if (line.trim().length === 0) continue
    head.write(Buffer.from(line.trim(), 'hex'))
  }
  head.end()
} else if (mode === 'decode') {
  const splitter = framing.createSplitter()
  let tail = splitter
  if (threshold >= 0) {
    tail = compression.createDecompressor(threshold)
    splitter.pipe(tail)
    // minecraft-protocol inflates with Z_SYNC_FLUSH (a stream cut before its end passes) and
    // only logs a wrong Data Length: each compressed packet is also inflated strictly here,
    // and must end where its frame does and give exactly its Data Length.
    splitter.on('data', (frame) => strictInflate(Buffer.from(frame)))
  }
  collect(tail, (parts) => process.stdout.write(parts.map((p) => p.toString('hex') + '\n').join('')))
  const bytes = Buffer.from(input.replace(/\s+/g, ''), 'hex')
  // Chunk sizes vary (tiny ones split length fields) but stay large enough on average that the
  // splitter's Buffer.concat per chunk does not go quadratic on the 200 KB packets.
  const sizes = [7, 1500, 1, 333, 4096]
  for (let i = 0, k = 0; i < bytes.length; k++) {
    const n = sizes[k % sizes.length]
    splitter.write(bytes.subarray(i, i + n))
    i += n
  }
  splitter.end()
} else {
  console.error('usage: mc_peer.js encode|decode THRESHOLD')
  process.exit(2)
}
