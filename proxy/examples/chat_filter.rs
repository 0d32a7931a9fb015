//! A `wirekit proxy` in inspect mode, built through the library, with a [`Filter`] that drops
//! the chat messages players send when they contain a word (the player sees nothing sent; the
//! connection goes on).
//!
//! ```text
//! cargo run -p wirekit-proxy --example chat_filter -- 127.0.0.1:25565 127.0.0.1:25566 creeper
//! ```
//!
//! The upstream must be an offline-mode server (or a backend behind Velocity/BungeeCord):
//! online-mode traffic is encrypted after Encryption Request, and the proxy relays it unread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;
use wirekit_core::minecraft::filter::{Filter, FilterAction, PacketView};
use wirekit_core::minecraft::ids::{Direction, State};
use wirekit_core::minecraft::read_string;
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

/// Drops chat containing `word` (ASCII case-insensitively), counting what it dropped.
struct DropWord {
    word: String,
    dropped: Arc<AtomicU64>,
}

impl Filter for DropWord {
    fn filter(&mut self, p: &PacketView<'_>, _rewrite: &mut [u8]) -> FilterAction {
        let chat = p.state == State::Play
            && p.direction == Direction::Serverbound
            && chat_id(p.protocol_version) == Some(p.id);
        if !chat {
            return FilterAction::Pass;
        }
        // Chat text is a String(256); anything that does not parse is the upstream's to refuse.
        match read_string(p.data, 256) {
            Ok((text, _)) if text.to_ascii_lowercase().contains(&self.word) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                FilterAction::Drop
            }
            _ => FilterAction::Pass,
        }
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream), Some(word)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: chat_filter LISTEN UPSTREAM WORD");
        std::process::exit(2);
    };
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
    let dropped = Arc::new(AtomicU64::new(0));
    let word = word.to_ascii_lowercase();
    let counter = dropped.clone();
    let factory: FilterFactory = Arc::new(move |_route: &str| {
        Box::new(DropWord {
            word: word.clone(),
            dropped: counter.clone(),
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
        "dropped {} chat message(s)",
        dropped.load(Ordering::Relaxed)
    );
    Ok(())
}
