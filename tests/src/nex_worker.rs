//! A `wirekit-nex` UDP worker on a loopback port, for the tests that drive one.

use std::sync::Arc;

use wirekit_nex::{Counters, DatagramHandler, Worker, WorkerConfig, bind_sockets};

/// One worker with `handler` on a loopback port, registered with `rt`, counting into
/// `counters`.
pub fn loopback_worker<H: DatagramHandler>(
    rt: &tokio::runtime::Runtime,
    config: &WorkerConfig,
    handler: H,
    counters: &Arc<Counters>,
) -> Worker<H> {
    let _guard = rt.enter();
    let socket = bind_sockets("127.0.0.1:0".parse().unwrap(), 1)
        .unwrap()
        .remove(0);
    Worker::new(socket, config, handler, counters.clone()).unwrap()
}
