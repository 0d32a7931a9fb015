//! A server's service configuration.

use super::wire::Stats;
use crate::frame::compressed::{CompressedLimits, max_encoded_len};
use crate::frame::fixed::LengthPrefixed;
use crate::frame::mc;
use crate::limit::Rate;
use crate::proxy::policy::{self, Policy, ProxyConfig};
use crate::time::Duration;
use crate::zlib::Level;

/// How a connection's frames are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Framing {
    /// Minecraft VarInt frames carrying the service's packets.
    VarInt,
    /// Fixed-width length-prefixed frames; every payload is echoed back.
    Fixed(LengthPrefixed),
}

/// A server's service configuration, shared by all its sessions (each copies it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Config {
    framing: Framing,
    max_packet_len: usize,
    threshold: i32,
    level: Level,
    proxy: ProxyConfig,
    header_timeout: Duration,
    idle_timeout: Duration,
    send_timeout: Duration,
    key_derivation: bool,
    derive_burst: u32,
    derive_rate: Rate,
    shared_derive_burst: u32,
    shared_derive_rate: Rate,
    source_derive_burst: u32,
    source_derive_rate: Rate,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

impl Config {
    /// The firmware's default maximum packet: 4 KiB.
    pub const DEFAULT_MAX_PACKET_LEN: usize = 4096;

    /// VarInt framing, packets up to [`DEFAULT_MAX_PACKET_LEN`](Self::DEFAULT_MAX_PACKET_LEN),
    /// no compression, no PROXY header ([`Policy::Skip`]).
    pub const fn new() -> Self {
        Config {
            framing: Framing::VarInt,
            max_packet_len: Self::DEFAULT_MAX_PACKET_LEN,
            threshold: -1,
            level: Level::Fast,
            proxy: ProxyConfig::new(Policy::Skip),
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            send_timeout: Self::DEFAULT_SEND_TIMEOUT,
            key_derivation: true,
            derive_burst: Self::DEFAULT_DERIVE_BURST,
            derive_rate: Self::DEFAULT_DERIVE_RATE,
            shared_derive_burst: Self::DEFAULT_SHARED_DERIVE_BURST,
            shared_derive_rate: Self::DEFAULT_SHARED_DERIVE_RATE,
            source_derive_burst: Self::DEFAULT_SOURCE_DERIVE_BURST,
            source_derive_rate: Self::DEFAULT_SOURCE_DERIVE_RATE,
        }
    }

    /// Serves Kerberos key derivation requests (the default) or not. One derivation is
    /// 65,000 to 66,023 chained MD5 rounds, milliseconds of a host core and far longer on a
    /// microcontroller, spent on a peer's demand; a server that has no use for it turns it off
    /// and answers each such request with an
    /// [`ErrorCode::Unsupported`](super::wire::ErrorCode::Unsupported) reply, the
    /// connection going on.
    pub const fn with_key_derivation(mut self, enabled: bool) -> Self {
        self.key_derivation = enabled;
        self
    }

    /// Whether key derivation requests are served (see
    /// [`with_key_derivation`](Self::with_key_derivation)).
    pub const fn key_derivation(&self) -> bool {
        self.key_derivation
    }

    /// The default derive budget's burst: 4 requests (a client derives its key once a login).
    pub const DEFAULT_DERIVE_BURST: u32 = 4;
    /// The default derive budget's refill: one request a second.
    pub const DEFAULT_DERIVE_RATE: Rate = Rate::per_second(1);

    /// Bounds the key derivations one connection gets: `burst` at once, refilled at `rate`
    /// (default [`DEFAULT_DERIVE_BURST`](Self::DEFAULT_DERIVE_BURST) and
    /// [`DEFAULT_DERIVE_RATE`](Self::DEFAULT_DERIVE_RATE)). A derive request past the budget
    /// gets an [`ErrorCode::Busy`](super::wire::ErrorCode::Busy) reply, costs no MD5, and the
    /// connection goes on. Without it, a few bytes of request buy milliseconds of the
    /// server's CPU each: one read of pipelined derive requests held a host worker thread for
    /// seconds, and the firmware's executor for far longer. The budget refills from the time
    /// the adapter gives [`Session::set_time`](super::Session::set_time), never past `burst`:
    /// a burst of 0 refuses every derivation whatever the rate, and a rate of 0 tokens leaves
    /// `burst` derivations for the connection's life.
    pub const fn with_derive_budget(mut self, burst: u32, rate: Rate) -> Self {
        self.derive_burst = burst;
        self.derive_rate = rate;
        self
    }

    /// The derive budget: `(burst, rate)` (see [`with_derive_budget`](Self::with_derive_budget)).
    pub const fn derive_budget(&self) -> (u32, Rate) {
        (self.derive_burst, self.derive_rate)
    }

    /// The default shared derive budget's burst: 16 derivations.
    pub const DEFAULT_SHARED_DERIVE_BURST: u32 = 16;
    /// The default shared derive budget's refill: 8 a second (about a tenth of a host core's
    /// time at some 10 ms a derivation).
    pub const DEFAULT_SHARED_DERIVE_RATE: Rate = Rate::per_second(8);

    /// Bounds the key derivations of all the sessions one workspace serves together (see
    /// [`Workspace::with_derive_budget`](super::Workspace::with_derive_budget), which the
    /// adapter builds from this): `burst` at once, refilled at `rate` (default
    /// [`DEFAULT_SHARED_DERIVE_BURST`](Self::DEFAULT_SHARED_DERIVE_BURST) and
    /// [`DEFAULT_SHARED_DERIVE_RATE`](Self::DEFAULT_SHARED_DERIVE_RATE)). As for the
    /// per-connection budget, a burst of 0 refuses every derivation (it is not "no limit":
    /// [`with_key_derivation`](Self::with_key_derivation) turns derivation off, and a large
    /// burst and rate lift the bound).
    pub const fn with_shared_derive_budget(mut self, burst: u32, rate: Rate) -> Self {
        self.shared_derive_burst = burst;
        self.shared_derive_rate = rate;
        self
    }

    /// The shared derive budget: `(burst, rate)` (see
    /// [`with_shared_derive_budget`](Self::with_shared_derive_budget)).
    pub const fn shared_derive_budget(&self) -> (u32, Rate) {
        (self.shared_derive_burst, self.shared_derive_rate)
    }

    /// The default per-source derive budget's burst: 8 derivations.
    pub const DEFAULT_SOURCE_DERIVE_BURST: u32 = 8;
    /// The default per-source derive budget's refill: 2 a second, a quarter of the shared
    /// budget's default.
    pub const DEFAULT_SOURCE_DERIVE_RATE: Rate = Rate::per_second(2);

    /// Bounds the key derivations of all the sessions of one client source together (see
    /// [`Workspace::with_source_derive_budgets`](super::Workspace::with_source_derive_budgets),
    /// which the adapter keeps per source): `burst` at once, refilled at `rate` (default
    /// [`DEFAULT_SOURCE_DERIVE_BURST`](Self::DEFAULT_SOURCE_DERIVE_BURST) and
    /// [`DEFAULT_SOURCE_DERIVE_RATE`](Self::DEFAULT_SOURCE_DERIVE_RATE)), so that one source
    /// reconnecting for fresh per-connection budgets, or holding many connections, cannot
    /// spend the shared budget every other client's logins need.
    pub const fn with_source_derive_budget(mut self, burst: u32, rate: Rate) -> Self {
        self.source_derive_burst = burst;
        self.source_derive_rate = rate;
        self
    }

    /// The per-source derive budget: `(burst, rate)` (see
    /// [`with_source_derive_budget`](Self::with_source_derive_budget)).
    pub const fn source_derive_budget(&self) -> (u32, Rate) {
        (self.source_derive_burst, self.source_derive_rate)
    }

    /// The default header timeout: 5 s (the PROXY spec asks for at least 3).
    pub const DEFAULT_HEADER_TIMEOUT: Duration = policy::DEFAULT_HEADER_TIMEOUT;

    /// Sets the time a connection has, from its start, to complete the PROXY header (when the
    /// policy reads one) and its first frame. [`Session::next_timeout`](super::Session::next_timeout) reports the deadline;
    /// a peer that has not finished both by then is closed with
    /// [`SessionError::HeaderTimeout`](super::SessionError::HeaderTimeout), so a silent or slow-loris peer cannot hold a
    /// connection open.
    pub const fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// The header timeout (see [`with_header_timeout`](Self::with_header_timeout)).
    pub const fn header_timeout(&self) -> Duration {
        self.header_timeout
    }

    /// The default idle timeout: 60 s (twice vanilla Minecraft's 30 s read timeout).
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

    /// Sets the time a connection has, once its first frame is served, to complete each next
    /// frame, counted from the call that served the one before (the time the adapter gave
    /// [`Session::set_time`](super::Session::set_time)). [`Session::next_timeout`](super::Session::next_timeout)
    /// reports the deadline; a peer that stays silent, or trickles a frame in, past it is
    /// closed with [`SessionError::IdleTimeout`](super::SessionError::IdleTimeout), so neither
    /// holds a connection, or the bytes of a frame it never finishes, for ever.
    /// [`Duration::MAX`] turns it off.
    pub const fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The idle timeout (see [`with_idle_timeout`](Self::with_idle_timeout)).
    pub const fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// The default send timeout: 30 s.
    pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

    /// Sets the time the transport has to take one whole reply. A peer that keeps its receive
    /// window shut (it sends and never reads, or it vanished without a reset reaching us)
    /// would otherwise hold its connection, and its buffers, for ever; adapters end such a
    /// connection when a reply is not written within this time
    /// (`io::Ended::SendStalled` from `io::drive`, with the `embedded-io-async` feature).
    /// A reply is at most [`max_output_len`](Self::max_output_len) bytes, so a peer that reads
    /// at all takes it long before.
    pub const fn with_send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// The send timeout (see [`with_send_timeout`](Self::with_send_timeout)).
    pub const fn send_timeout(&self) -> Duration {
        self.send_timeout
    }

    /// Sets the PROXY accept configuration (trusted networks, their policy and everyone
    /// else's, header limits); [`Session::for_peer`](super::Session::for_peer) picks a peer's
    /// policy from it.
    pub const fn with_proxy(mut self, proxy: ProxyConfig) -> Self {
        self.proxy = proxy;
        self
    }

    /// The PROXY accept configuration.
    pub const fn proxy(&self) -> &ProxyConfig {
        &self.proxy
    }

    /// Sets the framing. For [`Framing::Fixed`] the maximum payload is the smaller of the
    /// format's own maximum and [`with_max_packet_len`](Self::with_max_packet_len).
    pub const fn with_framing(mut self, framing: Framing) -> Self {
        self.framing = framing;
        self
    }

    /// Sets the largest packet accepted and sent: `len(ID + Data)` for VarInt framing (at most
    /// [`mc::MAX_FRAME_LEN`]; larger values are clamped), the payload for fixed framing.
    pub const fn with_max_packet_len(mut self, max: usize) -> Self {
        self.max_packet_len = max;
        self
    }

    /// Sets the compression threshold announced as the first frame of every connection
    /// (negative: none, the default). VarInt framing only.
    pub const fn with_compression_threshold(mut self, threshold: i32) -> Self {
        self.threshold = threshold;
        self
    }

    /// Sets the compression level of what the server sends (default [`Level::Fast`]).
    pub const fn with_compression_level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// The compression level.
    pub const fn compression_level(&self) -> Level {
        self.level
    }

    /// The framing.
    pub const fn framing(&self) -> Framing {
        self.framing
    }

    /// The largest packet (see [`with_max_packet_len`](Self::with_max_packet_len)).
    pub const fn max_packet_len(&self) -> usize {
        match self.framing {
            Framing::VarInt => {
                if self.max_packet_len < mc::MAX_FRAME_LEN {
                    self.max_packet_len
                } else {
                    mc::MAX_FRAME_LEN
                }
            }
            Framing::Fixed(f) => {
                let m = f.max_len() as usize;
                if m < self.max_packet_len {
                    m
                } else {
                    self.max_packet_len
                }
            }
        }
    }

    /// The announced compression threshold (negative: none).
    pub const fn compression_threshold(&self) -> i32 {
        self.threshold
    }

    /// The most bytes one frame (or the PROXY header) can take on the wire: an input buffer
    /// this large always has room for the next one. A VarInt frame's length field is counted
    /// at its longest (3 bytes), as the decoder accepts over-long ones (Velocity-style
    /// encoders always write 3).
    pub const fn max_input_len(&self) -> usize {
        let frame = match self.framing {
            Framing::VarInt => mc::MAX_LENGTH_FIELD_LEN + self.max_compressed_frame_len(),
            Framing::Fixed(f) => f.encoded_len(self.max_packet_len()),
        };
        let header = if self.proxy.reads_header() {
            self.proxy.limits().max_header_len
        } else {
            0
        };
        if header > frame { header } else { frame }
    }

    /// The most bytes one reply can take: an output buffer this large never gets
    /// [`Want::Output`](super::Want::Output) when empty.
    pub const fn max_output_len(&self) -> usize {
        let small = max_encoded_len(1 + Stats::MAX_LEN);
        let big = match self.framing {
            Framing::VarInt => max_encoded_len(self.max_packet_len()),
            Framing::Fixed(f) => f.encoded_len(self.max_packet_len()),
        };
        if big > small { big } else { small }
    }

    /// The longest compressed frame (the Packet Length) a client may send: a body of
    /// [`max_packet_len`](Self::max_packet_len) bytes that did not compress.
    pub(super) const fn max_compressed_frame_len(&self) -> usize {
        CompressedLimits::for_max_body_len(self.max_packet_len()).max_frame_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;
    use crate::frame::mc::FrameDecoder;

    /// The longest frame the session takes, its length in the over-long 3-byte form the
    /// decoder accepts, fits an input buffer of `max_input_len` (it was one byte short: a
    /// firmware connection sent it was closed as `InputFull`).
    #[test]
    fn the_input_buffer_holds_the_longest_frame_with_a_long_length_field() {
        for (max, threshold) in [(4096, -1), (4096, 256), (2048, 0), (100, 64)] {
            let c = Config::new()
                .with_max_packet_len(max)
                .with_compression_threshold(threshold);
            let longest = c.max_compressed_frame_len();
            let mut frame = std::vec![0u8; mc::MAX_LENGTH_FIELD_LEN + longest];
            frame[0] = 0x80 | (longest & 0x7f) as u8;
            frame[1] = 0x80 | ((longest >> 7) & 0x7f) as u8;
            frame[2] = (longest >> 14) as u8;
            let d = FrameDecoder::new().with_max_frame_len(longest);
            let Ok(Status::Complete(f)) = d.decode_frame(&frame) else {
                panic!("the decoder takes it")
            };
            assert_eq!(f.consumed, frame.len());
            assert!(
                frame.len() <= c.max_input_len(),
                "{max}/{threshold}: {} > {}",
                frame.len(),
                c.max_input_len()
            );
        }
    }
}
