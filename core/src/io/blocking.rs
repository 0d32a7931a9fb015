//! Frame and PROXY header readers and writers over embedded-io's blocking
//! [`Read`]/[`Write`] (feature `embedded-io`); see the
//! [module docs](super) for what they read and when.
//!
//! ```
//! use wirekit_core::frame::mc::FrameDecoder;
//! use wirekit_core::io::blocking::{read_frame, read_proxy_header, write_packet};
//! use wirekit_core::proxy::Limits;
//!
//! // A PROXY header, then a frame: the header read leaves the frame in the stream.
//! let mut wire = [0u8; 64];
//! let header = b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n";
//! wire[..header.len()].copy_from_slice(header);
//! let mut tail = &mut wire[header.len()..];
//! let room = tail.len();
//! write_packet(&mut tail, 0x01, b"ping")?;
//! let end = header.len() + room - tail.len();
//!
//! let mut stream = &wire[..end];
//! let mut buf = [0u8; 128];
//! let proxy = read_proxy_header(&mut stream, &Limits::default(), &mut buf)?;
//! assert_eq!(proxy.len, header.len());
//! let frame = read_frame(&mut stream, &FrameDecoder::new(), &mut buf)?.expect("a frame");
//! assert_eq!(frame.body, b"\x01ping");
//! assert!(read_frame(&mut stream, &FrameDecoder::new(), &mut buf)?.is_none());
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

super::stream_codecs!(embedded_io, [], []);
