// Interop peer: Node's zlib module (the C zlib bundled with Node).
//
//   node zlib_peer.js inflate         stdin: one hex zlib stream a line; stdout: hex of each inflated
//   node zlib_peer.js deflate LEVEL   stdin: one hex input a line ("-" for empty); stdout: hex streams
'use strict'
const zlib = require('zlib')
const [mode, level] = process.argv.slice(2)
const lines = require('fs').readFileSync(0, 'utf8').split('\n').map((l) => l.trim())
const out = []
for (const line of lines) {
  if (line.length === 0) continue
  const data = Buffer.from(line === '-' ? '' : line, 'hex')
  if (mode === 'inflate') {
    // Strict: the stream must end where the line does (inflateSync alone ignores bytes after
    // the end of the stream, and throws on a stream cut short).
    const { buffer, engine } = zlib.inflateSync(data, { info: true })
    if (engine.bytesWritten !== data.length) {
      console.error('stream ends at byte ' + engine.bytesWritten + ' of ' + data.length)
      process.exit(1)
    }
    out.push(buffer.toString('hex'))
  } else if (mode === 'deflate') {
    out.push(zlib.deflateSync(data, { level: Number(level) }).toString('hex'))
  } else {
    console.error('usage: zlib_peer.js inflate|deflate LEVEL')
    process.exit(2)
  }
}
process.stdout.write(out.map((l) => l + '\n').join(''))
