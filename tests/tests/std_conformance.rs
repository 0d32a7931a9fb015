//! The service conformance suite against `wirekit serve` (in-process, on a loopback port). The
//! firmware's rig runs the same suite against the firmware in QEMU.

use std::time::Duration;

use wirekit_core::proxy::policy::{Policy, ProxyConfig};
use wirekit_core::service;
use wirekit_std::server::ServeOptions;
use wirekit_tests::conformance::{ProxySupport, Target, assert_hostile_counted, run_conformance};
use wirekit_tests::serve::TestServer;

fn options(proxy: Policy) -> ServeOptions {
    ServeOptions {
        service: service::Config::new()
            .with_max_packet_len(4096)
            .with_header_timeout(Duration::from_secs(5).into())
            .with_proxy(ProxyConfig::new(proxy)),
        ..ServeOptions::default()
    }
}

/// Every hostile connection of the suite, and nothing else, was counted as an error.
fn assert_every_hostile_counted(server: &TestServer, hostile: u64) {
    assert_hostile_counted(|| server.stats().errors, hostile, Duration::from_secs(5));
}

#[test]
fn serve_conforms_without_proxy() {
    let server = TestServer::start(options(Policy::Skip));
    let hostile = run_conformance(&Target::new(server.addr));
    assert_every_hostile_counted(&server, hostile);
    server.stop();
}

#[test]
fn serve_conforms_with_proxy_use() {
    let server = TestServer::start(options(Policy::Use));
    let mut target = Target::new(server.addr).with_proxy(ProxySupport::Optional);
    target.derive_cases = 1;
    let hostile = run_conformance(&target);
    assert_every_hostile_counted(&server, hostile);
}

#[test]
fn serve_conforms_with_proxy_require() {
    let server = TestServer::start(options(Policy::Require));
    let mut target = Target::new(server.addr).with_proxy(ProxySupport::Required);
    target.cases = 60;
    target.derive_cases = 1;
    let hostile = run_conformance(&target);
    assert_every_hostile_counted(&server, hostile);
}

#[test]
fn serve_conforms_with_a_greeting_threshold() {
    let server = TestServer::start(ServeOptions {
        service: service::Config::new()
            .with_max_packet_len(4096)
            .with_compression_threshold(128)
            .with_proxy(ProxyConfig::new(Policy::Use)),
        ..ServeOptions::default()
    });
    let mut target = Target::new(server.addr)
        .with_proxy(ProxySupport::Optional)
        .with_greeting(128);
    target.cases = 100;
    target.derive_cases = 1;
    let hostile = run_conformance(&target);
    assert_every_hostile_counted(&server, hostile);
}
