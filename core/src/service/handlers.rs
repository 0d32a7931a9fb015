//! The request handlers: echo (VarInt and fixed framing), derive, stats, set compression and
//! the `0x7F` error reply, each writing its reply in the connection's outgoing format.

use super::counters::Counters;
use super::session::{Session, SessionError, Step, Want, Workspace};
use super::wire::{self, DeriveRequest, ErrorCode, ErrorReply, Stats};
use crate::frame::EncodeError;
use crate::frame::compressed::max_encoded_len;
use crate::frame::fixed::LengthPrefixed;
use crate::frame::mc::{encode_frame, encode_packet, frame_len, split_packet};
use crate::limit::TokenBucket;
use crate::varint::VARINT_MAX_LEN;
use crate::zlib::{Compressor, max_inflated_len};
use crate::{BufferTooSmall, Status};

/// The length of the body of the VarInt frame complete at the start of `input` (0 if its
/// length does not decode: the caller has decoded the frame already).
fn frame_body_len(input: &[u8]) -> usize {
    match crate::varint::decode_varint(input) {
        Ok(Status::Complete((len, _))) => usize::try_from(len).unwrap_or(0),
        _ => 0,
    }
}

impl Session {
    /// Echoes the fixed-framing payload at the start of `input`, if complete and it fits.
    pub(super) fn step_fixed(
        &mut self,
        format: LengthPrefixed,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<Step, SessionError> {
        let frame = match format.decode(input)? {
            Status::Complete(f) => f,
            Status::Partial(n) => return Ok(Step::Stop(Want::Input(n))),
        };
        let required = format.encoded_len(frame.body.len());
        if out.len() < required {
            return Ok(Step::Stop(Want::Output(required)));
        }
        self.count_in(frame.consumed);
        let n = format
            .encode(frame.body, out)
            .unwrap_or_else(|_| unreachable!("room checked, length within the maximum"));
        Ok(Step::Done(frame.consumed, n))
    }

    /// Serves the VarInt frame at the start of `input`, if complete and its reply fits.
    pub(super) fn step_varint<C: Counters + ?Sized, S: AsMut<[u32]>>(
        &mut self,
        input: &[u8],
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
        counters: &C,
    ) -> Result<Step, SessionError> {
        let Workspace {
            scratch,
            zlib,
            derive,
            source_derive,
        } = ws;
        // Where the body (ID + data) is: in the input, or inflated at the front of scratch.
        let (inflated, body_len, consumed) = if self.compressed.threshold() < 0 {
            match self.decoder.decode_frame(input)? {
                Status::Complete(f) => (false, f.body.len(), f.consumed),
                Status::Partial(n) => return Ok(Step::Stop(Want::Input(n))),
            }
        } else {
            let Some((inflater, _)) = zlib.as_mut() else {
                return Err(SessionError::CompressionUnavailable);
            };
            // Room for the largest reply the body can lead to, before it is inflated: a frame
            // put back for want of room would be inflated again on the next call. A length
            // past the limits is left to `decode`'s error, and so is one past what the
            // frame's bytes can inflate to (1032 times them): room asked for it would be
            // sized by the peer's word alone (a 7-byte frame declaring 1 MiB).
            if let Status::Complete(len) = self.compressed.body_len(input)?
                && len <= self.compressed.limits().max_data_len()
                && len <= max_inflated_len(frame_body_len(input))
            {
                let required = self.reply_bound_any(len);
                if out.len() < required {
                    return Ok(Step::Stop(Want::Output(required)));
                }
            }
            match self.compressed.decode(input, inflater, scratch)? {
                Status::Complete(d) => (d.compressed, d.body.len(), d.consumed),
                Status::Partial(n) => return Ok(Step::Stop(Want::Input(n))),
            }
        };
        if inflated {
            self.worked += body_len;
        }
        let body: &[u8] = if inflated {
            &scratch[..body_len]
        } else {
            // An uncompressed body is always the end of its frame.
            &input[consumed - body_len..consumed]
        };
        let packet = split_packet(body)?;
        let (id, id_len) = (packet.id, body_len - packet.data.len());
        let required = self.reply_bound(id, packet.data.len());
        if out.len() < required {
            return Ok(Step::Stop(Want::Output(required)));
        }
        let compressor = zlib.as_mut().map(|(_, c)| &mut **c);
        let n = match id {
            wire::ECHO if self.encoder.threshold() < 0 => {
                self.count_in(consumed);
                packet_out(wire::ECHO, packet.data, out)
            }
            wire::ECHO => {
                // The reply body is `0x00 | data`: the request's own body when its ID took one
                // byte (the usual case), else rebuilt in scratch.
                let reply: &[u8] = if id_len == 1 {
                    body
                } else if inflated {
                    scratch[id_len - 1] = 0;
                    &scratch[id_len - 1..body_len]
                } else {
                    let data = &input[consumed - body_len + id_len..consumed];
                    let Some(dst) = scratch.get_mut(..1 + data.len()) else {
                        return Err(SessionError::ScratchTooSmall);
                    };
                    dst[0] = 0;
                    dst[1..].copy_from_slice(data);
                    dst
                };
                // Counted once served: a reply that cannot be sent (one whose compressed form
                // is past the frame limit) leaves the frame unconsumed, to be decoded again
                // on the next call and reported then.
                let n = self.send_body(reply, out, compressor)?;
                self.worked += reply.len();
                self.count_in(consumed);
                n
            }
            _ => {
                // Counted first: a stats reply includes its own request. These replies are a
                // few bytes and always sent.
                self.count_in(consumed);
                let data = &body[id_len..];
                let source = source_derive.as_deref_mut();
                self.serve_small(
                    id,
                    data,
                    out,
                    compressor,
                    derive.as_deref_mut(),
                    source,
                    counters,
                )?
            }
        };
        Ok(Step::Done(consumed, n))
    }

    fn count_in(&mut self, frame_len: usize) {
        self.tally.frames_in += 1;
        self.tally.bytes_in += frame_len as u64;
    }

    /// An upper bound on the reply to a request, checked before doing any work.
    fn reply_bound(&self, id: i32, data_len: usize) -> usize {
        let body = match id {
            wire::ECHO => 1 + data_len,
            wire::DERIVE => 1 + wire::KEY_LEN,
            wire::STATS => 1 + Stats::MAX_LEN,
            wire::SET_COMPRESSION => 1 + VARINT_MAX_LEN,
            _ => 1 + ErrorReply::MAX_LEN,
        };
        if self.encoder.threshold() < 0 {
            frame_len(body)
        } else if self.encoder.compresses(body) {
            max_encoded_len(body)
        } else {
            frame_len(1 + body)
        }
    }

    /// An upper bound on the reply to any request whose body (ID and data) is `body_len`
    /// bytes: [`reply_bound`](Self::reply_bound) of the largest, an echo of the longest
    /// data such a body holds, or a small reply.
    fn reply_bound_any(&self, body_len: usize) -> usize {
        [
            wire::ECHO,
            wire::DERIVE,
            wire::STATS,
            wire::SET_COMPRESSION,
            wire::ERROR,
        ]
        .into_iter()
        .map(|id| self.reply_bound(id, body_len.saturating_sub(1)))
        .max()
        .unwrap_or(0)
    }

    /// Serves every request but echo: the reply body is small and built on the stack.
    #[allow(clippy::too_many_arguments)]
    fn serve_small<C: Counters + ?Sized, S: AsMut<[u32]>>(
        &mut self,
        id: i32,
        data: &[u8],
        out: &mut [u8],
        compressor: Option<&mut Compressor<S>>,
        shared_derive: Option<&mut TokenBucket>,
        source_derive: Option<&mut (dyn super::SourceDeriveBudgets + '_)>,
        counters: &C,
    ) -> Result<usize, SessionError> {
        let mut body = [0u8; 1 + Stats::MAX_LEN];
        let code = match id {
            wire::DERIVE if !self.key_derivation => ErrorCode::Unsupported,
            wire::DERIVE => match DeriveRequest::parse(data) {
                // A token from each budget, or from none: one past its own budget (or its
                // source's) does not spend the shared budget its neighbours need, and one the
                // shared budget refuses keeps its own and its source's.
                Ok(_) if self.derive_budget.available(self.now) == 0 => ErrorCode::Busy,
                Ok(req) => 'derive: {
                    // The client source's budget (and its network's), looked up only now (a
                    // well-formed request within the session's own budget).
                    let now = self.now;
                    let mut source = source_derive.map(|b| b.budgets(self.proxied_source()));
                    let spent = |b: &TokenBucket| b.available(now) == 0;
                    if source
                        .as_ref()
                        .is_some_and(|(own, net)| spent(own) || net.as_deref().is_some_and(spent))
                        || !shared_derive.is_none_or(|b| b.try_take(now, 1))
                        || !source.as_mut().is_none_or(|(own, net)| {
                            net.as_mut().is_none_or(|n| n.try_take(now, 1)) && own.try_take(now, 1)
                        })
                        || !self.derive_budget.try_take(now, 1)
                    {
                        break 'derive ErrorCode::Busy;
                    }
                    body[0] = wire::DERIVE as u8;
                    let key = crate::kerberos::derive_kerberos_key(req.pid, req.password);
                    body[1..1 + wire::KEY_LEN].copy_from_slice(&key);
                    let n = self.send_body(&body[..1 + wire::KEY_LEN], out, compressor)?;
                    self.derived = true;
                    return Ok(n);
                }
                Err(_) => ErrorCode::MalformedRequest,
            },
            wire::STATS => {
                // The tally so far (this request's frame included) goes in first, so a client
                // sees itself in the totals.
                self.flush(counters);
                body[0] = wire::STATS as u8;
                let n = counters
                    .snapshot()
                    .encode(&mut body[1..])
                    .expect("MAX_LEN fits");
                return self.send_body(&body[..1 + n], out, compressor);
            }
            wire::SET_COMPRESSION => match wire::parse_threshold(data) {
                Ok(t) if t >= 0 && compressor.is_none() => ErrorCode::Unsupported,
                Ok(t) => {
                    // The request was the peer's last frame in the old format; the reply is
                    // ours. Both switch once the reply is written: a reply that cannot be
                    // leaves the session as it was.
                    body[0] = wire::SET_COMPRESSION as u8;
                    let n = wire::encode_threshold(t, &mut body[1..]).expect("5 bytes fit");
                    let sent = self.send_body(&body[..1 + n], out, compressor)?;
                    self.set_incoming(t);
                    self.encoder.set_threshold(t);
                    return Ok(sent);
                }
                Err(_) => ErrorCode::MalformedRequest,
            },
            _ => ErrorCode::UnknownPacket,
        };
        self.tally.error_replies += 1;
        body[0] = wire::ERROR as u8;
        let n = ErrorReply {
            request_id: id,
            code,
        }
        .encode(&mut body[1..])
        .expect("MAX_LEN fits");
        self.send_body(&body[..1 + n], out, compressor)
    }

    /// Writes a reply body (ID + data) as one frame in the outgoing format; `out` has room for
    /// [`reply_bound`](Self::reply_bound).
    fn send_body<S: AsMut<[u32]>>(
        &self,
        body: &[u8],
        out: &mut [u8],
        compressor: Option<&mut Compressor<S>>,
    ) -> Result<usize, SessionError> {
        let sent = if self.encoder.threshold() < 0 {
            encode_frame(body, out)
        } else {
            let Some(compressor) = compressor else {
                return Err(SessionError::CompressionUnavailable);
            };
            self.encoder.encode(body, out, compressor)
        };
        sent.map_err(|e| match e {
            EncodeError::FrameTooLarge { .. } => SessionError::ReplyTooLarge,
            // Room was checked against reply_bound; report rather than panic if that ever
            // disagrees with the encoder.
            _ => SessionError::ReplyTooLarge,
        })
    }

    /// Writes an uncompressed `0x03` frame carrying `threshold`, or returns the room it needs.
    pub(super) fn reply_threshold(
        &self,
        threshold: i32,
        out: &mut [u8],
    ) -> Result<usize, BufferTooSmall> {
        let mut data = [0u8; VARINT_MAX_LEN];
        let n = wire::encode_threshold(threshold, &mut data).expect("5 bytes fit");
        encode_packet(wire::SET_COMPRESSION, &data[..n], out).map_err(|_| BufferTooSmall {
            required: frame_len(1 + n),
        })
    }
}

/// Writes an uncompressed reply packet whose room was checked by `reply_bound`.
fn packet_out(id: i32, data: &[u8], out: &mut [u8]) -> usize {
    encode_packet(id, data, out).unwrap_or_else(|_| unreachable!("room checked"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameError;
    use crate::frame::compressed::{CompressedDecoder, CompressedEncoder, CompressedFrameError};
    use crate::frame::fixed::{Endian, Width};
    use crate::service::counters::AtomicCounters;
    use crate::service::session::tests::{Harness, frame, packets};
    use crate::service::{Config, Framing};
    use crate::time::Instant;
    use crate::zlib::{Inflater, Level, WORKSPACE_MIN};
    use std::boxed::Box;

    #[test]
    fn unknown_id_gets_error_reply_and_connection_stays() {
        let mut h = Harness::new(Config::new());
        let (buf, n) = frame(0x42, b"xyz");
        let (_, out) = h.handle(&buf[..n]).unwrap();
        let (id, data) = packets(out).next().unwrap();
        assert_eq!(id, wire::ERROR);
        assert_eq!(
            ErrorReply::parse(data).unwrap(),
            ErrorReply {
                request_id: 0x42,
                code: ErrorCode::UnknownPacket
            }
        );
        let (buf, n) = frame(wire::ECHO, b"still here");
        assert_eq!(h.handle(&buf[..n]).unwrap().1, &buf[..n]);
    }

    /// The derive request for pid 100 (NEX's example account), framed.
    fn derive_request() -> ([u8; 300], usize) {
        let mut data = [0u8; 32];
        let req = DeriveRequest {
            pid: 100,
            password: b"MMQea3n!fsik",
        };
        let n = req.encode(&mut data).unwrap();
        frame(wire::DERIVE, &data[..n])
    }

    /// Sends [`derive_request`]; the reply's ID and data.
    fn derive_example(h: &mut Harness) -> (i32, std::vec::Vec<u8>) {
        let (buf, len) = derive_request();
        let (_, out) = h.handle(&buf[..len]).unwrap();
        let (id, reply) = packets(out).next().unwrap();
        (id, reply.to_vec())
    }

    /// A call ends after each derivation, however many requests are buffered behind it, so
    /// the adapter can let other connections run between them; other requests are served
    /// together as before.
    #[test]
    fn a_call_ends_after_each_derivation() {
        let mut h = Harness::new(Config::new());
        let (derive, dlen) = derive_request();
        let (echo, elen) = frame(wire::ECHO, b"behind");
        let mut input = std::vec::Vec::new();
        for _ in 0..3 {
            input.extend_from_slice(&echo[..elen]);
            input.extend_from_slice(&derive[..dlen]);
        }
        let key = crate::kerberos::derive_kerberos_key(100, b"MMQea3n!fsik");
        let mut at = 0;
        for _ in 0..3 {
            let (p, out) = h.handle(&input[at..]).unwrap();
            // The echo before it and the derivation, then the call ends.
            assert_eq!((p.consumed, p.want), (elen + dlen, Want::Call));
            let replies: std::vec::Vec<_> = packets(out).map(|(id, d)| (id, d.to_vec())).collect();
            assert_eq!(
                replies,
                [
                    (wire::ECHO, b"behind".to_vec()),
                    (wire::DERIVE, key.to_vec())
                ]
            );
            at += p.consumed;
        }
        let (p, out) = h.handle(&input[at..]).unwrap();
        assert_eq!((p.consumed, p.written, out.len()), (0, 0, 0));
        assert!(matches!(p.want, Want::Input(_)));
        // A refused derivation costs nothing and does not end the call.
        let mut h = Harness::new(Config::new().with_key_derivation(false));
        let mut two = derive[..dlen].to_vec();
        two.extend_from_slice(&derive[..dlen]);
        let (p, _) = h.handle(&two).unwrap();
        assert_eq!(p.consumed, 2 * dlen);
        assert!(matches!(p.want, Want::Input(_)));
    }

    #[test]
    fn derive_matches_kerberos_and_malformed_is_error_reply() {
        let mut h = Harness::new(Config::new());
        let (id, key) = derive_example(&mut h);
        assert_eq!(id, wire::DERIVE);
        assert_eq!(
            key,
            crate::kerberos::derive_kerberos_key(100, b"MMQea3n!fsik")
        );
        assert_eq!(key[..4], [0x9e, 0xf3, 0x18, 0xf0]);

        let (buf, len) = frame(wire::DERIVE, &[0x80]);
        let (_, out) = h.handle(&buf[..len]).unwrap();
        let (id, data) = packets(out).next().unwrap();
        assert_eq!(id, wire::ERROR);
        assert_eq!(
            ErrorReply::parse(data).unwrap().code,
            ErrorCode::MalformedRequest
        );
    }

    /// With key derivation off, a derive request costs no MD5 and gets `Unsupported`; the
    /// connection goes on.
    #[test]
    fn derive_off_is_unsupported_and_the_connection_goes_on() {
        let mut h = Harness::new(Config::new().with_key_derivation(false));
        let (id, data) = derive_example(&mut h);
        assert_eq!(id, wire::ERROR);
        assert_eq!(
            ErrorReply::parse(&data).unwrap().code,
            ErrorCode::Unsupported
        );
        let (buf, n) = frame(wire::ECHO, b"still here");
        assert_eq!(h.handle(&buf[..n]).unwrap().1, &buf[..n]);
    }

    /// Past the derive budget a request gets `Busy` at once (no MD5) and the connection goes
    /// on; the budget refills only from the time the adapter gives.
    #[test]
    fn derive_past_the_budget_is_busy_until_it_refills() {
        use crate::limit::Rate;
        use crate::time::Duration;
        let busy = |h: &mut Harness| {
            let (id, data) = derive_example(h);
            assert_eq!(id, wire::ERROR);
            assert_eq!(ErrorReply::parse(&data).unwrap().code, ErrorCode::Busy);
        };
        let config = Config::new().with_derive_budget(2, Rate::per_second(1));
        let mut h = Harness::new(config);
        let key = crate::kerberos::derive_kerberos_key(100, b"MMQea3n!fsik");
        for _ in 0..2 {
            assert_eq!(derive_example(&mut h), (wire::DERIVE, key.to_vec()));
        }
        busy(&mut h);
        let (buf, n) = frame(wire::ECHO, b"still here");
        assert_eq!(h.handle(&buf[..n]).unwrap().1, &buf[..n]);
        // Time the session is not told of refills nothing; a second it is told of, one.
        busy(&mut h);
        h.session
            .set_time(Instant::ZERO + Duration::from_millis(999));
        busy(&mut h);
        h.session.set_time(Instant::ZERO + Duration::from_secs(1));
        assert_eq!(derive_example(&mut h), (wire::DERIVE, key.to_vec()));
        busy(&mut h);
        // An earlier time is ignored; handle_timeout tells the time too.
        h.session.set_time(Instant::ZERO);
        busy(&mut h);
        h.session
            .handle_timeout(Instant::ZERO + Duration::from_secs(3))
            .ok();
        assert_eq!(derive_example(&mut h), (wire::DERIVE, key.to_vec()));
        // The busy replies are error replies like any other.
        let s = h.counters.snapshot();
        assert_eq!(s.error_replies, 5);

        // A zero budget refuses every derivation.
        let mut h = Harness::new(Config::new().with_derive_budget(0, Rate::new(0, Duration::ZERO)));
        busy(&mut h);
        h.session
            .set_time(Instant::ZERO + Duration::from_secs(3600));
        busy(&mut h);
    }

    /// A derive request served by `session` under `ws`: `None` when the key came back, else
    /// the error reply's code.
    fn derive_reply(
        session: &mut Session,
        ws: &mut Workspace<'_>,
        counters: &AtomicCounters,
    ) -> Option<ErrorCode> {
        let mut data = [0u8; 32];
        let n = DeriveRequest {
            pid: 100,
            password: b"MMQea3n!fsik",
        }
        .encode(&mut data)
        .unwrap();
        let (req, len) = frame(wire::DERIVE, &data[..n]);
        let mut out = [0u8; 256];
        let p = session.handle(&req[..len], &mut out, ws, counters).unwrap();
        let (id, reply) = packets(&out[..p.written]).next().unwrap();
        match id {
            wire::DERIVE => None,
            _ => Some(ErrorReply::parse(reply).unwrap().code),
        }
    }

    /// The sessions one workspace serves share its derive budget: a client reconnecting for
    /// a fresh per-connection budget gets no more of the executor; a session past its own
    /// budget does not spend the shared one.
    #[test]
    fn sessions_share_the_workspaces_derive_budget() {
        use crate::limit::Rate;
        use crate::time::Duration;
        let config = Config::new().with_derive_budget(2, Rate::per_second(1));
        let mut shared = TokenBucket::new(3, Rate::per_second(1));
        let mut scratch = [0u8; 4096];
        let counters = AtomicCounters::new();
        let mut derive = |session: &mut Session, shared: &mut TokenBucket| {
            let mut ws = Workspace::new(&mut scratch).with_derive_budget(shared);
            derive_reply(session, &mut ws, &counters)
        };
        // One connection spends its own 2; past it, the shared budget is not charged.
        let mut a = Session::new(&config, Instant::ZERO);
        assert_eq!(derive(&mut a, &mut shared), None);
        assert_eq!(derive(&mut a, &mut shared), None);
        assert_eq!(derive(&mut a, &mut shared), Some(ErrorCode::Busy));
        assert_eq!(shared.available(Instant::ZERO), 1);
        // A new connection has a budget of its own, but the shared one has 1 left.
        let mut b = Session::new(&config, Instant::ZERO);
        assert_eq!(derive(&mut b, &mut shared), None);
        assert_eq!(derive(&mut b, &mut shared), Some(ErrorCode::Busy));
        let mut c = Session::new(&config, Instant::ZERO);
        assert_eq!(derive(&mut c, &mut shared), Some(ErrorCode::Busy));
        // A second later, one more.
        c.set_time(Instant::ZERO + Duration::from_secs(1));
        assert_eq!(derive(&mut c, &mut shared), None);
        // A refusal by the shared budget costs the connection none of its own 2.
        let mut d = Session::new(&config, Instant::ZERO);
        let mut spent = TokenBucket::new(0, Rate::per_second(1));
        assert_eq!(derive(&mut d, &mut spent), Some(ErrorCode::Busy));
        let mut fresh = TokenBucket::new(3, Rate::per_second(1));
        assert_eq!(derive(&mut d, &mut fresh), None);
        assert_eq!(derive(&mut d, &mut fresh), None);
        assert_eq!(derive(&mut d, &mut fresh), Some(ErrorCode::Busy));
    }

    /// The sessions of one source share its derive budget too: a derivation takes a token
    /// from the session's own, the source's and the shared budget, or from none (a refusal
    /// by the source's spends neither the shared nor the session's).
    #[test]
    fn sessions_of_a_source_share_its_derive_budget() {
        use crate::limit::Rate;
        let config = Config::new().with_derive_budget(4, Rate::per_second(1));
        let mut shared = TokenBucket::new(10, Rate::per_second(1));
        let mut scratch = [0u8; 4096];
        let counters = AtomicCounters::new();
        /// One source's budget, whatever the session's client.
        struct One<'a>(&'a mut TokenBucket);
        impl crate::service::SourceDeriveBudgets for One<'_> {
            fn budget(&mut self, _: Option<core::net::SocketAddr>) -> &mut TokenBucket {
                self.0
            }
        }
        let mut derive =
            |session: &mut Session, shared: &mut TokenBucket, source: &mut TokenBucket| {
                let mut one = One(source);
                let mut ws = Workspace::new(&mut scratch)
                    .with_derive_budget(shared)
                    .with_source_derive_budgets(&mut one);
                derive_reply(session, &mut ws, &counters)
            };
        let mut source = TokenBucket::new(2, Rate::per_second(1));
        let mut other = TokenBucket::new(2, Rate::per_second(1));
        // Two connections of one source: 2 derivations between them.
        let mut a = Session::new(&config, Instant::ZERO);
        let mut b = Session::new(&config, Instant::ZERO);
        assert_eq!(derive(&mut a, &mut shared, &mut source), None);
        assert_eq!(derive(&mut b, &mut shared, &mut source), None);
        assert_eq!(
            derive(&mut b, &mut shared, &mut source),
            Some(ErrorCode::Busy)
        );
        let mut c = Session::new(&config, Instant::ZERO);
        assert_eq!(
            derive(&mut c, &mut shared, &mut source),
            Some(ErrorCode::Busy)
        );
        // The refusals spent none of the shared budget, nor the sessions' own.
        assert_eq!(shared.available(Instant::ZERO), 8);
        // Another source is served from the shared budget, by the same sessions' budgets.
        assert_eq!(derive(&mut c, &mut shared, &mut other), None);
        assert_eq!(derive(&mut b, &mut shared, &mut other), None);
        assert_eq!(shared.available(Instant::ZERO), 6);
        // A shared budget spent refuses without spending the source's.
        let mut spent = TokenBucket::new(0, Rate::per_second(1));
        let mut fresh = TokenBucket::new(1, Rate::per_second(1));
        let mut d = Session::new(&config, Instant::ZERO);
        assert_eq!(
            derive(&mut d, &mut spent, &mut fresh),
            Some(ErrorCode::Busy)
        );
        assert_eq!(fresh.available(Instant::ZERO), 1);
    }

    /// A network's budget beside its source's: a token from each, or from none (a network
    /// spent refuses without spending the source's, the shared or the session's budget).
    #[test]
    fn a_network_budget_is_spent_with_its_sources() {
        use crate::limit::Rate;
        let config = Config::new().with_derive_budget(4, Rate::per_second(1));
        let mut scratch = [0u8; 4096];
        let counters = AtomicCounters::new();
        /// A source and its network.
        struct Two<'a>(&'a mut TokenBucket, &'a mut TokenBucket);
        impl crate::service::SourceDeriveBudgets for Two<'_> {
            fn budget(&mut self, _: Option<core::net::SocketAddr>) -> &mut TokenBucket {
                self.0
            }
            fn budgets(
                &mut self,
                _: Option<core::net::SocketAddr>,
            ) -> (&mut TokenBucket, Option<&mut TokenBucket>) {
                (self.0, Some(self.1))
            }
        }
        let mut shared = TokenBucket::new(10, Rate::per_second(1));
        let mut network = TokenBucket::new(1, Rate::per_second(1));
        let (mut a, mut b) = (
            TokenBucket::new(2, Rate::per_second(1)),
            TokenBucket::new(2, Rate::per_second(1)),
        );
        let mut derive =
            |shared: &mut TokenBucket, source: &mut TokenBucket, network: &mut TokenBucket| {
                let mut two = Two(source, network);
                let mut ws = Workspace::new(&mut scratch)
                    .with_derive_budget(shared)
                    .with_source_derive_budgets(&mut two);
                let mut session = Session::new(&config, Instant::ZERO);
                derive_reply(&mut session, &mut ws, &counters)
            };
        assert_eq!(derive(&mut shared, &mut a, &mut network), None);
        assert_eq!(
            derive(&mut shared, &mut b, &mut network),
            Some(ErrorCode::Busy)
        );
        assert_eq!(
            (
                a.available(Instant::ZERO),
                b.available(Instant::ZERO),
                network.available(Instant::ZERO)
            ),
            (1, 2, 0)
        );
        assert_eq!(shared.available(Instant::ZERO), 9);
    }

    #[test]
    fn stats_count_this_connection() {
        let mut h = Harness::new(Config::new());
        h.handle(&[]).unwrap();
        let (buf, n) = frame(wire::ECHO, b"abc");
        h.handle(&buf[..n]).unwrap();
        let (stats_req, m) = frame(wire::STATS, &[]);
        let (_, out) = h.handle(&stats_req[..m]).unwrap();
        let (id, data) = packets(out).next().unwrap();
        assert_eq!(id, wire::STATS);
        let s = Stats::parse(data).unwrap();
        assert_eq!(s.connections, 1);
        assert_eq!(s.open_connections, 1);
        assert_eq!(s.frames_in, 2);
        assert_eq!(s.frames_out, 1, "the stats reply itself is counted after");
        assert_eq!(s.bytes_in, (n + m) as u64);
        assert_eq!(s.bytes_out, n as u64);
        h.session.finish(&h.counters, None);
        let s = h.counters.snapshot();
        assert_eq!((s.open_connections, s.frames_out, s.errors), (0, 2, 0));
    }

    #[test]
    fn output_room_is_checked_before_work() {
        let config = Config::new();
        let mut session = Session::new(&config, Instant::ZERO);
        let counters = AtomicCounters::new();
        let mut scratch = [0u8; 8];
        let mut ws = Workspace::new(&mut scratch);
        let (buf, n) = frame(wire::ECHO, &[7; 40]);
        let mut small = [0u8; 10];
        let p = session
            .handle(&buf[..n], &mut small, &mut ws, &counters)
            .unwrap();
        assert_eq!((p.consumed, p.written, p.want), (0, 0, Want::Output(n)));
        let mut big = [0u8; 64];
        let p = session
            .handle(&buf[..n], &mut big, &mut ws, &counters)
            .unwrap();
        assert_eq!(&big[..p.written], &buf[..n]);
        assert!(config.max_output_len() >= frame_len(config.max_packet_len()));
    }

    #[test]
    fn fixed_framing_echoes_payloads() {
        let format = LengthPrefixed::new(Width::U32, Endian::Little, 1 << 20);
        let mut h = Harness::new(
            Config::new()
                .with_framing(Framing::Fixed(format))
                .with_max_packet_len(64)
                // Ignored for fixed framing.
                .with_compression_threshold(5),
        );
        assert_eq!(h.handle(&[]).unwrap().0.written, 0);
        let wire = b"\x03\0\0\0abc\0\0\0\0";
        let (p, out) = h.handle(wire).unwrap();
        assert_eq!((p.consumed, out), (wire.len(), &wire[..]));
        let err = h.handle(b"\x41\0\0\0").unwrap_err();
        assert!(matches!(
            err,
            SessionError::Frame(FrameError::FrameTooLarge { len: 65, max: 64 })
        ));
    }
    /// A client's side of compressed framing.
    struct Client {
        encoder: CompressedEncoder,
        decoder: CompressedDecoder,
        inflater: Box<Inflater>,
        compressor: Box<Compressor<[u32; WORKSPACE_MIN]>>,
    }

    impl Client {
        fn new(threshold: i32) -> Self {
            Client {
                encoder: CompressedEncoder::new(threshold, Level::Quick),
                decoder: CompressedDecoder::new(threshold),
                inflater: Box::new(Inflater::new()),
                compressor: Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap()),
            }
        }

        fn frame(&mut self, id: i32, data: &[u8], out: &mut [u8]) -> usize {
            let mut body = std::vec![0u8; 5 + data.len()];
            let n = crate::varint::encode_varint(id, &mut body).unwrap();
            body[n..n + data.len()].copy_from_slice(data);
            body.truncate(n + data.len());
            self.encoder
                .encode(&body, out, &mut self.compressor)
                .unwrap()
        }

        /// Decodes one reply: (id, data, compressed, consumed).
        fn reply(&mut self, wire: &[u8]) -> (i32, std::vec::Vec<u8>, bool, usize) {
            let mut scratch = [0u8; 1024];
            let d = self
                .decoder
                .decode(wire, &mut self.inflater, &mut scratch)
                .unwrap()
                .complete()
                .unwrap();
            let p = split_packet(d.body).unwrap();
            (p.id, p.data.to_vec(), d.compressed, d.consumed)
        }
    }

    #[test]
    fn compressed_echo_after_greeting() {
        let mut h = Harness::new(
            Config::new()
                .with_max_packet_len(400)
                .with_compression_threshold(64),
        );
        let (_, greeting) = h.handle(&[]).unwrap();
        assert_eq!(greeting, &[0x02, 0x03, 0x40]);
        let mut c = Client::new(64);
        for len in [0usize, 10, 62, 63, 64, 200, 399] {
            let data: std::vec::Vec<u8> = (0..len).map(|i| (i % 7) as u8).collect();
            let mut wire = [0u8; 600];
            let n = c.frame(wire::ECHO, &data, &mut wire);
            let (p, out) = h.handle(&wire[..n]).unwrap();
            assert_eq!(p.consumed, n);
            let out = out.to_vec();
            let (id, echoed, compressed, used) = c.reply(&out);
            assert_eq!((id, &echoed[..], used), (wire::ECHO, &data[..], out.len()));
            assert_eq!(compressed, 1 + len >= 64, "len {len}");
        }
    }

    #[test]
    fn set_compression_switches_mid_connection() {
        let mut h = Harness::new(Config::new().with_max_packet_len(400));
        h.handle(&[]).unwrap();
        let mut plain = Client::new(-1);
        let data = [0x55u8; 300];
        // Uncompressed echo, then a 0x03 request (old format) whose reply is in the old format,
        // and an echo right behind it in the same buffer, already compressed.
        let mut wire = [0u8; 1200];
        let mut at = plain.frame(wire::ECHO, &data, &mut wire);
        at += plain.frame(wire::SET_COMPRESSION, &[0x20], &mut wire[at..]);
        let mut compressed = Client::new(32);
        at += compressed.frame(wire::ECHO, &data, &mut wire[at..]);
        let (p, out) = h.handle(&wire[..at]).unwrap();
        assert_eq!(p.consumed, at);
        let out = out.to_vec();
        let (id, echoed, was, used1) = plain.reply(&out);
        assert_eq!((id, echoed.len(), was), (wire::ECHO, 300, false));
        let (id, t, was, used2) = plain.reply(&out[used1..]);
        assert_eq!(
            (id, &t[..], was),
            (wire::SET_COMPRESSION, &[0x20][..], false)
        );
        let (id, echoed, was, used3) = compressed.reply(&out[used1 + used2..]);
        assert_eq!((id, &echoed[..], was), (wire::ECHO, &data[..], true));
        assert_eq!(used1 + used2 + used3, out.len());
        assert_eq!(h.session.compression_threshold(), 32);
        // And off again: the reply to "-1" is the last compressed frame.
        let mut wire = [0u8; 64];
        let n = compressed.frame(
            wire::SET_COMPRESSION,
            &[0xff, 0xff, 0xff, 0xff, 0x0f],
            &mut wire,
        );
        let m = plain.frame(wire::ECHO, b"plain again", &mut wire[n..]);
        let (_, out) = h.handle(&wire[..n + m]).unwrap();
        let out = out.to_vec();
        let (id, _, _, used) = compressed.reply(&out);
        assert_eq!(id, wire::SET_COMPRESSION);
        let (id, echoed, _, _) = plain.reply(&out[used..]);
        assert_eq!((id, &echoed[..]), (wire::ECHO, &b"plain again"[..]));
    }

    #[test]
    fn compression_bomb_is_refused_before_inflating_past_the_maximum() {
        let mut h = Harness::new(
            Config::new()
                .with_max_packet_len(4096)
                .with_compression_threshold(16),
        );
        h.handle(&[]).unwrap();
        // 1 MiB of zeros compresses to about 1 KiB, declared as such: over the maximum.
        let mut compressor = Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap());
        let zeros = std::vec![0u8; 1 << 20];
        let mut z = std::vec![0u8; crate::zlib::compress_bound(zeros.len())];
        let zn = compressor.compress(Level::Default, &zeros, &mut z).unwrap();
        let mut wire = std::vec![0u8; zn + 16];
        let mut body = std::vec![0u8; 4];
        let dl = crate::varint::encode_varint(1 << 20, &mut body).unwrap();
        let plen = dl + zn;
        let mut at = crate::varint::encode_varint(plen as i32, &mut wire).unwrap();
        wire[at..at + dl].copy_from_slice(&body[..dl]);
        at += dl;
        wire[at..at + zn].copy_from_slice(&z[..zn]);
        at += zn;
        let err = h.handle(&wire[..at]).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::Compressed(CompressedFrameError::DataTooLarge { .. })
            ),
            "{err:?}"
        );
        // The same stream declared as 3000 bytes (within the maximum): inflating stops at 3000
        // and the frame is refused (given room for the reply such a body could lead to).
        let mut h = Harness::with_out_len(
            Config::new()
                .with_max_packet_len(4096)
                .with_compression_threshold(16),
            8192,
        );
        h.handle(&[]).unwrap();
        let mut wire2 = std::vec![0u8; zn + 16];
        let mut at = crate::varint::encode_varint((2 + zn) as i32, &mut wire2).unwrap();
        at += crate::varint::encode_varint(3000, &mut wire2[at..]).unwrap();
        wire2[at..at + zn].copy_from_slice(&z[..zn]);
        at += zn;
        let err = h.handle(&wire2[..at]).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::Compressed(CompressedFrameError::Inflate(_))
            ),
            "{err:?}"
        );
    }

    /// A call ends with `Want::Call` after the frame that takes its zlib work (bodies
    /// inflated and reply bodies compressed) past `CALL_WORK`, however many complete frames
    /// follow; the next call serves them.
    #[test]
    fn a_call_ends_after_the_frame_that_takes_its_zlib_work_past_the_budget() {
        use crate::service::CALL_WORK;
        let config = Config::new()
            .with_max_packet_len(4096)
            .with_compression_threshold(16);
        let mut body = std::vec![wire::ECHO as u8];
        body.extend_from_slice(&[0xABu8; 3999]);
        let mut compressor = Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap());
        let encoder = CompressedEncoder::new(16, Level::Fast);
        let mut one = std::vec![0u8; max_encoded_len(body.len())];
        let n = encoder.encode(&body, &mut one, &mut compressor).unwrap();
        let frames = 20;
        let wire = one[..n].repeat(frames);
        // Each frame inflates 4000 bytes and compresses a 4000-byte reply.
        let per_call = CALL_WORK.div_ceil(2 * body.len());
        assert!(per_call < frames);
        let mut h = Harness::with_out_len(config, 64 * 1024);
        h.handle(&[]).unwrap();
        let mut at = 0;
        let mut calls = 0;
        while at < wire.len() {
            let (p, _) = h.handle(&wire[at..]).unwrap();
            at += p.consumed;
            calls += 1;
            if at < wire.len() {
                assert_eq!((p.consumed, p.want), (per_call * n, Want::Call));
            } else {
                assert_eq!(p.want, Want::Input(crate::Needed::Unknown));
            }
        }
        assert_eq!(calls, frames.div_ceil(per_call));
        assert_eq!(h.counters.snapshot().frames_in, frames as u64);
    }

    /// A compressed frame declaring a Data Length past what its bytes can inflate to (1032
    /// times them) asks for no room for its reply: it is refused as it is decoded. (Room
    /// sized by the declared length alone let a 7-byte frame make the adapter commit about
    /// 1 MiB for it.)
    #[test]
    fn a_data_length_its_frame_cannot_inflate_to_reserves_nothing() {
        use crate::frame::mc::MAX_FRAME_LEN;
        let config = Config::new()
            .with_max_packet_len(MAX_FRAME_LEN)
            .with_compression_threshold(16);
        let declared: i32 = 1 << 20;
        assert!(declared as usize <= config.max_output_len());
        let mut wire = std::vec![0u8; 16];
        let mut body = [0u8; 8];
        let dl = crate::varint::encode_varint(declared, &mut body).unwrap();
        body[dl..dl + 2].copy_from_slice(&[0x78, 0x9c]);
        let at = crate::varint::encode_varint((dl + 2) as i32, &mut wire).unwrap();
        wire[at..at + dl + 2].copy_from_slice(&body[..dl + 2]);
        let mut h = Harness::new(config);
        h.handle(&[]).unwrap();
        // (This harness's scratch holds 4 KiB: refused as too large for it, where an adapter
        // with room for the Data Length maximum gets the inflater's error.)
        let err = h.handle(&wire[..at + dl + 2]).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::Compressed(_) | SessionError::ScratchTooSmall
            ),
            "{err:?}"
        );
    }

    /// A compressed frame whose reply may not fit is put back before it is inflated: the
    /// next call, with room, inflates it once (a frame inflated and then put back for want of
    /// room was inflated again on the next call).
    #[test]
    fn a_compressed_frame_is_not_inflated_before_its_reply_has_room() {
        let config = Config::new()
            .with_max_packet_len(4096)
            .with_compression_threshold(16);
        let data = [0xABu8; 3000];
        let mut body = std::vec![wire::ECHO as u8];
        body.extend_from_slice(&data);
        let mut compressor = Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap());
        let encoder = CompressedEncoder::new(16, Level::Fast);
        let mut wire = std::vec![0u8; max_encoded_len(body.len())];
        let n = encoder.encode(&body, &mut wire, &mut compressor).unwrap();
        let mut h = Harness::new(config);
        let greeting = h.handle(&[]).unwrap().0.written;
        assert!(greeting > 0);
        // 1024 bytes of room: not enough for the echo of 3000.
        let (p, _) = h.handle(&wire[..n]).unwrap();
        assert_eq!(p.consumed, 0);
        assert!(
            matches!(p.want, Want::Output(r) if r > 1024 && r <= config.max_output_len()),
            "{:?}",
            p.want
        );
        assert!(
            h.scratch.iter().all(|&b| b == 0),
            "inflated before the room check"
        );
        let mut h = Harness::with_out_len(config, config.max_output_len());
        h.handle(&[]).unwrap();
        let (p, out) = h.handle(&wire[..n]).unwrap();
        assert_eq!(p.consumed, n);
        let mut scratch = std::vec![0u8; 4096];
        let mut inflater = Box::new(Inflater::new());
        let d = CompressedDecoder::new(16)
            .decode(out, &mut inflater, &mut scratch)
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(d.body, &body[..]);
    }

    /// An echo whose reply cannot be sent (compressed, it is past the frame limit) is not
    /// counted as received, however often it is reported; the frame served before it is
    /// counted once.
    #[test]
    fn a_request_whose_reply_cannot_be_sent_is_not_counted() {
        use crate::frame::mc::MAX_FRAME_LEN;
        let config = Config::new()
            .with_max_packet_len(MAX_FRAME_LEN)
            .with_compression_threshold(256);
        let mut session = Session::new(&config, Instant::ZERO);
        let counters = AtomicCounters::new();
        let mut scratch = std::vec![0u8; MAX_FRAME_LEN];
        let mut inflater = Box::new(Inflater::new());
        let mut compressor = Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap());
        let mut ws = Workspace::with_zlib(&mut scratch, &mut inflater, &mut compressor);
        let mut out = std::vec![0u8; config.max_output_len()];
        let greeting = session.handle(&[], &mut out, &mut ws, &counters).unwrap();
        let opened = counters.snapshot();
        assert_eq!(opened.frames_out, 1);
        let _ = greeting;
        // A small echo, then one of incompressible data as long as a body may be, sent
        // uncompressed (Data Length 0): its reply compresses to more than a frame carries.
        let mut input = std::vec![3, 0, wire::ECHO as u8, 7];
        let mut body = std::vec![wire::ECHO as u8];
        let mut x = 0x9E37_79B9u32;
        body.extend((0..MAX_FRAME_LEN - 8).map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        }));
        let mut field = [0u8; 5];
        let m = crate::varint::encode_varint((1 + body.len()) as i32, &mut field).unwrap();
        input.extend_from_slice(&field[..m]);
        input.push(0);
        input.extend_from_slice(&body);
        let p = session
            .handle(&input, &mut out, &mut ws, &counters)
            .unwrap();
        assert_eq!((p.consumed, p.want), (4, Want::Call));
        for _ in 0..2 {
            assert_eq!(
                session.handle(&input[4..], &mut out, &mut ws, &counters),
                Err(SessionError::ReplyTooLarge)
            );
        }
        let s = counters.snapshot();
        assert_eq!(s.frames_in - opened.frames_in, 1, "{s:?}");
        assert_eq!(s.bytes_in - opened.bytes_in, 4, "{s:?}");
    }

    #[test]
    fn without_zlib() {
        let config = Config::new();
        let mut session = Session::new(&config, Instant::ZERO);
        let counters = AtomicCounters::new();
        let mut scratch = [0u8; 64];
        let mut ws = Workspace::new(&mut scratch);
        let mut out = [0u8; 64];
        let (buf, n) = frame(wire::SET_COMPRESSION, &[0x40]);
        let p = session
            .handle(&buf[..n], &mut out, &mut ws, &counters)
            .unwrap();
        let (id, data) = packets(&out[..p.written]).next().unwrap();
        assert_eq!(id, wire::ERROR);
        assert_eq!(
            ErrorReply::parse(data).unwrap().code,
            ErrorCode::Unsupported
        );
        assert_eq!(session.compression_threshold(), -1);
        let mut session = Session::new(&config.with_compression_threshold(5), Instant::ZERO);
        assert_eq!(
            session.handle(&[], &mut out, &mut ws, &counters),
            Err(SessionError::CompressionUnavailable)
        );
    }
}
