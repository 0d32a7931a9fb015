// Interop peer for `wirekit proxy`: npm minecraft-protocol's server (offline or online mode)
// and its client.
//
//   node mc_proxy_peer.js server PORT VERSION MOTD
//       Listens on 127.0.0.1:PORT (0: a port the system picks) and prints "listening <port>". Every player that joins gets a welcome
//       chat message long enough to be sent compressed (the server announces threshold 256),
//       and each chat message it sends comes back as "echo:<message>".
//   node mc_proxy_peer.js server-online PORT VERSION MOTD
//       The same server in online mode: a login gets its Encryption Request (its RSA key is
//       made at start-up; nothing here reaches Mojang's session servers, which a login would
//       need only after the client's Encryption Response).
//   node mc_proxy_peer.js server-plain PORT VERSION MOTD
//       The offline server with compression off (no Set Compression, as Velocity and
//       BungeeCord backends run).
//   node mc_proxy_peer.js client PORT VERSION HOST LOCAL_ADDRESS [ACT]
//       Connects from LOCAL_ADDRESS to 127.0.0.1:PORT with HOST in its handshake, logs in as
//       "Tester", waits for the welcome, sends a chat message and prints "ok <name> ...
//       threshold <n>" (its compression threshold at the end, -2 for none) once its echo is
//       back; exits 1 on a kick (printing "kicked: <reason>"), an error or after 20 s
//       (MC_PEER_TIMEOUT_MS).
//       ACT other than "chat" does something hostile once the welcome is in instead:
//       "bomb" writes a compressed frame declaring 1000 bytes whose zlib stream inflates to
//       1 MiB, "bigdecl" one declaring 16 MiB, "flood" sends 400 chat messages at once;
//       "reconfig" chats "reconfigure", which the server answers (1.20.2+) by taking the
//       client back to the configuration state and out, then chats as "chat" does and prints
//       "ok <name> reconfigured" if it went through configuration again; "transfer" chats
//       "transfer", which the server answers (1.20.5+) with a Transfer packet, then as "chat",
//       printing "ok <name> transferred" if the Transfer reached it;
//       "cookie" chats "cookie", which the server answers (1.20.5+) by storing a cookie on the
//       client and asking for it back (this client keeps what it is sent to store and answers
//       Cookie Requests with it: minecraft-protocol's own client does neither), then echoes
//       "cookie" only if the value came back whole, then as "chat"; "bigcookie" the same, but
//       the client answers with a 6000-byte payload (vanilla's limit is 5 KiB); "reconfig-cookie"
//       as "reconfig", with the cookie stored and asked for back while the client is in the
//       configuration state (whose packet IDs differ from play's), and "reconfigured" printed
//       only if it came back whole.
//
// Versions with signed chat (1.19+) chat through system_chat and chat_message (text components
// as NBT from 1.20.3 on); older ones through chat.
'use strict'
const mc = require('minecraft-protocol')
const net = require('net')

// minecraft-protocol reports a compressed packet that does not inflate, or inflates to other
// than its Data Length, on stderr and goes on without it: here either ends the peer with
// status 1, so that a bad frame from wirekit (the inspect relay compresses packets again) is
// a failure, not a lost packet.
const reportError = console.error
console.error = (...args) => {
  reportError(...args)
  const text = args.map(String).join(' ')
  if (text.startsWith('problem inflating') || text.startsWith('uncompressed length should be')) {
    process.exit(1)
  }
}

const [mode, portArg, version, arg4, arg5, act] = process.argv.slice(2)
const port = Number(portArg)
const padding = 'x'.repeat(600)
const mcData = require('minecraft-data')(version)
const signedChat = mcData.supportFeature('signedChat')
const nbtChat = mcData.supportFeature('chatPacketsUseNbtComponents')

function chat (text) {
  return { message: JSON.stringify({ text }), position: 0 }
}

// Sends `text` to a player as a system message (or a chat message before 1.19).
function say (client, text) {
  if (!signedChat) return client.write('chat', chat(text))
  const nbt = require('prismarine-nbt')
  const content = nbtChat ? nbt.comp({ text: nbt.string(text) }) : JSON.stringify({ text })
  client.write('system_chat', { content, isActionBar: false })
}

// Echoes a chat message. "reconfigure" (1.20.2+) first takes the client back to the
// configuration state and out again, as a server does when it changes the client's world or
// registries: Start Configuration, the client's acknowledgement, Finish Configuration, the
// client's; the echo comes once it is back in play.
// "transfer" (1.20.5+) first sends a Transfer to 127.0.0.1:25565, which this client ignores
// (the proxy between may deny it).
// Stores a cookie on the client and asks for it back; `then(true)` if it came back whole.
function cookieRoundTrip (client, then) {
  const value = Buffer.from('wirekit cookie ' + padding)
  client.once('cookie_response', (p) => {
    then(p.key === 'wirekit:test' && p.value && Buffer.compare(Buffer.from(p.value), value) === 0)
  })
  client.write('store_cookie', { key: 'wirekit:test', value })
  client.write('cookie_request', { cookie: 'wirekit:test' })
}

function answer (client, message) {
  if (message === 'cookie') {
    return cookieRoundTrip(client, (back) => say(client, back ? 'echo:cookie' : 'cookie mismatch'))
  }
  if (message === 'transfer') {
    client.write('transfer', { host: '127.0.0.1', port: 25565 })
    return say(client, 'echo:' + message)
  }
  const reconfigure = message === 'reconfigure' || message === 'reconfigure-cookie'
  if (!reconfigure || !client.supportFeature('hasConfigurationState')) {
    return say(client, 'echo:' + message)
  }
  client.once('configuration_acknowledged', () => {
    client.state = mc.states.CONFIGURATION
    const finish = (back) => {
      client.once('finish_configuration', () => {
        client.state = mc.states.PLAY
        say(client, back ? 'echo:' + message : 'cookie mismatch')
      })
      client.write('finish_configuration', {})
    }
    if (message === 'reconfigure-cookie') return cookieRoundTrip(client, finish)
    finish(true)
  })
  client.write('start_configuration', {})
}

function varint (n) {
  const out = []
  do {
    let b = n & 0x7f
    n >>>= 7
    if (n !== 0) b |= 0x80
    out.push(b)
  } while (n !== 0)
  return Buffer.from(out)
}

// A compressed frame: Data Length `declared`, then `z`.
function compressedFrame (declared, z) {
  const inner = Buffer.concat([varint(declared), z])
  return Buffer.concat([varint(inner.length), inner])
}

function sendNoSetCompression (client) {
  const write = client.write.bind(client)
  client.write = (name, params) => { if (name !== 'compress') write(name, params) }
  Object.defineProperty(client, 'compressionThreshold', { get: () => -2, set: () => {} })
}

function reasonText (r) {
  return typeof r === 'string' ? r : JSON.stringify(r)
}

if (mode === 'server' || mode === 'server-online' || mode === 'server-plain') {
  const server = mc.createServer({
    'online-mode': mode === 'server-online',
    // minecraft-protocol's server always announces threshold 256 before Login Success: the
    // plain server holds back that packet and the threshold it would set on the connection.
    beforeLogin: mode === 'server-plain' ? sendNoSetCompression : undefined,
    host: '127.0.0.1',
    port,
    version,
    motd: arg4 || 'wirekit test',
    maxPlayers: 7,
    // Its decompressor's reports reach the check above (the clients' errors are logged too).
    hideErrors: false
  })
  server.on('listening', () => console.log('listening ' + server.socketServer.address().port))
  server.on('playerJoin', (client) => {
    say(client, 'welcome ' + client.username + ' ' + padding)
    client.on('chat', (p) => answer(client, p.message))
    client.on('chat_message', (p) => answer(client, p.message))
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
  // MC_PEER_TIMEOUT_MS: a longer bound for runs with many sessions at once.
  const limit = Number(process.env.MC_PEER_TIMEOUT_MS || 20000)
  const timer = setTimeout(() => { console.error('timed out'); process.exit(1) }, limit)
  let finished = false
  // Times the server took this client back to the configuration state.
  let reconfigured = 0
  client.on('start_configuration', () => { reconfigured++ })
  // Transfers the server sent that reached this client (which does not follow them).
  let transferred = 0
  client.on('transfer', () => { transferred++ })
  // Cookies the server stored on this client, answered back when it asks for them.
  const cookies = new Map()
  client.on('store_cookie', (p) => cookies.set(p.key, p.value))
  client.on('cookie_request', (p) => {
    const value = act === 'bigcookie' ? Buffer.alloc(6000, 1) : cookies.get(p.cookie)
    client.write('cookie_response', { key: p.cookie, value })
  })
  const onText = (message) => {
    let text = ''
    try { text = JSON.parse(message).text || '' } catch (e) { text = String(message) }
    if (text.startsWith('welcome Tester ') && text.endsWith(padding)) {
      if (act === 'bomb') {
        const zlib = require('zlib')
        client.socket.write(compressedFrame(1000, zlib.deflateSync(Buffer.alloc(1 << 20))))
      } else if (act === 'bigdecl') {
        client.socket.write(compressedFrame(16 << 20, Buffer.from([0x78, 0x9c, 0x03, 0x00])))
      } else if (act === 'flood') {
        for (let i = 0; i < 400; i++) client.chat('flood ' + i)
      } else if (act === 'reconfig') {
        client.chat('reconfigure')
      } else if (act === 'reconfig-cookie') {
        client.chat('reconfigure-cookie')
      } else if (act === 'transfer') {
        client.chat('transfer')
      } else if (act === 'cookie' || act === 'bigcookie') {
        client.chat('cookie')
      } else {
        client.chat('hello through the proxy')
      }
    } else if (text === 'cookie mismatch') {
      console.error('the cookie did not come back whole')
      process.exit(1)
    } else if (['echo:reconfigure', 'echo:reconfigure-cookie', 'echo:transfer', 'echo:cookie'].includes(text)) {
      // Back in play: chat once more through the proxy to show the connection still works.
      client.chat('hello through the proxy')
    } else if (text === 'echo:hello through the proxy') {
      console.log('ok ' + client.username + (reconfigured ? ' reconfigured' : '') +
        (transferred ? ' transferred' : '') + ' threshold ' + client.compressionThreshold)
      finished = true
      clearTimeout(timer)
      client.end()
      setTimeout(() => process.exit(0), 100)
    }
  }
  if (signedChat) {
    client.on('systemChat', (p) => onText(p.formattedMessage))
  } else {
    client.on('chat', (p) => onText(p.message))
  }
  client.on('kick_disconnect', (p) => { console.error('kicked: ' + reasonText(p.reason)); process.exit(1) })
  client.on('disconnect', (p) => { console.error('disconnected: ' + reasonText(p.reason)); process.exit(1) })
  client.on('end', () => { if (!finished) { console.error('ended'); process.exit(1) } })
  client.on('error', (e) => { console.error(e); process.exit(1) })
} else {
  console.error('usage: mc_proxy_peer.js server|server-online|server-plain PORT VERSION MOTD | client PORT VERSION HOST LOCAL_ADDRESS')
  process.exit(2)
}
