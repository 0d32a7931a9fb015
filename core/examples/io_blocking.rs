//! A host loop over in-memory transports with the blocking readers and writers: a client's
//! bytes (a PROXY header, then VarInt frames) in a `&[u8]`, the server's replies into a `Vec`.
//! Any `embedded_io::Read + Write` serves the same (a `std::net::TcpStream` through
//! `embedded-io-adapters`, a UART: see `io_uart`).
//!
//! `cargo run -p wirekit-core --example io_blocking --features embedded-io`

use wirekit_core::frame::mc::{FrameDecoder, split_packet};
use wirekit_core::io::ReadError;
use wirekit_core::io::blocking::{read_frame, read_proxy_header, write_packet};
use wirekit_core::proxy::Limits;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // What a client sent: a PROXY header and three packets.
    let mut sent = b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 7000\r\n".to_vec();
    for (id, data) in [(0x00, &b"hello"[..]), (0x00, b"world"), (0x2a, b"?")] {
        write_packet(&mut sent, id, data)?;
    }

    let mut stream: &[u8] = &sent;
    let mut replies = Vec::new();
    // One buffer, reused for the header and every frame: nothing is read past either.
    let mut buf = [0u8; 256];
    let header = read_proxy_header(&mut stream, &Limits::default(), &mut buf)?;
    println!("client per PROXY header: {:?}", header.addresses.source());

    let decoder = FrameDecoder::new().with_max_frame_len(buf.len() - 3);
    loop {
        let frame = match read_frame(&mut stream, &decoder, &mut buf) {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(ReadError::UnexpectedEof { buffered }) => {
                return Err(format!("peer vanished {buffered} bytes into a frame").into());
            }
            Err(e) => return Err(e.to_string().into()),
        };
        let packet = split_packet(frame.body)?;
        println!("packet {:#04x}: {:?}", packet.id, packet.data);
        // Echo packet 0x00, answer others with an empty 0x7f.
        match packet.id {
            0x00 => write_packet(&mut replies, 0x00, packet.data)?,
            _ => write_packet(&mut replies, 0x7f, &[])?,
        }
    }
    println!("peer closed; {} bytes of replies", replies.len());
    Ok(())
}
