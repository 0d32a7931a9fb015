//! The blocking readers and writers over a real `std::net::TcpStream` on loopback, through
//! `embedded-io-adapters`' `FromStd`: a server thread reads a PROXY header and VarInt frames and
//! echoes each packet; the client sends three and checks every reply. Bounded: three packets,
//! then both sides close.
//!
//! `cargo run -p wirekit-core --example io_std_tcp --features embedded-io`

use std::net::{TcpListener, TcpStream};

use embedded_io_adapters::std::FromStd;
use wirekit_core::frame::mc::{FrameDecoder, split_packet};
use wirekit_core::io::blocking::{read_frame, read_proxy_header, write_packet};
use wirekit_core::proxy::Limits;

const PACKETS: [(i32, &[u8]); 3] = [(0x00, b"hello"), (0x00, b"over"), (0x00, b"tcp")];

fn serve(stream: TcpStream) -> Result<(), String> {
    let mut io = FromStd::new(stream);
    let mut buf = [0u8; 512];
    let header =
        read_proxy_header(&mut io, &Limits::default(), &mut buf).map_err(|e| e.to_string())?;
    println!(
        "server: client per PROXY header {:?}",
        header.addresses.source()
    );
    let decoder = FrameDecoder::new().with_max_frame_len(buf.len() - 3);
    let mut reply = [0u8; 512];
    while let Some(frame) = read_frame(&mut io, &decoder, &mut buf).map_err(|e| e.to_string())? {
        let packet = split_packet(frame.body).map_err(|e| e.to_string())?;
        let n = packet.data.len();
        reply[..n].copy_from_slice(packet.data);
        write_packet(&mut io, packet.id, &reply[..n]).map_err(|e| e.to_string())?;
    }
    println!("server: client closed");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().map_err(|e| e.to_string())?;
        serve(stream)
    });

    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut io = FromStd::new(stream);
    let port = addr.port();
    let header = format!("PROXY TCP4 192.0.2.1 127.0.0.1 56324 {port}\r\n");
    embedded_io::Write::write_all(&mut io, header.as_bytes()).map_err(|e| e.to_string())?;
    let decoder = FrameDecoder::new();
    let mut buf = [0u8; 512];
    for (id, data) in PACKETS {
        write_packet(&mut io, id, data).map_err(|e| e.to_string())?;
        let frame = read_frame(&mut io, &decoder, &mut buf)
            .map_err(|e| e.to_string())?
            .ok_or("server closed early")?;
        let packet = split_packet(frame.body)?;
        assert_eq!((packet.id, packet.data), (id, data));
        println!("client: {:#04x} {:?} echoed", packet.id, packet.data);
    }
    // Closing our write side ends the server's loop.
    io.inner().shutdown(std::net::Shutdown::Write)?;
    server.join().map_err(|_| "server thread panicked")??;
    Ok(())
}
