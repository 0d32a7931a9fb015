// Interop peer for `wirekit proxy`: npm minecraft-protocol's offline-mode server and client.
//
//   node mc_proxy_peer.js server PORT VERSION MOTD
//       Listens on 127.0.0.1:PORT (prints "listening"). Every player that joins gets a welcome
//       chat message long enough to be sent compressed (the server announces threshold 256),
//       and each chat message it sends comes back as "echo:<message>".
//   node mc_proxy_peer.js client PORT VERSION HOST LOCAL_ADDRESS
//       Connects from LOCAL_ADDRESS to 127.0.0.1:PORT with HOST in its handshake, logs in as
//       "Tester", waits for the welcome, sends a chat message and prints "ok <name>" once its
//       echo is back; exits 1 on a kick, an error or after 20 s.
'use strict'
const mc = require('minecraft-protocol')
const net = require('net')

const [mode, portArg, version, arg4, arg5] = process.argv.slice(2)
const port = Number(portArg)
const padding = 'x'.repeat(600)

function chat (text) {
  return { message: JSON.stringify({ text }), position: 0 }
}

if (mode === 'server') {
  const server = mc.createServer({
    'online-mode': false,
    host: '127.0.0.1',
    port,
    version,
    motd: arg4 || 'wirekit test',
    maxPlayers: 7,
    hideErrors: true
  })
  server.on('listening', () => console.log('listening'))
  server.on('playerJoin', (client) => {
    client.write('chat', chat('welcome ' + client.username + ' ' + padding))
    client.on('chat', (p) => client.write('chat', chat('echo:' + p.message)))
  })
  server.on('error', (e) => { console.error(e); process.exit(1) })
} else if (mode === 'client') {
  const local = arg5 || '127.0.0.1'
  const client = mc.createClient({
    host: '127.0.0.1',
    port,
    version,
    username: 'Tester',
    auth: 'offline',
    fakeHost: arg4,
    connect: (c) => c.setSocket(net.connect({ host: '127.0.0.1', port, localAddress: local }))
  })
  const timer = setTimeout(() => { console.error('timed out'); process.exit(1) }, 20000)
  client.on('chat', (p) => {
    const text = JSON.parse(p.message).text || ''
    if (text.startsWith('welcome Tester ') && text.endsWith(padding)) {
      client.write('chat', { message: 'hello through the proxy' })
    } else if (text === 'echo:hello through the proxy') {
      console.log('ok ' + client.username)
      clearTimeout(timer)
      client.end()
      setTimeout(() => process.exit(0), 100)
    }
  })
  client.on('kick_disconnect', (p) => { console.error('kicked: ' + p.reason); process.exit(1) })
  client.on('disconnect', (p) => { console.error('disconnected: ' + p.reason); process.exit(1) })
  client.on('error', (e) => { console.error(e); process.exit(1) })
} else {
  console.error('usage: mc_proxy_peer.js server PORT VERSION MOTD | client PORT VERSION HOST LOCAL_ADDRESS')
  process.exit(2)
}
