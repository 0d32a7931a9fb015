//! An in-process `wirekit serve` for tests: its own thread and runtime, stopped on drop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio_util::sync::CancellationToken;
use wirekit_core::service::{AtomicCounters, Counters, wire::Stats};
use wirekit_std::server::{ServeOptions, Server};

/// A running server.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    counters: Arc<AtomicCounters>,
    shutdown: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts a server with `options` (listening on a free loopback port when the options say
    /// port 0) on a 2-worker runtime.
    pub fn start(options: ServeOptions) -> TestServer {
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let server = Server::bind(options).await.expect("bind");
                tx.send((server.local_addr(), server.counters())).unwrap();
                server.run(token).await.expect("serve");
            });
        });
        let (addr, counters) = rx.recv().expect("server started");
        TestServer {
            addr,
            counters,
            shutdown,
            thread: Some(thread),
        }
    }

    /// The server's counters now.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// Shuts the server down gracefully and waits for it.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
