//! `wirekit frame`: decode and encode packet frames, the protocol's `xxd`.
//!
//! `decode` reads a byte stream on stdin and prints one JSON line per frame:
//! `{"offset":..,"len":..,"id":..,"data_hex":".."}` (`offset` of the frame in the stream, `len`
//! the length field's value; `id` only for VarInt framing). On malformed or truncated input it
//! prints the frames before the fault, then the offset and the reason on stderr, and exits 2.
//!
//! `decode` works as the stream comes (a live capture piped in): each frame is printed once it
//! is whole, and what is held is one partial frame, never past the frame maximum.
//!
//! `encode` frames stdin's bytes as one packet on stdout; stdin longer than the framing takes
//! (2,097,151 bytes for VarInt framing, 8 MiB of data compressed, 32 MiB for u32 lengths, the
//! field's maximum for u8 and u16) is refused once that much is read.
//!
//! With `--threshold N` (VarInt framing only) both use the compressed format of a connection
//! after Set Compression: `decode` inflates compressed packets and adds `"data_len"` (the Data
//! Length field, 0 for a packet sent uncompressed) and `"compressed"` to each line; `encode`
//! compresses at `--level` (zlib numbering, 0 to 9) when the packet is at least N bytes.

use std::io::{self, Read, Write};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use wirekit_core::Status;
use wirekit_core::frame::EncodeError;
use wirekit_core::frame::compressed::{
    CompressedDecoder, CompressedEncoder, CompressedLimits, max_encoded_len,
};
use wirekit_core::frame::fixed::{Endian, LengthPrefixed, PKTCONN_MAX_LEN, Width};
use wirekit_core::frame::mc::{self, Decoded, FrameDecoder, Phase};
use wirekit_core::minecraft::{Error as McError, legacy};
use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_SERVER};

/// `wirekit frame` subcommands.
#[derive(Subcommand)]
pub enum FrameCommand {
    /// Read a byte stream on stdin, print one JSON line per frame.
    Decode(DecodeArgs),
    /// Frame stdin's bytes as one packet on stdout.
    Encode(EncodeArgs),
}

/// The framing on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Framing {
    /// Minecraft: VarInt length, VarInt packet ID, data.
    Varint,
    /// pktconn: u32 little-endian length, payload.
    U32le,
    /// tokio-util LengthDelimitedCodec's default: u32 big-endian length, payload.
    U32be,
    /// u16 little-endian length, payload.
    U16le,
    /// u16 big-endian length, payload.
    U16be,
    /// u8 length, payload.
    U8,
}

impl Framing {
    /// The fixed-width configuration, or `None` for VarInt framing.
    pub fn fixed(self, max: u32) -> Option<LengthPrefixed> {
        let (w, e) = match self {
            Framing::Varint => return None,
            Framing::U32le => (Width::U32, Endian::Little),
            Framing::U32be => (Width::U32, Endian::Big),
            Framing::U16le => (Width::U16, Endian::Little),
            Framing::U16be => (Width::U16, Endian::Big),
            Framing::U8 => (Width::U8, Endian::Big),
        };
        Some(LengthPrefixed::new(w, e, max))
    }
}

/// Arguments of `wirekit frame decode`.
#[derive(Args)]
pub struct DecodeArgs {
    /// Framing of the input stream.
    #[arg(long, value_enum, default_value_t = Framing::Varint)]
    pub framing: Framing,
    /// Largest frame length accepted (default: 2097151 for varint, 32 MiB otherwise).
    #[arg(long)]
    pub max_frame: Option<u32>,
    /// Input is hex text (whitespace ignored) rather than raw bytes.
    #[arg(long)]
    pub hex: bool,
    /// The stream is the start of a server-side connection: report a legacy ping (0xFE ...),
    /// told from a frame whose length field starts with 0xFE as a server tells them.
    #[arg(long)]
    pub handshake: bool,
    /// Compressed format with this threshold (negative: the format of compression off).
    /// A compressed packet declaring fewer bytes than the threshold is rejected, as a vanilla
    /// server does.
    #[arg(long, allow_hyphen_values = true)]
    pub threshold: Option<i32>,
}

/// Arguments of `wirekit frame encode`.
#[derive(Args)]
pub struct EncodeArgs {
    /// Packet ID (VarInt framing; required there, not allowed otherwise).
    #[arg(long)]
    pub id: Option<i32>,
    /// Framing to write.
    #[arg(long, value_enum, default_value_t = Framing::Varint)]
    pub framing: Framing,
    /// Data is hex text on stdin (whitespace ignored) rather than raw bytes.
    #[arg(long)]
    pub hex: bool,
    /// Compressed format: compress when ID + data is at least this long (negative: the
    /// format of compression off).
    #[arg(long, allow_hyphen_values = true)]
    pub threshold: Option<i32>,
    /// zlib level for compressed packets: 0 stored, 1 quick, 2 fast, 3 medium, 4-5 lazy, 6 default, 7 thorough, 8-9 best.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u8).range(0..=9))]
    pub level: u8,
}

/// Runs a `wirekit frame` subcommand.
pub fn run(cmd: FrameCommand) -> ExitCode {
    match cmd {
        FrameCommand::Decode(args) => decode(&args),
        FrameCommand::Encode(args) => encode(&args),
    }
}

/// Reads all of stdin, as raw bytes or hex text, refusing more than `max` bytes (decoded):
/// what is held is at most `max` bytes and one read, whatever stdin holds.
pub fn read_input_at_most(hex: bool, max: usize) -> Result<Vec<u8>, String> {
    let mut input = Input::stdin(hex);
    let mut bytes = Vec::new();
    loop {
        let more = input.fill(&mut bytes)?;
        if bytes.len() > max {
            return Err(format!("input longer than the {max} bytes it may be"));
        }
        if !more {
            return Ok(bytes);
        }
    }
}

/// Reads all of stdin, as raw bytes or hex text (at most 64 MiB).
pub fn read_input(hex: bool) -> Result<Vec<u8>, String> {
    read_input_at_most(hex, 64 << 20)
}

/// A byte stream read a chunk at a time: raw, or hex text decoded on the way.
pub struct Input<R> {
    reader: R,
    hex: Option<HexDecoder>,
    chunk: Vec<u8>,
    /// A hex error found after bytes of the same read were decoded: reported by the next
    /// call, once those bytes have been used.
    error: Option<String>,
}

/// Bytes asked of the reader at a time.
const CHUNK: usize = 64 << 10;

impl Input<io::StdinLock<'static>> {
    /// Stdin, hex text when `hex`.
    pub fn stdin(hex: bool) -> Self {
        Input::new(io::stdin().lock(), hex)
    }
}

impl<R: Read> Input<R> {
    /// `reader`'s bytes, hex text when `hex`.
    pub fn new(reader: R, hex: bool) -> Self {
        Input {
            reader,
            hex: hex.then(HexDecoder::default),
            chunk: vec![0u8; CHUNK],
            error: None,
        }
    }

    /// Appends the next chunk's bytes to `out`: `false` at the end of the stream (an odd
    /// hex digit left over is an error then).
    pub fn fill(&mut self, out: &mut Vec<u8>) -> Result<bool, String> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        loop {
            let n = match self.reader.read(&mut self.chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("reading stdin: {e}")),
            };
            if n == 0 {
                if let Some(hex) = &self.hex {
                    hex.finish()?;
                }
                return Ok(false);
            }
            let text = &self.chunk[..n];
            match &mut self.hex {
                Some(hex) => {
                    let before = out.len();
                    if let Err(e) = hex.feed(text, out) {
                        // The bytes before the fault are the stream's: used first.
                        if out.len() == before {
                            return Err(e);
                        }
                        self.error = Some(e);
                        return Ok(true);
                    }
                    // All whitespace: read on rather than report no progress.
                    if out.len() == before {
                        continue;
                    }
                }
                None => out.extend_from_slice(text),
            }
            return Ok(true);
        }
    }
}

/// Hex text to bytes, fed in pieces: ASCII whitespace ignored, every other character an ASCII
/// hex digit (no sign, no `0x`), two per byte.
#[derive(Default)]
pub struct HexDecoder {
    high: Option<u8>,
    /// Text bytes seen, for the error's position.
    at: usize,
}

impl HexDecoder {
    /// Decodes `text` onto `out`.
    pub fn feed(&mut self, text: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        for &c in text {
            let at = self.at;
            self.at += 1;
            if c.is_ascii_whitespace() {
                continue;
            }
            let nibble = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ if c.is_ascii_graphic() => {
                    return Err(format!("not hex: {:?} at byte {at}", char::from(c)));
                }
                _ => return Err(format!("not hex: byte 0x{c:02x} at byte {at}")),
            };
            match self.high.take() {
                Some(h) => out.push(h << 4 | nibble),
                None => self.high = Some(nibble),
            }
        }
        Ok(())
    }

    /// At the end of the text: an odd digit left over is an error.
    pub fn finish(&self) -> Result<(), String> {
        match self.high {
            Some(_) => Err("hex input has an odd number of digits".into()),
            None => Ok(()),
        }
    }
}

/// Parses hex text, ignoring ASCII whitespace: every other character must be an ASCII hex
/// digit (no sign, no `0x`), two per byte.
pub fn parse_hex(text: &[u8]) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::with_capacity(text.len() / 2);
    let mut hex = HexDecoder::default();
    hex.feed(text, &mut bytes)?;
    hex.finish()?;
    Ok(bytes)
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Whether a connection opening with `0xFE` is a legacy server-list ping (`Some(Ok(Some(n)))`,
/// its length) or a frame whose length field starts with that byte (`Some(Ok(None))`), as the
/// core's detector decides: as soon as the bytes in say which, else (`None` until then) once
/// the stream has `ended`, when a 1.6 ping cut short counts as the 1.4 ping it starts with,
/// as vanilla servers (and the proxy) answer it.
fn legacy_ping(input: &[u8], ended: bool) -> Option<Result<Option<usize>, McError>> {
    match legacy::detect(input) {
        Ok(Status::Complete((_, n))) => Some(Ok(Some(n))),
        Ok(Status::Partial(_)) if ended => Some(match legacy::detect_final(input) {
            Ok((_, n)) => Ok(Some(n)),
            Err(McError::Truncated) => Ok(Some(input.len())),
            Err(McError::NotLegacyPing) => Ok(None),
            Err(e) => Err(e),
        }),
        Ok(Status::Partial(_)) => None,
        Err(McError::NotLegacyPing) => Some(Ok(None)),
        Err(e) => Some(Err(e)),
    }
}

/// The stream ended inside a frame.
fn fail_truncated(offset: usize, needed: wirekit_core::Needed, present: usize) -> ExitCode {
    fail(
        offset,
        &format!(
            "truncated frame: stream ends {} byte(s) short ({present} of the frame present)",
            needed.at_least()
        ),
    )
}

fn fail(offset: usize, reason: &str) -> ExitCode {
    eprintln!("wirekit frame decode: offset {offset}: {reason}");
    ExitCode::from(2)
}

/// What one decode step over the buffered input gave.
enum Step {
    /// A frame: its length on the wire and its line.
    Line(usize, serde_json::Value),
    /// More input needed.
    Partial(wirekit_core::Needed),
    /// A legacy ping, told apart once the stream's end (or enough of it) is in.
    LegacyPing,
    /// Malformed.
    Fail(String),
}

/// Decodes stdin as it comes: each frame is printed once it is whole, and what is buffered is
/// one partial frame (at most the frame maximum, checked before the rest is asked for) and one
/// read's worth, whatever the stream's length.
fn decode(args: &DecodeArgs) -> ExitCode {
    if args.threshold.is_some() && (args.framing != Framing::Varint || args.handshake) {
        return fail(
            0,
            "--threshold applies to --framing varint after the handshake only",
        );
    }
    if args.handshake && args.framing != Framing::Varint {
        return fail(
            0,
            "--handshake applies to --framing varint only (the legacy ping is Minecraft's)",
        );
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let max_varint = args.max_frame.map_or(mc::MAX_FRAME_LEN, |m| m as usize);
    let fixed = args
        .framing
        .fixed(args.max_frame.unwrap_or(PKTCONN_MAX_LEN));
    let mut mc = if args.handshake {
        FrameDecoder::handshaking()
    } else {
        FrameDecoder::new()
    }
    .with_max_frame_len(max_varint);
    let compressed = args
        .threshold
        .map(|t| CompressedDecoder::server(t).with_max_frame_len(max_varint));
    let mut inflater = compressed.map(|_| Box::new(Inflater::new()));
    let mut scratch = match compressed {
        Some(_) => vec![0u8; CompressedLimits::VANILLA.scratch_len()],
        None => Vec::new(),
    };

    let mut input = Input::stdin(args.hex);
    // `buf[start..]` is what is not decoded yet; `base` is `buf[0]`'s offset in the stream.
    let mut buf: Vec<u8> = Vec::new();
    let (mut start, mut base, mut ended) = (0usize, 0usize, false);
    loop {
        let rest = &buf[start..];
        let offset = base + start;
        if rest.is_empty() && ended {
            break;
        }
        let step = if rest.is_empty() {
            Step::Partial(wirekit_core::Needed::Unknown)
        } else if let (Some(decoder), Some(inflater)) = (&compressed, &mut inflater) {
            decode_compressed(decoder, rest, inflater, &mut scratch, offset)
        } else if let Some(codec) = fixed {
            match codec.decode(rest) {
                Ok(Status::Complete(f)) => Step::Line(
                    f.consumed,
                    serde_json::json!({
                        "offset": offset,
                        "len": f.body.len(),
                        "data_hex": to_hex(f.body),
                    }),
                ),
                Ok(Status::Partial(n)) => Step::Partial(n),
                Err(e) => Step::Fail(e.to_string()),
            }
        } else {
            match mc.decode(rest) {
                Ok(Status::Complete(Decoded::LegacyPing)) => Step::LegacyPing,
                Ok(Status::Complete(Decoded::Frame(f))) => match mc::split_packet(f.body) {
                    Ok(p) => Step::Line(
                        f.consumed,
                        serde_json::json!({
                            "offset": offset,
                            "len": f.body.len(),
                            "id": p.id,
                            "data_hex": to_hex(p.data),
                        }),
                    ),
                    Err(e) => Step::Fail(e.to_string()),
                },
                Ok(Status::Partial(n)) => Step::Partial(n),
                Err(e) => Step::Fail(e.to_string()),
            }
        };
        let read_more = match step {
            Step::Line(consumed, line) => {
                if let Err(e) = writeln!(out, "{line}") {
                    return output_failed(e);
                }
                start += consumed;
                false
            }
            Step::Partial(needed) if ended => {
                let _ = out.flush();
                return fail_truncated(offset, needed, rest.len());
            }
            // A ping is told from a frame whose length field starts with 0xFE as soon as the
            // bytes in say which (a frame's second byte is not a ping's), else once no more
            // input is coming, as a server decides after its quiet period.
            Step::LegacyPing => match legacy_ping(rest, ended) {
                Some(Ok(Some(n))) => {
                    let line = serde_json::json!({
                        "offset": offset,
                        "legacy_ping": true,
                        "data_hex": to_hex(&rest[..n]),
                    });
                    return match writeln!(out, "{line}").and_then(|()| out.flush()) {
                        Ok(()) => ExitCode::SUCCESS,
                        Err(e) => output_failed(e),
                    };
                }
                Some(Ok(None)) => {
                    mc.set_phase(Phase::Framed);
                    false
                }
                Some(Err(e)) => {
                    let _ = out.flush();
                    return fail(offset, e.as_str());
                }
                None => true,
            },
            Step::Partial(_) => true,
            Step::Fail(reason) => {
                let _ = out.flush();
                return fail(offset, &reason);
            }
        };
        if read_more {
            // What is decoded goes out before waiting for more (a live stream's reader sees
            // each frame as it comes); keep only what is not decoded, then read on.
            if let Err(e) = out.flush() {
                return output_failed(e);
            }
            buf.drain(..start);
            base += start;
            start = 0;
            match input.fill(&mut buf) {
                Ok(more) => ended = !more,
                Err(e) => {
                    let _ = out.flush();
                    return fail(base + buf.len(), &e);
                }
            }
        }
    }
    if let Err(e) = out.flush() {
        return output_failed(e);
    }
    ExitCode::SUCCESS
}

/// Stdout could not be written: said on stderr as the other tools say it (`ToolError::Output`),
/// exit status 1.
fn output_failed(e: io::Error) -> ExitCode {
    super::ToolError::Output(e).report("wirekit frame")
}

/// One step of `decode --threshold N`: the compressed format.
fn decode_compressed(
    decoder: &CompressedDecoder,
    rest: &[u8],
    inflater: &mut Inflater,
    scratch: &mut [u8],
    offset: usize,
) -> Step {
    let decoded = match decoder.decode(rest, inflater, scratch) {
        Ok(Status::Complete(d)) => d,
        Ok(Status::Partial(needed)) => return Step::Partial(needed),
        Err(e) => return Step::Fail(e.to_string()),
    };
    let packet = match mc::split_packet(decoded.body) {
        Ok(p) => p,
        Err(e) => return Step::Fail(e.to_string()),
    };
    // The length field's value (of the frame as sent, compressed or not).
    let frame_len = match FrameDecoder::new().decode_frame(rest) {
        Ok(Status::Complete(f)) => f.body.len(),
        _ => 0,
    };
    let mut line = serde_json::json!({
        "offset": offset,
        "len": frame_len,
        "id": packet.id,
        "data_hex": to_hex(packet.data),
    });
    if decoder.threshold() >= 0 {
        line["data_len"] = (if decoded.compressed {
            decoded.body.len()
        } else {
            0
        })
        .into();
        line["compressed"] = decoded.compressed.into();
    }
    Step::Line(decoded.consumed, line)
}

/// `encode --threshold N`: one packet in the compressed format. The body is checked against
/// the format's limits before any buffer is sized from it.
fn encode_compressed(id: i32, data: &[u8], threshold: i32, level: u8) -> Result<Vec<u8>, String> {
    let body_len = wirekit_core::varint::varint_len(id).saturating_add(data.len());
    let encoder = CompressedEncoder::new(threshold, Level::from_zlib(level));
    CompressedLimits::VANILLA
        .check_body_len(body_len)
        .map_err(|e| e.to_string())?;
    // Sent as it is (with the format's Data Length byte 0 when compression is on): the frame
    // limit is known now; a compressed body's is checked once compressed.
    if !encoder.compresses(body_len) {
        let packet_len = body_len + usize::from(threshold >= 0);
        CompressedLimits::VANILLA
            .check_packet_len(packet_len)
            .map_err(|e| e.to_string())?;
    }
    let mut body = vec![0u8; body_len];
    let n = wirekit_core::varint::encode_varint(id, &mut body).map_err(|e| e.to_string())?;
    body[n..].copy_from_slice(data);
    let mut compressor = Compressor::new(vec![0u32; WORKSPACE_SERVER].into_boxed_slice())
        .map_err(|e| e.to_string())?;
    let mut out = vec![0u8; max_encoded_len(body.len())];
    let n = encoder
        .encode(&body, &mut out, &mut compressor)
        .map_err(|e| e.to_string())?;
    out.truncate(n);
    Ok(out)
}

/// What `wirekit frame encode` writes: `data` framed as `framing` (VarInt framing needs `id`,
/// the others refuse it), in the compressed format with `threshold`. A packet longer than the
/// framing's maximum is refused before a buffer is sized from it.
pub fn encode_packet(
    framing: Framing,
    id: Option<i32>,
    threshold: Option<i32>,
    level: u8,
    data: &[u8],
) -> Result<Vec<u8>, String> {
    let fixed = framing.fixed(PKTCONN_MAX_LEN);
    if let Some(threshold) = threshold {
        return match (fixed, id) {
            (None, Some(id)) => encode_compressed(id, data, threshold, level),
            _ => Err("--threshold needs --framing varint and --id".into()),
        };
    }
    let result = match (fixed, id) {
        (None, Some(id)) => {
            let p = mc::Packet { id, data };
            let body_len = wirekit_core::varint::varint_len(id).saturating_add(data.len());
            if body_len > mc::MAX_FRAME_LEN {
                return Err(EncodeError::FrameTooLarge {
                    len: body_len,
                    max: mc::MAX_FRAME_LEN,
                }
                .to_string());
            }
            let mut out = vec![0u8; p.encoded_len()];
            p.encode(&mut out).map(|n| {
                out.truncate(n);
                out
            })
        }
        (None, None) => return Err("--id is required with --framing varint".into()),
        (Some(codec), None) => {
            let max = codec.max_len() as usize;
            if data.len() > max {
                return Err(EncodeError::FrameTooLarge {
                    len: data.len(),
                    max,
                }
                .to_string());
            }
            let mut out = vec![0u8; codec.encoded_len(data.len())];
            codec.encode(data, &mut out).map(|_| out)
        }
        (Some(_), Some(_)) => return Err("--id applies to --framing varint only".into()),
    };
    result.map_err(|e| e.to_string())
}

fn encode(args: &EncodeArgs) -> ExitCode {
    // The flags first (an empty packet takes every check but its size): a missing --id or a
    // wrong combination is said at once, not after the input has ended.
    if let Err(e) = encode_packet(args.framing, args.id, args.threshold, args.level, &[]) {
        eprintln!("wirekit frame encode: {e}");
        return ExitCode::from(2);
    }
    // Stdin is read to one byte past the most the framing takes (the packet's data, before
    // its ID and length fields), so a larger stream is refused without being held.
    let max = match (args.threshold, args.framing.fixed(PKTCONN_MAX_LEN)) {
        (Some(_), _) => CompressedLimits::VANILLA.max_data_len(),
        (None, None) => mc::MAX_FRAME_LEN,
        (None, Some(codec)) => codec.max_len() as usize,
    };
    let result = read_input_at_most(args.hex, max)
        .and_then(|data| encode_packet(args.framing, args.id, args.threshold, args.level, &data));
    match result {
        Ok(bytes) => write_out(&bytes),
        Err(e) => {
            eprintln!("wirekit frame encode: {e}");
            ExitCode::from(2)
        }
    }
}

fn write_out(bytes: &[u8]) -> ExitCode {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|_| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => output_failed(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_hex_takes_hex_digits_and_whitespace_only() {
        assert_eq!(
            parse_hex(b"00 7f\nFe\t1a").unwrap(),
            [0x00, 0x7f, 0xfe, 0x1a]
        );
        assert!(parse_hex(b" \n").unwrap().is_empty());
        // `u8::from_str_radix` takes a sign; a hex dump has none.
        for bad in [&b"+f"[..], b"+0ff", b"-1", b"0x1f", b"g0", b"\xc3\xa9"] {
            assert!(parse_hex(bad).is_err(), "{bad:?}");
        }
        assert!(parse_hex(b"abc").unwrap_err().contains("odd number"));
        assert!(parse_hex(b"00+f").unwrap_err().contains("'+' at byte 2"));
    }

    #[test]
    fn legacy_ping_is_told_from_a_frame_starting_with_fe() {
        // Pings of each generation at the stream's end, and a 1.6 ping cut short (answered as
        // the 1.4 one).
        for ping in [
            &b"\xfe"[..],
            b"\xfe\x01",
            b"\xfe\x01\xfa",
            b"\xfe\x01\xfa\x00",
        ] {
            assert_eq!(
                legacy_ping(ping, true),
                Some(Ok(Some(ping.len()))),
                "{ping:?}"
            );
        }
        // Length 254 (FE 01) and 382 (FE 02), each a handshake (packet ID 0): told at once,
        // the stream still open.
        assert_eq!(legacy_ping(b"\xfe\x01\x00\x2f", false), Some(Ok(None)));
        assert_eq!(legacy_ping(b"\xfe\x02\x00", false), Some(Ok(None)));
        // A ping's first bytes with more to come: undecided.
        assert_eq!(legacy_ping(b"\xfe\x01", false), None);
        // A 1.6 ping that breaks its format is an error, not a frame.
        assert!(matches!(
            legacy_ping(b"\xfe\x01\xfa\x00\x01\x00", true),
            Some(Err(McError::BadLegacyPing))
        ));
    }

    #[test]
    fn encode_refuses_packets_over_the_framings_maximum() {
        let data = vec![7u8; 256];
        let e = encode_packet(Framing::U8, None, None, 6, &data).unwrap_err();
        assert!(
            e.contains("frame length 256 exceeds the maximum 255"),
            "{e}"
        );
        assert_eq!(
            encode_packet(Framing::U8, None, None, 6, &data[..255])
                .unwrap()
                .len(),
            256
        );
        let big = vec![0u8; mc::MAX_FRAME_LEN];
        let e = encode_packet(Framing::Varint, Some(0), None, 6, &big).unwrap_err();
        assert!(e.contains("exceeds the maximum 2097151"), "{e}");
        let e = encode_packet(Framing::Varint, Some(0), Some(-1), 6, &big).unwrap_err();
        assert!(e.contains("exceeds the maximum"), "{e}");
        assert!(encode_packet(Framing::U16le, Some(1), None, 6, b"x").is_err());
        assert!(encode_packet(Framing::Varint, None, None, 6, b"x").is_err());
    }
}
