//! A `wirekit proxy` in inspect mode, built through the library, with a [`Filter`] that guards
//! the chat players send against a word: a message that contains it goes on with the word
//! masked (a rewrite, into the buffer the proxy lends: no allocation), a message that is
//! nothing but the word is dropped (the player sees nothing sent; the connection goes on).
//!
//! From 1.19 on, chat may be signed, and a signature covers the text: a signed message is
//! passed as it is (masked, the server would refuse its signature; dropped, the next one's
//! chain), and only unsigned chat (an offline-mode server's, or a client without a chat
//! session) is masked. Nor is a message of those versions dropped: each one also acknowledges
//! the chat its player has seen, which the server checks the next one against, so a message
//! that is only the word is masked whole instead.
//!
//! ```text
//! cargo run -p wirekit-proxy --example chat_filter -- 127.0.0.1:25565 127.0.0.1:25566 creeper
//! ```
//!
//! The upstream must be an offline-mode server (or a backend behind Velocity/BungeeCord):
//! online-mode traffic is encrypted from the client's Encryption Response on, and the proxy
//! relays it unread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;
use wirekit_core::minecraft::ids::{Direction, State};
use wirekit_core::minecraft::read_string;
use wirekit_core::varint::encode_varint;
use wirekit_proxy::filter::{Filter, FilterAction, PacketView};
use wirekit_proxy::inspect::FilterFactory;
use wirekit_proxy::{Mode, Proxy, Route, Settings};

/// The serverbound play ID of the chat message (its data starts with the text) in a few
/// releases; the filter passes chat of other versions untouched.
fn chat_id(protocol: i32) -> Option<i32> {
    match protocol {
        47 => Some(0x01),  // 1.8.x: Chat Message
        340 => Some(0x02), // 1.12.2
        765 => Some(0x05), // 1.20.3-1.20.4: Chat Message (signed chat)
        769 => Some(0x07), // 1.21.4
        775 => Some(0x09), // 26.1
        _ => None,
    }
}

/// The first protocol version (1.19) whose chat messages may carry a signature.
const SIGNED_CHAT: i32 = 759;

/// Masks `word` (ASCII, matched case-insensitively) in chat, or drops a message that is only
/// the word (before 1.19); counts what it touched.
struct GuardWord {
    word: String,
    masked: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

impl Filter for GuardWord {
    fn filter(&mut self, p: &PacketView<'_>, rewrite: &mut [u8]) -> FilterAction {
        let chat = p.state == State::Play
            && p.direction == Direction::Serverbound
            && chat_id(p.protocol_version) == Some(p.id);
        if !chat {
            return FilterAction::Pass;
        }
        // Chat text is a String(256) at the start of the data; anything that does not parse is
        // the upstream's to refuse.
        let Ok((text, consumed)) = read_string(p.data, 256) else {
            return FilterAction::Pass;
        };
        let word = self.word.as_bytes();
        // 1.19+: the text, a timestamp and a salt (8 bytes each), then whether a signature
        // follows.
        let signed_era = p.protocol_version >= SIGNED_CHAT;
        if signed_era && p.data.get(consumed + 16) != Some(&0) {
            return FilterAction::Pass;
        }
        if !signed_era && text.trim().eq_ignore_ascii_case(&self.word) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return FilterAction::Drop;
        }
        if matches(text.as_bytes(), word).next().is_none() {
            return FilterAction::Pass;
        }
        // The new body: the ID, then the data with the word's bytes turned to asterisks. The
        // word is ASCII, so every match is at a character boundary and the string keeps its
        // length: the fields after it (a signed message's timestamp and salt) stay in place.
        let Ok(n) = encode_varint(p.id, rewrite) else {
            return FilterAction::Pass;
        };
        let Some(body) = rewrite.get_mut(n..n + p.data.len()) else {
            return FilterAction::Pass;
        };
        body.copy_from_slice(p.data);
        // The text's bytes follow its length prefix.
        let start = consumed - text.len();
        for at in matches(text.as_bytes(), word) {
            body[start + at..start + at + word.len()].fill(b'*');
        }
        self.masked.fetch_add(1, Ordering::Relaxed);
        FilterAction::Rewrite(n + p.data.len())
    }
}

/// Where `word` (ASCII) occurs in `text`, case-insensitively, without overlaps: a scan over
/// the bytes, with no lowercased copy of each message.
fn matches<'a>(text: &'a [u8], word: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    let mut at = 0;
    std::iter::from_fn(move || {
        while !word.is_empty() && at + word.len() <= text.len() {
            let i = at;
            at += 1;
            if text[i..i + word.len()].eq_ignore_ascii_case(word) {
                at = i + word.len();
                return Some(i);
            }
        }
        None
    })
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream), Some(word)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: chat_filter LISTEN UPSTREAM WORD");
        std::process::exit(2);
    };
    // The mask keeps the text's length only for ASCII (one byte, one UTF-16 unit a
    // character); an empty word would match everywhere.
    if word.is_empty() || !word.is_ascii() || word.trim() != word {
        eprintln!("chat_filter: WORD must be non-empty ASCII without surrounding spaces");
        std::process::exit(2);
    }
    let parse = |s: &str| -> SocketAddr { s.parse().expect("an address, host:port") };
    let mut route = Route::new(Vec::new(), vec![parse(&upstream)]);
    route.default = true;
    route.mode = Mode::Inspect;
    let settings = Settings {
        listen: vec![parse(&listen)],
        routes: vec![route],
        ..Settings::default()
    };
    let proxy = Proxy::bind(settings).await?;
    let (masked, dropped) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let word = word.to_ascii_lowercase();
    let counters = (masked.clone(), dropped.clone());
    let factory: FilterFactory = Arc::new(move |_route: &str| {
        Box::new(GuardWord {
            word: word.clone(),
            masked: counters.0.clone(),
            dropped: counters.1.clone(),
        })
    });
    proxy.set_filter(factory);
    println!("listening on {:?}", proxy.local_addrs());
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    proxy.run(shutdown).await?;
    println!(
        "masked {} chat message(s), dropped {}",
        masked.load(Ordering::Relaxed),
        dropped.load(Ordering::Relaxed)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use wirekit_core::minecraft::encode_string;

    use super::*;

    fn guard() -> GuardWord {
        GuardWord {
            word: "creeper".into(),
            masked: Arc::default(),
            dropped: Arc::default(),
        }
    }

    /// An unsigned 1.20.4 chat message's data: the text, then the fields after it
    /// (timestamp, salt, no signature, the acknowledgement of chat seen).
    fn chat(text: &str) -> Vec<u8> {
        let mut data = vec![0u8; 3 + 3 * text.len()];
        let n = encode_string(text, 256, &mut data).unwrap();
        data.truncate(n);
        data.extend_from_slice(&[0xAA; 16]);
        data.extend_from_slice(&[0, 2, 0b11, 0, 0]);
        data
    }

    /// The same message signed (a 256-byte signature after the flag).
    fn signed(text: &str) -> Vec<u8> {
        let mut data = chat(text);
        let flag = data.len() - 5;
        data[flag] = 1;
        data.splice(flag + 1..flag + 1, [0x5A; 256]);
        data
    }

    fn view(data: &[u8]) -> PacketView<'_> {
        PacketView {
            direction: Direction::Serverbound,
            state: State::Play,
            protocol_version: 765,
            id: 0x05,
            data,
            known: None,
            control: false,
        }
    }

    /// A 1.12.2 chat message (the text alone).
    fn old_chat(text: &str) -> Vec<u8> {
        let mut data = vec![0u8; 3 + 3 * text.len()];
        let n = encode_string(text, 256, &mut data).unwrap();
        data.truncate(n);
        data
    }

    fn old_view(data: &[u8]) -> PacketView<'_> {
        PacketView {
            protocol_version: 340,
            id: 0x02,
            ..view(data)
        }
    }

    /// The word is masked in place whatever its case (the string's length and the fields
    /// after it unchanged), a message of the word alone is dropped before 1.19 and masked
    /// whole after, a signed message passes as it is, and others pass.
    #[test]
    fn masks_drops_and_passes() {
        let mut g = guard();
        let mut rewrite = [0u8; 512];
        let data = chat("a Creeper, a CREEPER!");
        let FilterAction::Rewrite(n) = g.filter(&view(&data), &mut rewrite) else {
            panic!("not rewritten")
        };
        let mut want = vec![0x05];
        want.extend_from_slice(&chat("a *******, a *******!"));
        assert_eq!(&rewrite[..n], &want[..]);
        // Alone, the word is masked whole: the message's acknowledgement still reaches the
        // server.
        let FilterAction::Rewrite(n) = g.filter(&view(&chat(" creeper ")), &mut rewrite) else {
            panic!("not rewritten")
        };
        let mut want = vec![0x05];
        want.extend_from_slice(&chat(" ******* "));
        assert_eq!(&rewrite[..n], &want[..]);
        // Signed, it is not touched: its signature covers the text.
        assert_eq!(
            g.filter(&view(&signed("a creeper")), &mut rewrite),
            FilterAction::Pass
        );
        assert_eq!(
            g.filter(&view(&signed("creeper")), &mut rewrite),
            FilterAction::Pass
        );
        // Before 1.19 a message of the word alone is dropped.
        assert_eq!(
            g.filter(&old_view(&old_chat(" creeper ")), &mut rewrite),
            FilterAction::Drop
        );
        let FilterAction::Rewrite(n) = g.filter(&old_view(&old_chat("Creeper!")), &mut rewrite)
        else {
            panic!("not rewritten")
        };
        let mut want = vec![0x02];
        want.extend_from_slice(&old_chat("*******!"));
        assert_eq!(&rewrite[..n], &want[..]);
        assert_eq!(
            g.filter(&view(&chat("hello")), &mut rewrite),
            FilterAction::Pass
        );
        assert_eq!(
            (
                g.masked.load(Ordering::Relaxed),
                g.dropped.load(Ordering::Relaxed)
            ),
            (3, 1)
        );
        // Other packets, directions and versions pass untouched.
        let mut other = view(&data);
        other.direction = Direction::Clientbound;
        assert_eq!(g.filter(&other, &mut rewrite), FilterAction::Pass);
        let mut other = view(&data);
        other.protocol_version = 766;
        assert_eq!(g.filter(&other, &mut rewrite), FilterAction::Pass);
        // A rewrite buffer too small for the body: passed, not cut.
        assert_eq!(
            g.filter(&view(&data), &mut rewrite[..8]),
            FilterAction::Pass
        );
    }

    #[test]
    fn matches_finds_each_occurrence_without_overlap() {
        let at: Vec<usize> = matches(b"aaaa", b"aa").collect();
        assert_eq!(at, [0, 2]);
        assert_eq!(matches(b"abc", b"").count(), 0);
        assert_eq!(matches(b"ab", b"abc").count(), 0);
    }
}
