//! The NEX UDP worker allocates nothing per datagram in steady state: 4,000 datagrams from 16
//! connections (8 peer sockets, 2 virtual ports each) after warm-up, through the real receive
//! loop (`Worker::run_until`: quinn-udp's batched receive, routing, the connection table
//! lookup, an echo handler, the send), counted with the counting allocator on the worker's
//! thread.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit_core::prudp::Version;
use wirekit_core::time::Instant;
use wirekit_nex::{
    ConnectionKey, Counters, DatagramHandler, DropReason, Open, Outbox, Verdict, Worker,
    WorkerConfig, bind_sockets,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Echoes every datagram to its sender; counts datagrams per connection.
struct Echo;

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
        match out.push(key.peer, datagram) {
            Ok(()) => Verdict::Keep,
            Err(reason) => Verdict::Drop(reason),
        }
    }
}

const PEERS: usize = 8;

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
    let mut worker = {
        let _guard = rt.enter();
        let socket = bind_sockets("127.0.0.1:0".parse().unwrap(), 1)
            .unwrap()
            .remove(0);
        Worker::new(socket, &WorkerConfig::default(), Echo, counters.clone()).unwrap()
    };
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
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let p = peers.clone();
        let t = std::thread::spawn(move || {
            client(server, p, from, rounds);
            let _ = tx.send(());
        });
        let stop = async {
            let _ = rx.await;
        };
        let (result, stats) = count_allocations(|| rt.block_on(worker.run_until(stop)));
        result.unwrap();
        t.join().expect("client");
        stats
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
