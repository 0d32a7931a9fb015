// Interop peer for `wirekit proxy`: npm minecraft-protocol's offline-mode server and client.
//
//   node mc_proxy_peer.js server PORT VERSION MOTD
//       Listens on 127.0.0.1:PORT (prints "listening"). Every player that joins gets a welcome
//       chat message long enough to be sent compressed (the server announces threshold 256),
//       and each chat message it sends comes back as "echo:<message>" (system chat from
//       1.19).
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

// 1.19 and later have no `chat` packet: the server sends `system_chat` (an NBT component
// from 1.20.3), the client `chat_message` (unsigned in offline mode, through client.chat).
function modern (version) {
  return require('minecraft-data')(version).supportFeature('signedChat')
}

function sendChat (client, version, text) {
  const data = require('minecraft-data')(version)
  if (!data.supportFeature('signedChat')) {
    client.write('chat', { message: JSON.stringify({ text }), position: 0 })
  } else if (data.supportFeature('chatPacketsUseNbtComponents')) {
    const nbt = require('prismarine-nbt')
    client.write('system_chat', { content: nbt.comp({ text: nbt.string(text) }), isActionBar: false })
  } else {
    client.write('system_chat', { content: JSON.stringify({ text }), isActionBar: false })
  }
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
    sendChat(client, version, 'welcome ' + client.username + ' ' + padding)
    const echo = (p) => sendChat(client, version, 'echo:' + p.message)
    client.on(modern(version) ? 'chat_message' : 'chat', echo)
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
  const onText = (text) => {
    if (text.startsWith('welcome Tester ') && text.endsWith(padding)) {
      if (modern(version)) client.chat('hello through the proxy')
      else client.write('chat', { message: 'hello through the proxy' })
    } else if (text === 'echo:hello through the proxy') {
      console.log('ok ' + client.username)
      clearTimeout(timer)
      client.end()
      setTimeout(() => process.exit(0), 100)
    }
  }
  if (modern(version)) {
    client.on('systemChat', (p) => onText(JSON.parse(p.formattedMessage).text || ''))
  } else {
    client.on('chat', (p) => onText(JSON.parse(p.message).text || ''))
  }
  client.on('kick_disconnect', (p) => { console.error('kicked: ' + p.reason); process.exit(1) })
  client.on('disconnect', (p) => { console.error('disconnected: ' + p.reason); process.exit(1) })
  client.on('error', (e) => { console.error(e); process.exit(1) })
} else {
  console.error('usage: mc_proxy_peer.js server PORT VERSION MOTD | client PORT VERSION HOST LOCAL_ADDRESS')
  process.exit(2)
}
