//! The secure-connection protocol (11): Register, which gives the client a connection id and
//! tells it its public StationURL as the server sees it, and TestConnectivity.
//!
//! The ticket itself is checked earlier, at CONNECT, by the core's listener
//! ([`SecureServer`](wirekit_core::prudp::conn::SecureServer)) under the server key derived
//! once at start; a call reaching this protocol comes from an authenticated PID.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use wirekit_core::limit::LogLimit;
use wirekit_core::nex::protocols::{
    METHOD_REGISTER, RegisterRequest, RegisterResponse, SECURE_CONNECTION_PROTOCOL,
};
use wirekit_core::nex::{Context, ResultCode, StationUrl, UrlValue, decode, encode};
use wirekit_core::time::Duration;

use crate::rmc::{Call, INVALID_ARGUMENT, Reply, RmcProtocol};

/// Secure-connection method 5: TestConnectivity (no parameters, no return values).
pub const METHOD_TEST_CONNECTIVITY: u32 = 5;

/// Protocol 11 for one worker; the connection ids come from a counter all workers share.
#[derive(Debug)]
pub struct SecureProtocol {
    context: Context,
    next_connection_id: Arc<AtomicU32>,
    /// The limit on warnings about Register calls whose parameters did not decode.
    invalid_logs: LogLimit,
}

impl SecureProtocol {
    /// The protocol, numbering connections from `next_connection_id` (shared by workers).
    pub fn new(context: Context, next_connection_id: Arc<AtomicU32>) -> Self {
        SecureProtocol {
            context,
            next_connection_id,
            invalid_logs: LogLimit::new(5, Duration::from_secs(10)),
        }
    }
}

impl RmcProtocol for SecureProtocol {
    fn protocol_id(&self) -> u16 {
        SECURE_CONNECTION_PROTOCOL
    }

    fn call(&mut self, call: &Call<'_>, out: &mut [u8]) -> Reply {
        let ctx = call.context(self.context);
        match call.method {
            METHOD_REGISTER => {
                if let Err(e) = decode::<RegisterRequest<'_>>(call.body, ctx) {
                    return call.invalid(&mut self.invalid_logs, e);
                }
                // Zero is no connection id; skip it when the counter wraps.
                let mut id = self.next_connection_id.fetch_add(1, Ordering::Relaxed);
                if id == 0 {
                    id = self.next_connection_id.fetch_add(1, Ordering::Relaxed);
                }
                let mut ip = [0u8; 64];
                let ip = format_ip(call.peer.ip(), &mut ip);
                let params = [
                    ("address", UrlValue::Str(ip)),
                    ("port", UrlValue::Int(u64::from(call.peer.port()))),
                    ("type", UrlValue::Int(3)),
                ];
                let mut url = [0u8; 128];
                let Ok(n) = StationUrl::format("prudp", &params, &mut url) else {
                    return Reply::Error(ResultCode::CORE_UNKNOWN);
                };
                let Ok(public_station) = std::str::from_utf8(&url[..n])
                    .map_err(|_| ())
                    .and_then(|s| StationUrl::parse(s).map_err(|_| ()))
                else {
                    return Reply::Error(ResultCode::CORE_UNKNOWN);
                };
                let response = RegisterResponse {
                    result: ResultCode::SUCCESS,
                    connection_id: id,
                    public_station,
                };
                match encode(&response, ctx, out) {
                    Ok(n) => Reply::Success(n),
                    Err(_) => Reply::Error(ResultCode::CORE_UNKNOWN),
                }
            }
            METHOD_TEST_CONNECTIVITY if call.body.is_empty() => Reply::Success(0),
            METHOD_TEST_CONNECTIVITY => Reply::Error(INVALID_ARGUMENT),
            _ => Reply::NotImplemented,
        }
    }
}

/// Writes `ip` in text into `buf` without allocating.
fn format_ip(ip: IpAddr, buf: &mut [u8; 64]) -> &str {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    // An address's text is at most 45 bytes: it always fits.
    let _ = write!(cursor, "{}", ip.to_canonical());
    let n = cursor.position() as usize;
    std::str::from_utf8(&buf[..n]).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use wirekit_core::nex::List;
    use wirekit_core::time::Instant;

    #[test]
    fn register_numbers_connections_and_reports_the_public_address() {
        let ctx = Context::DEFAULT;
        let mut p = SecureProtocol::new(ctx, Arc::new(AtomicU32::new(1)));
        let local = StationUrl::parse("prudp:/address=10.0.0.2;port=0;type=2").unwrap();
        let urls = [local];
        let mut req = [0u8; 128];
        let n = encode(
            &RegisterRequest {
                urls: List::from_slice(&urls),
            },
            ctx,
            &mut req,
        )
        .unwrap();
        let call = Call {
            peer: SocketAddr::from(([192, 0, 2, 7], 40000)),
            pid: Some(1000),
            cid: 1,
            minor_version: 0,
            protocol: 11,
            method: METHOD_REGISTER,
            call_id: 1,
            body: &req[..n],
            now: Instant::ZERO,
        };
        let mut out = [0u8; 256];
        for expected in [1, 2] {
            let Reply::Success(m) = p.call(&call, &mut out) else {
                panic!()
            };
            let r: RegisterResponse<'_> = decode(&out[..m], ctx).unwrap();
            assert_eq!(r.connection_id, expected);
            assert_eq!(
                r.public_station.as_str(),
                "prudp:/address=192.0.2.7;port=40000;type=3"
            );
        }
        let bad = Call {
            body: &[9, 9],
            ..call
        };
        assert_eq!(p.call(&bad, &mut out), Reply::Error(INVALID_ARGUMENT));
        let test = Call {
            method: METHOD_TEST_CONNECTIVITY,
            body: &[],
            ..call
        };
        assert_eq!(p.call(&test, &mut out), Reply::Success(0));
    }
}
