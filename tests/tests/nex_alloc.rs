//! The NEX UDP worker allocates nothing per datagram in steady state: 4,000 datagrams from 16
//! connections (8 peer sockets, 2 virtual ports each) after warm-up, through the real receive
//! loop (`Worker::run_until`: quinn-udp's batched receive, routing, the connection table
//! lookup, an echo handler, the send), counted with the counting allocator on the worker's
//! thread. The same holds with the real PRUDP server handler: signed, encrypted reliable DATA
//! with ACKs both ways through the core's connection, RMC dispatch and an echo protocol. And
//! an eviction (a full table making room for another network's connection, the handler told)
//! allocates nothing either.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use wirekit::alloc_count::{
    AllocStats, CountingAlloc, assert_counting_installed, count_allocations,
};
use wirekit_core::prudp::Version;
use wirekit_core::time::Instant;
use wirekit_nex::{
    ConnectionKey, Counters, DatagramHandler, DropReason, Open, Outbox, Verdict, Worker,
    WorkerConfig,
};
use wirekit_tests::nex_worker::loopback_worker;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Echoes every datagram to its sender; counts datagrams per connection. With `closing`, a
/// datagram whose 13th byte is 1 ends its connection after the echo. An evicted connection's
/// peer is told with a datagram `[0xBE, port]` from the `evicting` hook.
struct Echo {
    closing: bool,
}

impl DatagramHandler for Echo {
    type State = u64;

    fn version(&self) -> Version {
        Version::V1
    }

    fn open(&mut self, _: &ConnectionKey, _: &[u8], _: Instant, _: &mut Outbox) -> Open<u64> {
        Open::Accept(0)
    }

    fn datagram(
        &mut self,
        key: &ConnectionKey,
        seen: &mut u64,
        datagram: &[u8],
        _: Instant,
        out: &mut Outbox,
    ) -> Verdict {
        *seen += 1;
        if let Err(reason) = out.push(key.peer, datagram) {
            return Verdict::Drop(reason);
        }
        if self.closing && datagram.get(12) == Some(&1) {
            Verdict::Close
        } else {
            Verdict::Keep
        }
    }

    fn evicting(&mut self, key: &ConnectionKey, _: &mut u64, _: Instant, out: &mut Outbox) {
        let _ = out.push(key.peer, &[0xBE, key.port]);
    }
}

const PEERS: usize = 8;

/// Runs `worker` on `rt` until `client`, on a thread of its own, returns: the allocations on
/// the worker's thread meanwhile.
fn run_while<H: DatagramHandler>(
    rt: &tokio::runtime::Runtime,
    worker: &mut Worker<H>,
    client: impl FnOnce() + Send + 'static,
) -> AllocStats {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let t = std::thread::spawn(move || {
        client();
        let _ = tx.send(());
    });
    let stop = async {
        let _ = rx.await;
    };
    let (result, stats) = count_allocations(|| rt.block_on(worker.run_until(stop)));
    result.unwrap();
    t.join().expect("client");
    stats
}

/// A v1-shaped datagram from virtual port (10, `port`) with a numbered body.
fn datagram(port: u8, i: u32, buf: &mut [u8; 64]) -> usize {
    buf[..6].copy_from_slice(&[0xEA, 0xD0, 1, 0, 0, 0]);
    buf[6] = 0xA0 | port;
    buf[7] = 0xA1;
    buf[8..12].copy_from_slice(&i.to_le_bytes());
    let len = 12 + (i as usize % 50);
    buf[12..len].fill(i as u8);
    len
}

/// Sends `rounds` datagrams from each peer (alternating two virtual ports), each waited for
/// and checked, then signals `done`.
fn client(server: SocketAddr, peers: Arc<Vec<UdpSocket>>, from: u32, rounds: u32) {
    let mut out = [0u8; 64];
    let mut back = [0u8; 128];
    for i in from..from + rounds {
        for peer in peers.iter() {
            let n = datagram(14 + (i % 2) as u8, i, &mut out);
            peer.send_to(&out[..n], server).unwrap();
            let (m, src) = peer.recv_from(&mut back).expect("echo within the timeout");
            assert_eq!((src, &back[..m]), (server, &out[..n]));
        }
    }
}

#[test]
fn worker_allocates_nothing_per_datagram() {
    assert_counting_installed();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let counters = Arc::new(Counters::default());
    let mut worker = loopback_worker(
        &rt,
        &WorkerConfig::default(),
        Echo { closing: false },
        &counters,
    );
    let server = worker.local_addr().unwrap();
    let peers: Arc<Vec<UdpSocket>> = Arc::new(
        (0..PEERS)
            .map(|_| {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s
            })
            .collect(),
    );
    let mut run = |from: u32, rounds: u32| {
        let p = peers.clone();
        run_while(&rt, &mut worker, move || client(server, p, from, rounds))
    };
    run(0, 50);
    let before = counters.snapshot();
    let rounds = 500;
    let stats = run(50, rounds);
    let after = counters.snapshot();
    let datagrams = u64::from(rounds) * PEERS as u64;
    assert_eq!(after.datagrams_in - before.datagrams_in, datagrams);
    assert_eq!(after.datagrams_out - before.datagrams_out, datagrams);
    assert_eq!(after.opened, 2 * PEERS as u64);
    assert_eq!(after.dropped_total(), 0);
    assert_eq!(after.dropped(DropReason::TableFull), 0);
    assert_eq!(worker.table().len(), 2 * PEERS);
    assert_eq!(
        stats.count, 0,
        "{} allocations ({} bytes) over {datagrams} datagrams",
        stats.count, stats.bytes
    );
}

/// One datagram from `port` (tagged 1 to close the connection after the echo), its echo
/// received and checked; a `[0xBE, port]` notice of eviction arriving first is returned.
fn exchange(server: SocketAddr, socket: &UdpSocket, port: u8, tag: u8) -> Option<u8> {
    let mut out = [0u8; 64];
    let n = datagram(port, 7, &mut out);
    out[12] = tag;
    socket.send_to(&out[..n], server).unwrap();
    let mut back = [0u8; 128];
    let mut notice = None;
    loop {
        let (m, src) = socket
            .recv_from(&mut back)
            .expect("a reply within the timeout");
        assert_eq!(src, server);
        match &back[..m] {
            [0xBE, p] => notice = Some(*p),
            echo => {
                assert_eq!(echo, &out[..n]);
                return notice;
            }
        }
    }
}

/// Evictions allocate nothing either: with the table full of one network's connections, a
/// connection from another network takes the place of the least recently heard-from one (the
/// table's `make_room`, the handler's `evicting` hook queueing a notice, `closed`), then
/// closes; the evicted peer reopens into the freed place. 20 such rounds after warm-up, within
/// the eviction burst, counted on the worker's thread.
#[test]
fn evictions_allocate_nothing() {
    use wirekit_nex::TableLimits;

    assert_counting_installed();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let counters = Arc::new(Counters::default());
    let config = WorkerConfig {
        limits: TableLimits {
            max_connections: 8,
            fair_share: true,
            ..TableLimits::default()
        },
        ..WorkerConfig::default()
    };
    let mut worker = loopback_worker(&rt, &config, Echo { closing: true }, &counters);
    let server = worker.local_addr().unwrap();
    // Two /24 networks on loopback.
    let bind = |ip: &str| {
        let s = UdpSocket::bind((ip, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    };
    let crowd = bind("127.0.1.1");
    let newcomer = bind("127.0.2.1");
    let mut run = |body: Box<dyn FnOnce() + Send>| run_while(&rt, &mut worker, body);
    // One round: the newcomer evicts one of the crowd's 8, is echoed and closes; the crowd's
    // evicted port is told and reopens.
    let rounds = |crowd: UdpSocket, newcomer: UdpSocket, n: u32| {
        Box::new(move || {
            for _ in 0..n {
                assert_eq!(exchange(server, &newcomer, 9, 1), None);
                let mut back = [0u8; 8];
                let (m, _) = crowd.recv_from(&mut back).expect("the eviction notice");
                let [0xBE, port] = back[..m] else {
                    panic!("not a notice: {:?}", &back[..m]);
                };
                assert_eq!(exchange(server, &crowd, port, 0), None);
            }
        }) as Box<dyn FnOnce() + Send>
    };
    let c = crowd.try_clone().unwrap();
    run(Box::new(move || {
        for port in 0..8 {
            assert_eq!(exchange(server, &c, port, 0), None);
        }
    }));
    assert_eq!(counters.snapshot().opened, 8);
    run(rounds(
        crowd.try_clone().unwrap(),
        newcomer.try_clone().unwrap(),
        4,
    ));
    let before = counters.snapshot();
    let evictions = 20;
    let stats = run(rounds(crowd, newcomer, evictions));
    let after = counters.snapshot();
    assert_eq!(after.evicted - before.evicted, u64::from(evictions));
    assert_eq!(after.opened - before.opened, 2 * u64::from(evictions));
    assert_eq!(after.dropped_total(), 0, "{after:?}");
    assert_eq!(worker.table().len(), 8);
    assert_eq!(
        stats.count, 0,
        "{} allocations ({} bytes) over {evictions} evictions",
        stats.count, stats.bytes
    );
}

/// Protocol 0x65: method 1 echoes its parameters.
struct EchoProtocol;

impl wirekit_nex::RmcProtocol for EchoProtocol {
    fn protocol_id(&self) -> u16 {
        0x65
    }
    fn call(&mut self, call: &wirekit_nex::Call<'_>, out: &mut [u8]) -> wirekit_nex::Reply {
        match out.get_mut(..call.body.len()) {
            Some(o) => {
                o.copy_from_slice(call.body);
                wirekit_nex::Reply::Success(call.body.len())
            }
            None => wirekit_nex::Reply::NotImplemented,
        }
    }
}

/// A PRUDP client over a blocking socket: the core's client connection.
struct PrudpClient {
    conn: wirekit_core::prudp::conn::Connection<Vec<u8>>,
    socket: UdpSocket,
    server: SocketAddr,
    epoch: std::time::Instant,
}

impl PrudpClient {
    /// Drives the connection until it reports something: `Some(message)` or `None` for
    /// Connected.
    fn next(&mut self) -> Option<Vec<u8>> {
        use wirekit_core::prudp::conn::Event;
        let mut out = [0u8; 1500];
        let mut buf = [0u8; 1500];
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "no event: {:?}",
                self.conn
            );
            let now = Instant::from_micros(self.epoch.elapsed().as_micros() as u64);
            if self.conn.next_timeout().is_some_and(|t| t <= now) {
                self.conn.handle_timeout(now);
            }
            while let Some(t) = self.conn.poll_transmit(now, &mut out) {
                self.socket.send_to(&out[..t.len], self.server).unwrap();
            }
            match self.conn.poll_event() {
                Some(Event::Connected) => return None,
                Some(Event::Message { data, .. }) => return Some(data.to_vec()),
                Some(e) => panic!("unexpected {e:?}"),
                None => {}
            }
            if let Ok((n, _)) = self.socket.recv_from(&mut buf) {
                let now = Instant::from_micros(self.epoch.elapsed().as_micros() as u64);
                self.conn.handle(&buf[..n], now);
            }
        }
    }

    /// `rounds` echo calls of `sizes` cycled, each checked.
    fn calls(&mut self, from: u32, rounds: u32, sizes: &[usize]) {
        use wirekit_core::nex::{Method, Protocol, RmcFormat, RmcKind, RmcMessage};
        for i in from..from + rounds {
            let body: Vec<u8> = (0..sizes[i as usize % sizes.len()])
                .map(|k| (k as u32 ^ i) as u8)
                .collect();
            let m = RmcMessage::request(Protocol::Id(0x65), i, Method::Id(1), &body);
            let mut bytes = vec![0; m.encoded_len(RmcFormat::Packed).unwrap()];
            m.encode(RmcFormat::Packed, &mut bytes).unwrap();
            self.conn.send(0, &bytes).unwrap();
            let reply = self.next().expect("a response");
            let r = RmcMessage::parse(&reply, RmcFormat::Packed, 1 << 16)
                .unwrap()
                .complete()
                .unwrap();
            assert_eq!(r.message.call_id, i);
            assert_eq!(
                r.message.kind,
                RmcKind::Response {
                    method: Method::Id(1),
                    body: &body
                }
            );
        }
    }
}

#[test]
fn prudp_server_allocates_nothing_per_reliable_data() {
    use wirekit_core::prudp::VirtualPort;
    use wirekit_core::prudp::conn::{ClientRandom, Connection};
    use wirekit_core::prudp::crypto::client_connection_signature;
    use wirekit_nex::server::{HandlerConfig, PrudpHandler, Role, ServerStats};

    assert_counting_installed();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = wirekit_nex::serve::connection_config(b"ridfebb9", Version::V1, true);
    let stats = Arc::new(ServerStats::default());
    let mut dispatcher = wirekit_nex::Dispatcher::new();
    dispatcher.register(Box::new(EchoProtocol));
    let handler = PrudpHandler::new(HandlerConfig {
        role: Role::Authentication,
        config,
        secret: [0x5a; 32],
        secure: None,
        dispatcher,
        stats: stats.clone(),
    });
    let counters = Arc::new(Counters::default());
    let mut worker = loopback_worker(&rt, &WorkerConfig::default(), handler, &counters);
    let server = worker.local_addr().unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let mut client_config = config;
    client_config.local_port = VirtualPort::new(10, 15);
    client_config.supported_functions = 4;
    let client = PrudpClient {
        conn: Connection::client(
            client_config,
            VirtualPort::new(10, 1),
            client_connection_signature(Version::V1, server),
            vec![0; Connection::<Vec<u8>>::workspace_len(&client_config)],
            Instant::ZERO,
            ClientRandom {
                session_id: 0x11,
                initial_unreliable: 1,
            },
            None,
        )
        .unwrap(),
        socket,
        server,
        epoch: std::time::Instant::now(),
    };
    // 64 and 256 bytes in one fragment, 2000 in two.
    let sizes = [64, 256, 2000];
    // Past the warm-up, datagrams the server drops or answers without a connection come in
    // the window too: garbage from another port, and a SYN from a client that never connects
    // (answered statelessly).
    const GARBAGE: usize = 40;
    let hostile = move |client: &PrudpClient| {
        let rogue = UdpSocket::bind("127.0.0.1:0").unwrap();
        rogue
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        for k in 0..GARBAGE {
            let junk: Vec<u8> = (0..40 + k).map(|i| (i * 31 + k) as u8).collect();
            rogue.send_to(&junk, client.server).unwrap();
        }
        let mut fresh = Connection::<Vec<u8>>::client(
            client_config,
            VirtualPort::new(10, 1),
            client_connection_signature(Version::V1, client.server),
            vec![0; Connection::<Vec<u8>>::workspace_len(&client_config)],
            Instant::ZERO,
            ClientRandom {
                session_id: 0x22,
                initial_unreliable: 1,
            },
            None,
        )
        .unwrap();
        let mut syn = [0u8; 1500];
        let t = fresh.poll_transmit(Instant::ZERO, &mut syn).expect("a SYN");
        rogue.send_to(&syn[..t.len], client.server).unwrap();
        let mut answer = [0u8; 1500];
        let (n, _) = rogue.recv_from(&mut answer).expect("the SYN answered");
        assert!(n > 0);
    };
    let mut run = |mut client: PrudpClient, warm: bool, from: u32, rounds: u32| {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let t = std::thread::spawn(move || {
            if warm {
                assert_eq!(client.next(), None, "connected");
            }
            client.calls(from, rounds, &sizes);
            if !warm {
                hostile(&client);
            }
            let _ = tx.send(());
            client
        });
        let stop = async {
            let _ = rx.await;
        };
        let (result, alloc) = count_allocations(|| rt.block_on(worker.run_until(stop)));
        result.unwrap();
        (t.join().expect("client"), alloc)
    };
    let (client, warm) = run(client, true, 0, 30);
    // Opening the connection allocated its workspace on this thread: the count sees it.
    assert!(
        warm.bytes as usize >= Connection::<Vec<u8>>::workspace_len(&config),
        "{warm:?}"
    );
    let before = counters.snapshot();
    let rounds = 300;
    let (client, alloc) = run(client, false, 30, rounds);
    let after = counters.snapshot();
    let datagrams = after.datagrams_in - before.datagrams_in;
    assert!(datagrams >= u64::from(rounds) * 2, "{datagrams} datagrams");
    // The garbage, each dropped and counted; nothing of the real client's.
    assert_eq!(
        after.dropped_total() - before.dropped_total(),
        GARBAGE as u64,
        "{after:?}"
    );
    assert_eq!(
        stats.requests.load(std::sync::atomic::Ordering::Relaxed),
        330
    );
    assert_eq!(
        client.conn.counters().total(),
        0,
        "{:?}",
        client.conn.counters()
    );
    assert_eq!(
        alloc.count, 0,
        "{} allocations ({} bytes) over {datagrams} datagrams",
        alloc.count, alloc.bytes
    );
}
