//! An in-process `wirekit serve` for tests: [`ServerThread`] on a 2-worker runtime, stopped on
//! drop, with the counters as a [`Stats`] snapshot.

use std::net::SocketAddr;

use wirekit_core::service::{Counters, wire::Stats};
use wirekit_std::server::{ServeOptions, ServerThread};

/// A running server.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    server: ServerThread,
}

impl TestServer {
    /// Starts a server with `options` (listening on a free loopback port when the options say
    /// port 0) on a 2-worker runtime.
    pub fn start(options: ServeOptions) -> TestServer {
        let server = ServerThread::builder(options)
            .workers(2)
            .spawn()
            .expect("server started");
        TestServer {
            addr: server.addr(),
            server,
        }
    }

    /// The server's counters now.
    pub fn stats(&self) -> Stats {
        self.server.counters().snapshot()
    }

    /// Shuts the server down gracefully and waits for it.
    pub fn stop(self) {
        self.server.stop().expect("server stopped cleanly");
    }
}
