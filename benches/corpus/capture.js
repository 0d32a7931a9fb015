// Captures the zlib benchmark's real-traffic corpus (see README.md beside this file).
//
//   node benches/corpus/capture.js OUT_DIR
//
// For each protocol version, runs npm minecraft-protocol's offline server and client on
// loopback (compression threshold 0, so every packet goes through zlib) and records the
// decompressed body (packet ID + data) of every packet either side receives, as the other
// side's serializer produced it: the whole session, login, configuration and registry data,
// tags, the play login packet, chat both ways, keep-alives, positions, and chunk data of a
// terrain world built with prismarine-chunk. Packets whose content the script wrote (chunk data
// and light built with prismarine-chunk, the tags, and the chat lines both ways, which the peer
// only serialized) are labelled `peer-generated`, the rest `captured`.
//
// Output: OUT_DIR/<source>.bin, records of
//   u8 source_len, source, u8 version_len, version, u8 name_len, name, u8 dir (0 to client,
//   1 to server), u32 LE body_len, body
// and OUT_DIR/manifest.tsv (one line a packet: file, index, source, version, direction,
// packet name, length). Deterministic but for a few fields the peer fills itself (UUIDs, the
// server's keep-alive ids, timestamps in chat).
'use strict'
const fs = require('fs')
const path = require('path')

const mc = require('minecraft-protocol')
const Vec3 = require('vec3')

const VERSIONS = ['1.8.8', '1.12.2', '1.20.4', '1.21.4']
const CHUNK_RADIUS = 1 // (2r+1)^2 = 9 chunk columns a session
const CHATS = [
  'hello there',
  'anyone want to trade diamonds for iron? i have 12 stacks of cobblestone too',
  'where is the nether portal',
  'gg',
  'server lag again lol, tps must be like 12',
  'come to my base at 120 64 -340, bring torches'
]

// A chat line as servers with a chat plugin send it: rank prefix, name with click and hover
// events, the message (a few hundred bytes of JSON text component).
function chatComponent (i, message) {
  const names = ['Steve', 'Alex', 'xX_Miner_Xx', 'BuilderBob', 'luna', 'Kai2011']
  const ranks = [['Member', 'gray'], ['VIP', 'green'], ['Mod', 'blue'], ['Admin', 'red']]
  const name = names[i % names.length]
  const [rank, color] = ranks[i % ranks.length]
  return {
    text: '',
    extra: [
      { text: `[${rank}] `, color, hoverEvent: { action: 'show_text', contents: { text: `Rank: ${rank}\nJoined: 2024-0${1 + i % 9}-1${i % 10}\nPlaytime: ${17 + 13 * i}h`, color: 'yellow' } } },
      { text: name, color: 'white', clickEvent: { action: 'suggest_command', value: `/msg ${name} ` }, hoverEvent: { action: 'show_text', contents: { text: `Click to message ${name}`, color: 'gray' } } },
      { text: ' » ', color: 'dark_gray' },
      { text: message, color: i % 2 ? 'white' : 'gray' }
    ]
  }
}

// A JSON text component as anonymous NBT (1.20.3+): objects are compounds, arrays lists.
function toNbt (value) {
  if (typeof value === 'string') return { type: 'string', value }
  if (Array.isArray(value)) return { type: 'list', value: { type: 'compound', value: value.map((v) => toNbt(v).value) } }
  const out = {}
  for (const [k, v] of Object.entries(value)) out[k] = toNbt(v)
  return { type: 'compound', name: '', value: out }
}

function rng (seed) {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

// A terrain column: rolling hills of stone under dirt and grass, sand and water at sea level,
// ores and caves in the stone, bedrock at the bottom, a few trees, full sky light above ground.
function buildChunk (version, registry, cx, cz) {
  const Chunk = require('prismarine-chunk')(registry)
  const modern = registry.supportFeature('tallWorld') || version >= '1.18'
  const minY = modern ? -64 : 0
  const worldHeight = modern ? 384 : 256
  const chunk = modern
    ? new Chunk({ minY, worldHeight })
    : new Chunk()
  const b = registry.blocksByName
  const id = (name) => (b[name] ?? b.stone).id
  const random = rng(cx * 7919 + cz * 104729 + 1)
  const sea = 62
  const ores = [id('coal_ore'), id('iron_ore'), id('gold_ore'), id('redstone_ore'), id('diamond_ore')]
  const setBlock = (pos, name) => {
    if (chunk.setBlockStateId && b[name]) chunk.setBlockStateId(pos, b[name].defaultState ?? (b[name].id << 4))
    else chunk.setBlockType(pos, id(name))
  }
  for (let x = 0; x < 16; x++) {
    for (let z = 0; z < 16; z++) {
      const wx = cx * 16 + x
      const wz = cz * 16 + z
      const height = Math.floor(64 + 6 * Math.sin(wx / 11) + 5 * Math.cos(wz / 13) + 3 * Math.sin((wx + wz) / 5))
      const bottom = modern ? -64 : 0
      for (let y = bottom; y <= Math.max(height, sea); y++) {
        const pos = new Vec3(x, y, z)
        let name
        if (y <= bottom + (random() < 0.5 ? 1 : 2)) name = 'bedrock'
        else if (y < height - 4) {
          const r = random()
          if (r < 0.012) name = 'coal_ore'
          else if (r < 0.018) name = 'iron_ore'
          else if (r < 0.02 && y < 30) name = 'diamond_ore'
          else if (r < 0.03) name = 'gravel'
          else if (r < 0.05 && y < 40) name = 'air' // caves
          else name = modern && y < 0 ? 'deepslate' : 'stone'
        } else if (y < height) name = height <= sea + 1 ? 'sand' : 'dirt'
        else if (y === height) name = height <= sea + 1 ? 'sand' : 'grass_block'
        else name = 'water'
        if (name === 'air') continue
        setBlock(pos, name)
      }
      if (height > sea + 1 && random() < 0.02 && x > 1 && x < 14 && z > 1 && z < 14) {
        for (let t = 1; t <= 4; t++) setBlock(new Vec3(x, height + t, z), 'oak_log')
        for (let dx = -1; dx <= 1; dx++) {
          for (let dz = -1; dz <= 1; dz++) setBlock(new Vec3(x + dx, height + 5, z + dz), 'oak_leaves')
        }
      }
      // Before 1.14 light travels inside the block sections: light only the sections the
      // terrain occupies, so the air sections above stay empty and unsent (as a server does).
      const lightTop = modern ? minY + worldHeight : 96
      for (let y = Math.max(height, sea) + 1; y < lightTop; y++) {
        chunk.setSkyLight(new Vec3(x, y, z), 15)
      }
      chunk.setSkyLight(new Vec3(x, Math.max(height, sea), z), 12)
      if (chunk.setBiome && !modern) chunk.setBiome(new Vec3(x, 0, z), 1)
    }
  }
  void ores
  return chunk
}

function mapChunkPacket (version, registry, chunk, cx, cz) {
  const modern = version >= '1.18' || version === '1.20.4' || version === '1.21.4'
  if (version === '1.8.8') {
    // prismarine-chunk's 1.8 column reports every section; the terrain fills the lowest six.
    const bitMap = 0x3f
    return { x: cx, z: cz, groundUp: true, bitMap, chunkData: chunk.dump(bitMap) }
  }
  if (!modern) {
    return { x: cx, z: cz, groundUp: true, bitMap: chunk.getMask(), chunkData: chunk.dump(chunk.getMask()), blockEntities: [] }
  }
  const light = chunk.dumpLight()
  const heights = []
  for (let i = 0; i < 37; i++) heights.push([0, 0x1fc8f8fc >>> 0])
  return {
    x: cx,
    z: cz,
    heightmaps: { type: 'compound', name: '', value: { MOTION_BLOCKING: { type: 'longArray', value: heights } } },
    chunkData: chunk.dump(),
    blockEntities: [],
    ...light
  }
}

// The tags packet (1.13+): the real server's groups blocks, items, fluids and entity types by
// what they are; this one groups minecraft-data's registries by name suffix and material
// (`minecraft:planks`, `minecraft:stairs`, `minecraft:oak_things`...), tag names and id lists
// shaped like the real ones.
function tagsPacket (registry) {
  const groups = (entries) => {
    const tags = new Map()
    const add = (tag, id) => { if (!tags.has(tag)) tags.set(tag, []); tags.get(tag).push(id) }
    for (const e of entries) {
      const parts = e.name.split('_')
      if (parts.length > 1) {
        add(`minecraft:${parts[parts.length - 1]}s`, e.id)
        add(`minecraft:${parts[0]}_family`, e.id)
      }
      if (e.name.includes('ore')) add('minecraft:ores', e.id)
      if (e.hardness !== undefined && e.hardness >= 1.5) add('minecraft:mineable/pickaxe', e.id)
      if (e.material === 'mineable/axe' || e.name.includes('wood') || e.name.includes('log')) add('minecraft:mineable/axe', e.id)
    }
    return [...tags].filter(([, ids]) => ids.length > 1).map(([tagName, entries]) => ({ tagName, entries }))
  }
  return {
    tags: [
      { tagType: 'minecraft:block', tags: groups(registry.blocksArray) },
      { tagType: 'minecraft:item', tags: groups(registry.itemsArray) },
      { tagType: 'minecraft:entity_type', tags: groups(registry.entitiesArray) },
      { tagType: 'minecraft:fluid', tags: [{ tagName: 'minecraft:water', entries: [1, 2] }, { tagName: 'minecraft:lava', entries: [3, 4] }] }
    ]
  }
}

function loginPacket (version, registry, client, server) {
  const data = registry.loginPacket ?? {}
  if (version === '1.8.8' || version === '1.12.2') {
    return { entityId: client.id, gameMode: 0, dimension: 0, difficulty: 2, maxPlayers: server.maxPlayers, levelType: 'default', reducedDebugInfo: false }
  }
  return { ...data, entityId: client.id, isHardcore: false, gameMode: 0, previousGameMode: -1, maxPlayers: server.maxPlayers, viewDistance: 10, reducedDebugInfo: false, enableRespawnScreen: true, isDebug: false, isFlat: false }
}

function session (version, port, record) {
  return new Promise((resolve, reject) => {
    const registry = require('prismarine-registry')(version)
    const server = mc.createServer({ 'online-mode': false, host: '127.0.0.1', port, version, compressionThreshold: 0, motd: 'wirekit corpus' })
    const timer = setTimeout(() => { server.close(); reject(new Error(`${version}: session timed out`)) }, 60000)
    const scripted = new Set(['tags', 'map_chunk', 'update_light', 'chunk_batch_start', 'chunk_batch_finished', 'chat', 'system_chat', 'chat_message'])
    const source = (name) => scripted.has(name) ? 'peer-generated' : 'captured'
    server.on('playerJoin', (client) => {
      client.on('packet', (data, meta, buffer, full) => record(version, 1, meta.name, full, source(meta.name)))
      client.write('login', loginPacket(version, registry, client, server))
      if (version === '1.20.4' || version === '1.21.4') client.write('tags', tagsPacket(registry))
      client.write('position', { x: 8.5, y: 80, z: 8.5, yaw: 0, pitch: 0, flags: 0, teleportId: 1, dx: 0, dy: 0, dz: 0 })
      const batch = version === '1.20.4' || version === '1.21.4'
      if (batch) client.write('chunk_batch_start', {})
      let n = 0
      for (let cx = -CHUNK_RADIUS; cx <= CHUNK_RADIUS; cx++) {
        for (let cz = -CHUNK_RADIUS; cz <= CHUNK_RADIUS; cz++) {
          const chunk = buildChunk(version, registry, cx, cz)
          client.write('map_chunk', mapChunkPacket(version, registry, chunk, cx, cz))
          n++
        }
      }
      if (batch) client.write('chunk_batch_finished', { batchSize: n })
      let i = 0
      const chat = setInterval(() => {
        if (i < CHATS.length) {
          const component = chatComponent(i, CHATS[i])
          if (version === '1.8.8' || version === '1.12.2') client.write('chat', { message: JSON.stringify(component), position: 0 })
          else if (version === '1.20.4') client.write('system_chat', { content: toNbt(component), isActionBar: false })
          else client.write('system_chat', { content: toNbt(component), isActionBar: false })
          i++
        } else {
          clearInterval(chat)
          client.end('corpus done')
        }
      }, 30)
    })
    const client = mc.createClient({ host: '127.0.0.1', port, username: 'Steve', version, auth: 'offline' })
    client.on('packet', (data, meta, buffer, full) => {
      record(version, 0, meta.name, full, source(meta.name))
      if (meta.name === 'position' && meta.state === 'play') {
        client.write('position_look', { x: 8.5, y: 80, z: 8.5, yaw: 0, pitch: 0, onGround: true, flags: { onGround: true } })
        for (const text of CHATS.slice(0, 3)) {
          if (version === '1.8.8' || version === '1.12.2') client.write('chat', { message: text })
          else client.chat(text)
        }
      }
    })
    client.on('error', (e) => { clearTimeout(timer); server.close(); reject(e) })
    client.on('end', () => { clearTimeout(timer); server.close(); resolve() })
  })
}

async function main () {
  const out = process.argv[2]
  if (!out) { console.error('usage: capture.js OUT_DIR'); process.exit(2) }
  fs.mkdirSync(out, { recursive: true })
  const files = {}
  const manifest = ['file\tindex\tsource\tversion\tdirection\tpacket\tlength']
  const record = (version, dir, name, body, source) => {
    if (!body) return
    const file = `${source}.bin`
    files[file] ??= []
    const head = Buffer.alloc(8)
    const parts = [source, version, name].map((s) => Buffer.from(s))
    const pre = Buffer.concat(parts.flatMap((p) => [Buffer.from([p.length]), p]))
    head.writeUInt8(dir, 0)
    head.writeUInt32LE(body.length, 1)
    files[file].push(Buffer.concat([pre, head.subarray(0, 5), body]))
    manifest.push(`${file}\t${files[file].length - 1}\t${source}\t${version}\t${dir ? 'to-server' : 'to-client'}\t${name}\t${body.length}`)
  }
  let port = 25600 + Math.floor(Math.random() * 1000)
  for (const version of VERSIONS) {
    await session(version, port++, record)
    console.error(`${version}: done`)
  }
  for (const [file, recs] of Object.entries(files)) fs.writeFileSync(path.join(out, file), Buffer.concat(recs))
  fs.writeFileSync(path.join(out, 'manifest.tsv'), manifest.join('\n') + '\n')
  process.exit(0)
}

main().catch((e) => { console.error(e); process.exit(1) })
