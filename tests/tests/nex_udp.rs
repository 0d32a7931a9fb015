//! The NEX UDP workers over loopback: the table's bounds and idle expiry seen from the
//! socket, every drop counted under its reason, and several `SO_REUSEPORT` workers sharing one
//! port.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use wirekit_core::prudp::Version;
use wirekit_core::time::{self, Instant};
use wirekit_nex::{
    CloseReason, ConnectionKey, Counters, CountersSnapshot, DatagramHandler, DropReason, Open,
    Outbox, TableLimits, Verdict, Worker, WorkerConfig, bind_workers,
};
use wirekit_tests::nex_worker::loopback_worker;

/// Echoes; a first datagram whose body starts with `!` is refused, one saying `bye` closes
/// its connection, one saying `bad` is a protocol drop (code 7).
#[derive(Default)]
struct Echo {
    closed: Vec<(ConnectionKey, CloseReason)>,
}

impl DatagramHandler for Echo {
    type State = ();

    fn version(&self) -> Version {
        Version::V1
    }

    fn open(&mut self, _: &ConnectionKey, d: &[u8], _: Instant, _: &mut Outbox) -> Open<()> {
        match d.get(8) {
            Some(b'!') => Open::Refuse(DropReason::Refused),
            _ => Open::Accept(()),
        }
    }

    fn datagram(
        &mut self,
        key: &ConnectionKey,
        _: &mut (),
        d: &[u8],
        _: Instant,
        out: &mut Outbox,
    ) -> Verdict {
        match &d[8..] {
            b"bye" => Verdict::Close,
            b"bad" => Verdict::Drop(DropReason::Protocol(7)),
            _ => match out.push(key.peer, d) {
                Ok(()) => Verdict::Keep,
                Err(r) => Verdict::Drop(r),
            },
        }
    }

    fn evicting(&mut self, key: &ConnectionKey, (): &mut (), _: Instant, out: &mut Outbox) {
        let _ = out.push(key.peer, EVICTED);
    }

    fn closed(&mut self, key: &ConnectionKey, (): (), reason: CloseReason) {
        self.closed.push((*key, reason));
    }
}

/// What [`Echo`] tells an evicted peer.
const EVICTED: &[u8] = b"evicted";

/// Runs an [`Echo`] worker with `config` on a current-thread runtime while `client`, given
/// the server's address, runs on a thread of its own; returns the worker and its counters once
/// the client is done.
fn serve_while(
    config: &WorkerConfig,
    client: impl FnOnce(SocketAddr) + Send + 'static,
) -> (Worker<Echo>, CountersSnapshot) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let counters = Arc::new(Counters::default());
    let mut worker = loopback_worker(&rt, config, Echo::default(), &counters);
    let server = worker.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let client = std::thread::spawn(move || {
        client(server);
        let _ = tx.send(());
    });
    rt.block_on(worker.run_until(async {
        let _ = rx.await;
    }))
    .unwrap();
    client.join().unwrap();
    (worker, counters.snapshot())
}

/// The sources of one IPv4 /24 together hold at most `max_per_network` connections, seen from
/// the socket: a third source of 127.0.0.0/24 is dropped under its own reason, a source of
/// 127.0.1.0/24 is served (Linux routes all of 127/8 to loopback).
#[test]
fn one_network_cannot_fill_the_table() {
    let config = WorkerConfig {
        limits: TableLimits {
            max_connections: 8,
            max_per_source: 1,
            max_per_network: 2,
            idle_timeout: time::Duration::from_secs(30),
            fair_share: false,
        },
        ..WorkerConfig::default()
    };
    let (worker, s) = serve_while(&config, |server| {
        echo(&peer("127.0.0.1"), server, &packet(15, b"one"));
        echo(&peer("127.0.0.2"), server, &packet(15, b"two"));
        let third = peer("127.0.0.3");
        third.send_to(&packet(15, b"three"), server).unwrap();
        echo(&peer("127.0.1.1"), server, &packet(15, b"four"));
    });
    assert_eq!(s.dropped(DropReason::NetworkLimit), 1);
    assert_eq!(s.dropped_total(), 1);
    assert_eq!(s.opened, 3);
    assert_eq!(worker.table().len(), 3);
}

/// A table filled by one network is shared with another, seen from the socket: sources of
/// 127.0.1.0/24 take the places of 127.0.0.0/24's least recently heard-from connections until
/// both hold two, then a third is dropped as `table_full`; the evicted are closed as such, and
/// what the handler queued for them when evicting them reaches them.
#[test]
fn a_full_table_is_shared_between_networks() {
    let config = WorkerConfig {
        limits: TableLimits {
            max_connections: 4,
            max_per_source: 1,
            max_per_network: 4,
            idle_timeout: time::Duration::from_secs(30),
            fair_share: true,
        },
        ..WorkerConfig::default()
    };
    let (worker, s) = serve_while(&config, |server| {
        let first: Vec<UdpSocket> = (1..=4).map(|h| peer(&format!("127.0.0.{h}"))).collect();
        for (i, p) in first.iter().enumerate() {
            echo(p, server, &packet(15, &[b'a' + i as u8]));
        }
        // Heard from 127.0.0.1 and .2 again: .3 and .4 are the least recently heard-from.
        echo(&first[0], server, &packet(15, b"again"));
        echo(&first[1], server, &packet(15, b"again"));
        echo(&peer("127.0.1.1"), server, &packet(15, b"e"));
        echo(&peer("127.0.1.2"), server, &packet(15, b"f"));
        peer("127.0.1.3")
            .send_to(&packet(15, b"g"), server)
            .unwrap();
        // The first network's remaining two are still served.
        echo(&first[0], server, &packet(15, b"still"));
        echo(&first[1], server, &packet(15, b"still"));
        // The evicted were told, through the handler's `evicting`.
        for evicted in &first[2..] {
            let mut buf = [0u8; 64];
            let (n, from) = evicted.recv_from(&mut buf).expect("told it was evicted");
            assert_eq!((&buf[..n], from), (EVICTED, server));
        }
    });
    assert_eq!(s.dropped(DropReason::TableFull), 1);
    assert_eq!(s.dropped_total(), 1);
    assert_eq!((s.opened, s.closed, s.evicted), (6, 0, 2));
    assert_eq!(worker.table().len(), 4);
    let evicted: Vec<(String, CloseReason)> = worker
        .handler()
        .closed
        .iter()
        .map(|(k, r)| (k.peer.ip().to_string(), *r))
        .collect();
    let want = [
        ("127.0.0.3".to_string(), CloseReason::Evicted),
        ("127.0.0.4".to_string(), CloseReason::Evicted),
    ];
    assert_eq!(evicted, want);
}

/// Accepts everything and, at its first tick, sends each connection one `tick` datagram.
struct TickOnce;

impl DatagramHandler for TickOnce {
    type State = bool;

    fn version(&self) -> Version {
        Version::V1
    }

    fn open(&mut self, _: &ConnectionKey, _: &[u8], _: Instant, _: &mut Outbox) -> Open<bool> {
        Open::Accept(false)
    }

    fn datagram(
        &mut self,
        _: &ConnectionKey,
        _: &mut bool,
        _: &[u8],
        _: Instant,
        _: &mut Outbox,
    ) -> Verdict {
        Verdict::Keep
    }

    fn tick(
        &mut self,
        key: &ConnectionKey,
        sent: &mut bool,
        _: Instant,
        out: &mut Outbox,
    ) -> Verdict {
        if *sent {
            return Verdict::Keep;
        }
        match out.push(key.peer, b"tick") {
            Ok(()) => {
                *sent = true;
                Verdict::Keep
            }
            Err(r) => Verdict::Drop(r),
        }
    }

    fn closed(&mut self, _: &ConnectionKey, _: bool, _: CloseReason) {}
}

/// A tick with more replies due than the outbox holds sends them all, none dropped: the
/// outbox is sent whenever it runs low and the tick goes on. (With one pass into one outbox,
/// the connections in the table's first slots took its 4 places, and the others' replies
/// were dropped as `OutboxFull` at that tick: 40 drops here before the last of the 20 went
/// out, ticks later.)
#[test]
fn a_tick_with_more_replies_than_the_outbox_holds_sends_them_all() {
    const PEERS: usize = 20;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = WorkerConfig {
        outbox_slots: 4,
        tick: time::Duration::from_millis(20),
        limits: TableLimits {
            max_per_source: 64,
            max_per_network: 64,
            ..TableLimits::default()
        },
        ..WorkerConfig::default()
    };
    let counters = Arc::new(Counters::default());
    let mut worker = loopback_worker(&rt, &config, TickOnce, &counters);
    let server = worker.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let client = std::thread::spawn(move || {
        let peers: Vec<UdpSocket> = (0..PEERS).map(|_| peer("127.0.0.1")).collect();
        for p in &peers {
            p.send_to(&packet(15, b"hello"), server).unwrap();
        }
        let got = peers
            .iter()
            .filter(|p| {
                p.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut buf = [0u8; 64];
                matches!(p.recv_from(&mut buf), Ok((4, _))) && &buf[..4] == b"tick"
            })
            .count();
        let _ = tx.send(());
        got
    });
    rt.block_on(worker.run_until(async {
        let _ = rx.await;
    }))
    .unwrap();
    let got = client.join().unwrap();
    assert_eq!(got, PEERS);
    let s = counters.snapshot();
    assert_eq!(s.dropped(DropReason::OutboxFull), 0);
    assert_eq!(s.opened, PEERS as u64);
}

fn packet(port: u8, body: &[u8]) -> Vec<u8> {
    let mut d = vec![0xEA, 0xD0, 1, 0, 0, 0, 0xA0 | port, 0xA1];
    d.extend_from_slice(body);
    d
}

fn peer(ip: &str) -> UdpSocket {
    let s = UdpSocket::bind((ip, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Sends and waits for the echo.
fn echo(s: &UdpSocket, server: SocketAddr, d: &[u8]) {
    s.send_to(d, server).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = s.recv_from(&mut buf).expect("echo");
    assert_eq!(&buf[..n], d);
}

#[test]
fn bounds_drops_and_idle_expiry() {
    let config = WorkerConfig {
        limits: TableLimits {
            max_connections: 3,
            max_per_source: 2,
            max_per_network: 3,
            // Long enough that none expires while the steps below run on a loaded machine.
            idle_timeout: time::Duration::from_millis(2000),
            fair_share: false,
        },
        tick: time::Duration::from_millis(10),
        ..WorkerConfig::default()
    };
    let (worker, s) = serve_while(&config, |server| {
        let a = peer("127.0.0.1");
        let b = peer("127.0.0.2");
        let c = peer("127.0.0.3");
        echo(&a, server, &packet(15, b"one"));
        echo(&a, server, &packet(14, b"two"));
        // A third connection from 127.0.0.1 (another virtual port): over its source limit.
        a.send_to(&packet(13, b"three"), server).unwrap();
        echo(&b, server, &packet(15, b"four"));
        // The table holds three: 127.0.0.3 does not fit.
        c.send_to(&packet(15, b"five"), server).unwrap();
        // Not v1, empty, too big, refused by the handler, dropped by the connection.
        c.send_to(b"hello", server).unwrap();
        c.send_to(b"", server).unwrap();
        c.send_to(&packet(15, &[0; 1600]), server).unwrap();
        a.send_to(&packet(15, b"bad"), server).unwrap();
        // Closing one makes room: a connection the handler refuses does not take it (asked
        // only once there is room), and 127.0.0.3 fits.
        b.send_to(&packet(15, b"bye"), server).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        b.send_to(&packet(13, b"!no"), server).unwrap();
        echo(&c, server, &packet(15, b"six"));
        // Then all go idle.
        std::thread::sleep(Duration::from_millis(3500));
    });
    assert_eq!(s.datagrams_in, 12);
    assert_eq!(s.datagrams_out, 4);
    assert_eq!(s.dropped(DropReason::SourceLimit), 1);
    assert_eq!(s.dropped(DropReason::TableFull), 1);
    assert_eq!(s.dropped(DropReason::Unroutable), 2);
    assert_eq!(s.dropped(DropReason::Oversized), 1);
    assert_eq!(s.dropped(DropReason::Refused), 1);
    assert_eq!(s.dropped(DropReason::Protocol(7)), 1);
    assert_eq!(s.dropped_total(), 7);
    assert_eq!((s.opened, s.closed, s.expired), (4, 1, 3));
    assert!(worker.table().is_empty());
    let reasons: Vec<(String, CloseReason)> = worker
        .handler()
        .closed
        .iter()
        .map(|(k, r)| (k.peer.ip().to_string(), *r))
        .collect();
    // The two the table had no room for never reached the handler's open: nothing to close.
    let want = [
        ("127.0.0.2", CloseReason::Closed),
        ("127.0.0.1", CloseReason::Idle),
        ("127.0.0.1", CloseReason::Idle),
        ("127.0.0.3", CloseReason::Idle),
    ];
    let want: Vec<(String, CloseReason)> = want.iter().map(|(i, r)| (i.to_string(), *r)).collect();
    assert_eq!(reasons, want);
}

#[test]
fn reuseport_workers_share_one_port() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (workers, counters) = {
        let _g = rt.enter();
        // All peers share 127.0.0.1 and the per-source limit is per worker: room for all 24 on
        // whichever worker the kernel hashes them to.
        let config = WorkerConfig {
            limits: TableLimits {
                max_per_source: 24,
                max_per_network: 24,
                ..TableLimits::default()
            },
            ..WorkerConfig::default()
        };
        bind_workers("127.0.0.1:0".parse().unwrap(), 2, &config, |_| {
            Echo::default()
        })
        .unwrap()
    };
    let server = workers[0].local_addr().unwrap();
    assert_eq!(workers[1].local_addr().unwrap(), server);
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut w| {
            let mut rx = stop.subscribe();
            rt.spawn(async move {
                w.run_until(async move {
                    let _ = rx.recv().await;
                })
                .await
                .unwrap();
                w.table().len()
            })
        })
        .collect();
    let peers: Vec<UdpSocket> = (0..24).map(|_| peer("127.0.0.1")).collect();
    for (i, p) in peers.iter().enumerate() {
        let d = packet(15, format!("peer {i}").as_bytes());
        p.send_to(&d, server).unwrap();
        let mut buf = [0u8; 2048];
        match p.recv_from(&mut buf) {
            Ok((n, _)) => assert_eq!(&buf[..n], &d[..]),
            Err(e) => panic!(
                "peer {i} ({}): {e}; counters {:?}",
                p.local_addr().unwrap(),
                counters.snapshot()
            ),
        }
    }
    stop.send(()).unwrap();
    let held: usize = tasks.into_iter().map(|t| rt.block_on(t).unwrap()).sum();
    assert_eq!(held, peers.len());
    let s = counters.snapshot();
    assert_eq!((s.datagrams_in, s.datagrams_out), (24, 24));
}

/// Counts a connection's datagrams and answers once per receive batch, at its end, with
/// `[port, count]`; a datagram saying `bye` closes its connection.
struct Tally;

impl DatagramHandler for Tally {
    type State = (u8, u8);

    fn version(&self) -> Version {
        Version::V1
    }

    fn open(
        &mut self,
        key: &ConnectionKey,
        _: &[u8],
        _: Instant,
        _: &mut Outbox,
    ) -> Open<(u8, u8)> {
        Open::Accept((key.port, 0))
    }

    fn datagram(
        &mut self,
        _: &ConnectionKey,
        state: &mut (u8, u8),
        d: &[u8],
        _: Instant,
        _: &mut Outbox,
    ) -> Verdict {
        state.1 += 1;
        match &d[8..] {
            b"bye" => Verdict::Close,
            _ => Verdict::Keep,
        }
    }

    fn batch_end(
        &mut self,
        key: &ConnectionKey,
        state: &mut (u8, u8),
        _: Instant,
        out: &mut Outbox,
    ) {
        out.push(key.peer, &[state.0, state.1]).unwrap();
        state.1 = 0;
    }
}

#[test]
fn batch_end_runs_once_per_connection_a_batch_reached() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let counters = Arc::new(Counters::default());
    let mut worker = loopback_worker(&rt, &WorkerConfig::default(), Tally, &counters);
    let server = worker.local_addr().unwrap();
    let client = peer("127.0.0.1");
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    // Queued before the worker runs, so one receive batch (16 slots) takes all ten.
    for port in [15, 14, 15, 13, 15, 14, 15, 13, 15, 14] {
        client.send_to(&packet(port, b"hi"), server).unwrap();
    }
    client.send_to(&packet(12, b"bye"), server).unwrap();
    rt.block_on(worker.run_until(async {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }))
    .unwrap();
    let mut replies = Vec::new();
    let mut buf = [0u8; 64];
    while let Ok((n, _)) = client.recv_from(&mut buf) {
        replies.push(buf[..n].to_vec());
    }
    replies.sort();
    // Ports 13, 14 and 15 once each with their counts; port 12 closed, so no batch end.
    assert_eq!(replies, [vec![13, 2], vec![14, 3], vec![15, 5]]);
    let s = counters.snapshot();
    assert_eq!((s.datagrams_in, s.datagrams_out), (11, 3));
}
