//! The filter API through the running proxy: `wirekit_proxy` built as a library, an inspect
//! route, and a [`Filter`] that rewrites one chat message (into the buffer the proxy lends) and
//! drops another; the upstream must get the rewrite, not the dropped one, and everything else
//! as sent.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wirekit_core::Status;
use wirekit_core::frame::mc::{FrameDecoder, encode_frame, split_packet};
use wirekit_core::minecraft::ids::{Direction, State};
use wirekit_core::minecraft::{encode_string, read_string};
use wirekit_core::varint::encode_varint;
use wirekit_proxy::filter::{Filter, FilterAction, PacketView};
use wirekit_proxy::inspect::FilterFactory;
use wirekit_proxy::{Mode, Proxy, Route, Settings};
use wirekit_tests::mcproxy_process::{WAIT, login_bytes, login_success, read_packet};

/// 1.12.2's serverbound play Chat Message.
const CHAT: i32 = 0x02;

/// Upper-cases chat that starts with `shout:`, drops chat that says `drop me`; counts the
/// calls that found bytes in the lent buffer (an earlier rewrite's, left for this call).
struct Moderator {
    seen: Arc<AtomicU64>,
    dirty: Arc<AtomicU64>,
}

impl Filter for Moderator {
    fn filter(&mut self, p: &PacketView<'_>, rewrite: &mut [u8]) -> FilterAction {
        if (p.state, p.direction, p.id) != (State::Play, Direction::Serverbound, CHAT) {
            return FilterAction::Pass;
        }
        self.seen.fetch_add(1, Ordering::Relaxed);
        if rewrite[..64].iter().any(|&b| b != 0) {
            self.dirty.fetch_add(1, Ordering::Relaxed);
        }
        let Ok((text, _)) = read_string(p.data, 256) else {
            return FilterAction::Pass;
        };
        if text == "drop me" {
            return FilterAction::Drop;
        }
        if !text.starts_with("shout:") {
            return FilterAction::Pass;
        }
        let loud = text.to_ascii_uppercase();
        let n = encode_varint(CHAT, rewrite).unwrap();
        let m = encode_string(&loud, 256, &mut rewrite[n..]).unwrap();
        FilterAction::Rewrite(n + m)
    }
}

fn chat(text: &str) -> Vec<u8> {
    let mut body = vec![CHAT as u8];
    let mut s = [0u8; 800];
    let n = encode_string(text, 256, &mut s).unwrap();
    body.extend_from_slice(&s[..n]);
    let mut out = vec![0u8; body.len() + 5];
    let n = encode_frame(&body, &mut out).unwrap();
    out.truncate(n);
    out
}

/// Reads frames off a stream, keeping what follows the one returned.
struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    fn next(&mut self, s: &mut TcpStream) -> (i32, Vec<u8>) {
        let mut chunk = [0u8; 4096];
        loop {
            if let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(&self.buf) {
                let p = split_packet(f.body).unwrap();
                let out = (p.id, p.data.to_vec());
                self.buf.drain(..f.consumed);
                return out;
            }
            let n = s.read(&mut chunk).expect("reading a frame");
            assert!(n > 0, "closed before a whole frame");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A library proxy with one inspect route, the default, to `upstream` and `factory`'s
/// filters, on a runtime of its own (one worker): kept alive with it, its address, handle and
/// stop.
struct Running {
    _rt: tokio::runtime::Runtime,
    addr: SocketAddr,
    handle: wirekit_proxy::ProxyHandle,
    shutdown: CancellationToken,
}

fn running_proxy(upstream: SocketAddr, factory: FilterFactory) -> Running {
    let mut route = Route::new(Vec::new(), vec![upstream]);
    route.default = true;
    route.mode = Mode::Inspect;
    let settings = Settings {
        listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
        routes: vec![route],
        ..Settings::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let (addr, handle) = rt.block_on(async move {
        let proxy = Proxy::bind(settings).await.unwrap();
        assert!(proxy.set_filter(factory), "the first filter is taken");
        let addr = proxy.local_addrs()[0];
        let handle = proxy.handle();
        tokio::spawn(proxy.run(stop));
        (addr, handle)
    });
    Running {
        _rt: rt,
        addr,
        handle,
        shutdown,
    }
}

#[test]
fn a_filter_rewrites_into_the_lent_buffer_and_drops_through_the_running_proxy() {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let dirty = Arc::new(AtomicU64::new(0));
    let factory: FilterFactory = {
        let (seen, dirty) = (seen.clone(), dirty.clone());
        Arc::new(move |_route: &str| {
            Box::new(Moderator {
                seen: seen.clone(),
                dirty: dirty.clone(),
            })
        })
    };
    let proxy = running_proxy(upstream.local_addr().unwrap(), factory);
    let addr = proxy.addr;

    let mut client = TcpStream::connect(addr).unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    let opening = login_bytes("filter.test", "Tester");
    client.write_all(&opening).unwrap();
    let mut up = wirekit_tests::mcproxy_process::accept_within(&upstream);
    up.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = vec![0u8; opening.len()];
    up.read_exact(&mut got).unwrap();
    assert_eq!(got, opening);
    up.write_all(&login_success("Tester")).unwrap();
    assert_eq!(read_packet(&mut client).0, 0x02, "Login Success relayed");

    for text in ["hello", "shout: hello", "drop me", "bye"] {
        client.write_all(&chat(text)).unwrap();
    }
    let mut frames = Frames { buf: Vec::new() };
    let mut texts = Vec::new();
    for _ in 0..3 {
        let (id, data) = frames.next(&mut up);
        assert_eq!(id, CHAT);
        texts.push(read_string(&data, 256).unwrap().0.to_owned());
    }
    assert_eq!(texts, ["hello", "SHOUT: HELLO", "bye"]);
    assert_eq!(
        seen.load(Ordering::Relaxed),
        4,
        "the filter saw every chat message"
    );
    // The buffer is the thread's, lent to every connection's filter: a rewrite is not left
    // in it for the next call (of this connection or another) to find or forward.
    assert_eq!(
        dirty.load(Ordering::Relaxed),
        0,
        "a call found an earlier rewrite in the lent buffer"
    );
    // Nothing else arrived: the dropped message is gone, not late.
    up.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut rest = [0u8; 64];
    assert!(
        frames.buf.is_empty() && up.read(&mut rest).is_err(),
        "more than the three messages reached the upstream"
    );
    proxy.shutdown.cancel();
}

/// Drops every Login Start: a control packet, which a filter may not drop.
struct DropsLogins;

impl Filter for DropsLogins {
    fn filter(&mut self, p: &PacketView<'_>, _rewrite: &mut [u8]) -> FilterAction {
        if (p.state, p.direction, p.id) == (State::Login, Direction::Serverbound, 0x00) {
            return FilterAction::Drop;
        }
        FilterAction::Pass
    }
}

/// A filter's own error before login (it drops the Login Start, a control packet) closes the
/// connection as the filter's: counted as a close, not as the client's rejection, and the
/// upstream never connected to.
#[test]
fn a_filters_error_on_login_start_is_a_close_not_the_clients_refusal() {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let factory: FilterFactory = Arc::new(|_route: &str| Box::new(DropsLogins));
    let proxy = running_proxy(upstream.local_addr().unwrap(), factory);
    let (addr, metrics) = (proxy.addr, proxy.handle.metrics());
    let mut client = TcpStream::connect(addr).unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    client
        .write_all(&login_bytes("filter.test", "Tester"))
        .unwrap();
    // Closed (after a Disconnect, which may or may not be read before the end).
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    let deadline = std::time::Instant::now() + WAIT;
    let text = loop {
        let text = metrics.render();
        if text.contains("wirekit_proxy_closed_total{reason=\"filter_error\"} 1") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !text.contains("wirekit_proxy_rejections_total{reason=\"filter_error\"}"),
        "{text}"
    );
    upstream.set_nonblocking(true).unwrap();
    assert!(upstream.accept().is_err(), "the upstream was connected to");
    proxy.shutdown.cancel();
}
