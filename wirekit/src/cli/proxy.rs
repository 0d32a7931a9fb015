//! `wirekit proxy-header`: decode and encode PROXY protocol v1/v2 headers.
//!
//! `decode [--hex]` reads one header from stdin (raw bytes, or hex text with `--hex`) and prints
//! one JSON object: `version`, `command`, `family`, `transport`, `source`, `destination`, `tlvs`
//! (each with `type`, `name`, `length`, `hex` and, where the type has one, a decoded `value`),
//! `crc32c` (`"verified"` or `"absent"`), `crc32c_value`, `header_length` and
//! `trailing_bytes` (bytes after the header; stdin is read to its end, at most 64 MiB). A bad
//! or incomplete header prints the reason on stderr and exits 2.
//!
//! `encode --version 1|2 --src IP:PORT --dst IP:PORT [--local] [--authority S]
//! [--unique-id HEX] [--alpn S] [--tlv TYPE=HEX]... [--crc32c] [--pad-to N]` writes the header
//! to stdout (`--hex` writes hex text instead). `--local` writes a v2 LOCAL header, or v1's
//! `PROXY UNKNOWN\r\n`; then `--src`/`--dst` may be left out. Bad arguments (a `--pad-to` or
//! TLVs past the 65,551-byte v2 maximum among them) exit 2; a stdout that cannot be written
//! exits 1.

use std::io::{self, Write as _};

use super::ToolError;
use std::net::SocketAddr;
use std::process::ExitCode;

use serde_json::{Value, json};
use wirekit_core::Status;
use wirekit_core::proxy::tlv::{CLIENT_CERT_CONN, CLIENT_CERT_SESS, CLIENT_SSL, Ssl};
use wirekit_core::proxy::{
    self, Addresses, Command, Limits, ProxyHeader, RawTlv, Tlv, Transport, Version, v1, v2,
};

use super::frame::{parse_hex, read_input, to_hex};

/// `wirekit proxy-header` subcommands.
#[derive(clap::Subcommand)]
pub enum ProxyHeaderCommand {
    /// Read a PROXY header on stdin, print it as JSON (exit 2 if it is not valid).
    Decode(DecodeArgs),
    /// Write a PROXY header to stdout.
    Encode(EncodeArgs),
}

/// `wirekit proxy-header decode`.
#[derive(clap::Args)]
pub struct DecodeArgs {
    /// Input is hex text (whitespace ignored) rather than raw bytes.
    #[arg(long)]
    pub hex: bool,
    /// Largest header accepted, in bytes.
    #[arg(long, default_value_t = Limits::DEFAULT_MAX_HEADER_LEN)]
    pub max_header_len: usize,
}

/// `wirekit proxy-header encode`.
#[derive(clap::Args)]
pub struct EncodeArgs {
    /// Protocol version: 1 (text) or 2 (binary).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub version: u8,
    /// The client's address, IP:PORT (`[v6]:port` for IPv6).
    #[arg(long, required_unless_present = "local")]
    pub src: Option<SocketAddr>,
    /// The address the client connected to, IP:PORT.
    #[arg(long, required_unless_present = "local")]
    pub dst: Option<SocketAddr>,
    /// A LOCAL header (v2) or `PROXY UNKNOWN` (v1), as proxies send for health checks.
    #[arg(long)]
    pub local: bool,
    /// Datagram transport (v2 DGRAM, the per-datagram UDP form) instead of stream.
    #[arg(long)]
    pub dgram: bool,
    /// AUTHORITY TLV (v2), e.g. the TLS SNI host name.
    #[arg(long)]
    pub authority: Option<String>,
    /// UNIQUE_ID TLV (v2), hex, at most 128 bytes.
    #[arg(long)]
    pub unique_id: Option<String>,
    /// ALPN TLV (v2), e.g. `h2`.
    #[arg(long)]
    pub alpn: Option<String>,
    /// Any TLV (v2): TYPE (decimal or 0x..) = value in hex. Repeatable.
    #[arg(long = "tlv", value_name = "TYPE=HEX")]
    pub tlvs: Vec<String>,
    /// Add a CRC32C TLV with the header's checksum (v2).
    #[arg(long)]
    pub crc32c: bool,
    /// Pad with a NOOP TLV to at least this many bytes (v2; at most 65551, the largest v2
    /// header).
    #[arg(long)]
    pub pad_to: Option<usize>,
    /// Write hex text instead of raw bytes.
    #[arg(long)]
    pub hex: bool,
}

/// Runs a `wirekit proxy-header` subcommand.
pub fn run(cmd: ProxyHeaderCommand) -> ExitCode {
    let (what, result) = match cmd {
        ProxyHeaderCommand::Decode(args) => ("decode", decode(&args)),
        ProxyHeaderCommand::Encode(args) => ("encode", encode(&args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(&format!("wirekit proxy-header {what}")),
    }
}

fn decode(args: &DecodeArgs) -> Result<(), ToolError> {
    let input = read_input(args.hex)?;
    let limits = Limits {
        max_header_len: args.max_header_len,
    };
    let header = match proxy::parse(&input, &limits) {
        Ok(Status::Complete(h)) => h,
        Ok(Status::Partial(needed)) => {
            return Err(match needed {
                wirekit_core::Needed::Exactly(n) => {
                    format!("incomplete header: {n} more bytes needed")
                }
                wirekit_core::Needed::Unknown => "incomplete header".to_string(),
            }
            .into());
        }
        Err(e) => return Err(e.to_string().into()),
    };
    let mut out = describe(&header);
    out["trailing_bytes"] = json!(input.len() - header.len);
    writeln!(io::stdout(), "{out}").map_err(ToolError::Output)
}

/// The JSON description of a parsed header.
pub fn describe(h: &ProxyHeader<'_>) -> Value {
    let (family, source, destination) = match h.addresses {
        Addresses::Unspec => ("UNSPEC", Value::Null, Value::Null),
        Addresses::Inet { src, dst } => ("INET", json!(src.to_string()), json!(dst.to_string())),
        Addresses::Inet6 { src, dst } => ("INET6", json!(src.to_string()), json!(dst.to_string())),
        Addresses::Unix { src, dst } => (
            "UNIX",
            json!(String::from_utf8_lossy(proxy::unix_path(src))),
            json!(String::from_utf8_lossy(proxy::unix_path(dst))),
        ),
    };
    json!({
        "version": match h.version { Version::V1 => 1, Version::V2 => 2 },
        "command": match h.command {
            Command::Local => "LOCAL",
            Command::Proxy => "PROXY",
            Command::Unknown(_) => "UNKNOWN",
        },
        "family": family,
        "transport": match h.transport {
            Transport::Unspec => "UNSPEC",
            Transport::Stream => "STREAM",
            Transport::Dgram => "DGRAM",
            Transport::Unknown(_) => "UNKNOWN",
        },
        "source": source,
        "destination": destination,
        "tlvs": h.tlvs().map(describe_tlv).collect::<Vec<_>>(),
        "crc32c": if h.crc32c.is_some() { "verified" } else { "absent" },
        "crc32c_value": h.crc32c.map(|c| format!("0x{c:08x}")),
        "header_length": h.len,
    })
}

fn text(v: &[u8]) -> Value {
    match std::str::from_utf8(v) {
        Ok(s) => json!(s),
        Err(_) => Value::Null,
    }
}

fn describe_ssl(ssl: &Ssl<'_>) -> Value {
    json!({
        "client": ssl.client,
        "client_ssl": ssl.client & CLIENT_SSL != 0,
        "client_cert_conn": ssl.client & CLIENT_CERT_CONN != 0,
        "client_cert_sess": ssl.client & CLIENT_CERT_SESS != 0,
        "verify": ssl.verify,
        "tlvs": ssl.tlvs.map(describe_tlv).collect::<Vec<_>>(),
    })
}

fn describe_tlv(t: RawTlv<'_>) -> Value {
    let mut o = json!({
        "type": t.code,
        "name": t.kind().name(),
        "length": t.value.len(),
        "hex": to_hex(t.value),
    });
    let value = match t.decode() {
        Ok(Tlv::Alpn(v))
        | Ok(Tlv::Authority(v))
        | Ok(Tlv::Netns(v))
        | Ok(Tlv::SslVersion(v))
        | Ok(Tlv::SslCn(v))
        | Ok(Tlv::SslCipher(v))
        | Ok(Tlv::SslSigAlg(v))
        | Ok(Tlv::SslKeyAlg(v))
        | Ok(Tlv::SslGroup(v))
        | Ok(Tlv::SslSigScheme(v)) => text(v),
        Ok(Tlv::Crc32c(c)) => json!(format!("0x{c:08x}")),
        Ok(Tlv::Ssl(ssl)) => describe_ssl(&ssl),
        Ok(Tlv::AwsVpceId(id)) => json!({ "vpce_id": text(id) }),
        Ok(Tlv::AzureLinkId(id)) => json!({ "link_id": id }),
        Ok(Tlv::GcpPscConnectionId(id)) => json!({ "psc_connection_id": id }),
        // NOOP, UNIQUE_ID, CLIENT_CERT and unknown types: the hex says it all.
        _ => Value::Null,
    };
    if !value.is_null() {
        o["value"] = value;
    }
    o
}

fn parse_type(s: &str) -> Result<u8, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("bad TLV type {s:?} (0-255, decimal or 0x..)"))
}

fn encode(args: &EncodeArgs) -> Result<(), ToolError> {
    let v2_only = args.authority.is_some()
        || args.unique_id.is_some()
        || args.alpn.is_some()
        || !args.tlvs.is_empty()
        || args.crc32c
        || args.pad_to.is_some()
        || args.dgram;
    let addresses = match (args.local, args.src, args.dst) {
        (true, _, _) => Addresses::Unspec,
        (false, Some(SocketAddr::V4(src)), Some(SocketAddr::V4(dst))) => {
            Addresses::Inet { src, dst }
        }
        (false, Some(SocketAddr::V6(src)), Some(SocketAddr::V6(dst))) => {
            Addresses::Inet6 { src, dst }
        }
        (false, Some(_), Some(_)) => {
            return Err("--src and --dst must both be IPv4 or both IPv6".into());
        }
        _ => return Err("--src and --dst are required without --local".into()),
    };
    let bytes = if args.version == 1 {
        if v2_only {
            return Err("TLVs, --crc32c, --pad-to and --dgram need --version 2".into());
        }
        let b = v1::Builder::from_addresses(addresses).map_err(|e| e.to_string())?;
        let mut out = vec![0u8; b.encoded_len()];
        let n = b.encode(&mut out).map_err(|e| e.to_string())?;
        out.truncate(n);
        out
    } else {
        let unique_id = match &args.unique_id {
            Some(h) => Some(parse_hex(h.as_bytes())?),
            None => None,
        };
        if unique_id
            .as_ref()
            .is_some_and(|u| u.len() > proxy::tlv::MAX_UNIQUE_ID_LEN)
        {
            return Err("--unique-id is longer than 128 bytes".into());
        }
        let mut raw: Vec<(u8, Vec<u8>)> = Vec::new();
        for spec in &args.tlvs {
            let (ty, hex) = spec
                .split_once('=')
                .ok_or_else(|| format!("--tlv {spec:?}: expected TYPE=HEX"))?;
            raw.push((parse_type(ty)?, parse_hex(hex.as_bytes())?));
        }
        let mut tlvs: Vec<Tlv<'_>> = Vec::new();
        if let Some(a) = &args.alpn {
            tlvs.push(Tlv::Alpn(a.as_bytes()));
        }
        if let Some(a) = &args.authority {
            tlvs.push(Tlv::Authority(a.as_bytes()));
        }
        if let Some(u) = &unique_id {
            tlvs.push(Tlv::UniqueId(u));
        }
        tlvs.extend(raw.iter().map(|(t, v)| Tlv::Unknown(*t, v)));
        let b = if args.local {
            v2::Builder::local()
        } else {
            v2::Builder::proxy(addresses).transport(if args.dgram {
                Transport::Dgram
            } else {
                Transport::Stream
            })
        }
        .tlvs(&tlvs)
        .crc32c(args.crc32c)
        .pad_to(args.pad_to.unwrap_or(0));
        // Refused before the buffer is sized by it.
        if let Some(pad) = args.pad_to.filter(|&p| p > v2::MAX_LEN) {
            return Err(format!(
                "--pad-to {pad}: a v2 header is at most {} bytes",
                v2::MAX_LEN
            )
            .into());
        }
        if b.encoded_len() > v2::MAX_LEN {
            return Err(format!(
                "the header would be {} bytes; a v2 header is at most {}",
                b.encoded_len(),
                v2::MAX_LEN
            )
            .into());
        }
        let mut out = vec![0u8; b.encoded_len()];
        let n = b.encode(&mut out).map_err(|e| e.to_string())?;
        out.truncate(n);
        // What we write must read back (a raw --tlv can break the SSL or UNIQUE_ID rules).
        proxy::parse(
            &out,
            &Limits {
                max_header_len: v2::MAX_LEN,
            },
        )
        .map_err(|e| format!("the TLVs given make an invalid header: {e}"))?;
        out
    };
    let mut stdout = std::io::stdout().lock();
    let written = if args.hex {
        writeln!(stdout, "{}", to_hex(&bytes))
    } else {
        stdout.write_all(&bytes)
    };
    written
        .and_then(|()| stdout.flush())
        .map_err(ToolError::Output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pad_to: Option<usize>) -> EncodeArgs {
        EncodeArgs {
            version: 2,
            src: Some("192.0.2.1:5000".parse().unwrap()),
            dst: Some("192.0.2.2:25565".parse().unwrap()),
            local: false,
            dgram: false,
            authority: None,
            unique_id: None,
            alpn: None,
            tlvs: Vec::new(),
            crc32c: false,
            pad_to,
            hex: true,
        }
    }

    #[test]
    fn pad_to_past_the_v2_maximum_is_refused_before_the_buffer_is_sized() {
        for pad in [usize::MAX, v2::MAX_LEN + 1] {
            let err = encode(&args(Some(pad))).unwrap_err();
            assert_eq!(
                err.input(),
                Some(&*format!(
                    "--pad-to {pad}: a v2 header is at most 65551 bytes"
                ))
            );
        }
    }

    #[test]
    fn tlvs_past_the_v2_maximum_are_refused() {
        let mut a = args(None);
        a.tlvs = vec![format!("0xe0={}", "00".repeat(40_000)); 2];
        let err = encode(&a).unwrap_err();
        let err = err.input().unwrap();
        assert!(err.contains("a v2 header is at most 65551"), "{err}");
    }
}
