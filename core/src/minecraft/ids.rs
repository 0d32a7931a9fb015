//! The packet IDs a proxy must recognise, per connection state, direction and protocol version.
//!
//! Not every packet: only the ones that move the connection between states, carry a compression
//! threshold, end it or hand it elsewhere (Disconnect, Transfer, cookies, keep-alive), from 1.8
//! (protocol 47) to the newest release minecraft-data describes (26.1, protocol 775). A
//! connection's version is fixed at the handshake, so [`PacketIds::for_version`] resolves the
//! whole table once and [`PacketIds::identify`] is a handful of integer compares.
//!
//! Source: minecraft-data (PrismarineJS, npm `minecraft-data`), `data/pc/<version>/protocol.json`,
//! the `mappings` of each state's `packet` switch, read for every release from 1.8 to 26.1 and
//! written here as ranges (an entry holds from its version to the next entry's). Releases
//! minecraft-data has no directory for (1.9.1 = 108, 1.14.2 = 485) sit between releases with
//! identical tables and take theirs.

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Direction {
    /// Client to server.
    Serverbound,
    /// Server to client.
    Clientbound,
}

impl Direction {
    /// Both directions, serverbound first (the index [`Direction::index`] gives).
    pub const BOTH: [Direction; 2] = [Direction::Serverbound, Direction::Clientbound];

    /// 0 for serverbound, 1 for clientbound: an index into per-direction arrays.
    pub const fn index(self) -> usize {
        match self {
            Direction::Serverbound => 0,
            Direction::Clientbound => 1,
        }
    }

    /// A short name (`"serverbound"`, `"clientbound"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::Serverbound => "serverbound",
            Direction::Clientbound => "clientbound",
        }
    }
}

/// The protocol state a packet is read in (each direction has its own, see
/// [`conn`](super::conn)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum State {
    /// The first packet: Handshake.
    Handshake,
    /// Server-list ping: Status Request/Response, Ping/Pong.
    Status,
    /// Login, up to Login Success (and its acknowledgement from 1.20.2).
    Login,
    /// Configuration (1.20.2+): between login and play, and again when the server restarts it.
    Configuration,
    /// Play.
    Play,
}

impl State {
    /// Every state, in protocol order.
    pub const ALL: [State; 5] = [
        State::Handshake,
        State::Status,
        State::Login,
        State::Configuration,
        State::Play,
    ];

    /// A short name (`"handshake"`, `"status"`, `"login"`, `"configuration"`, `"play"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Handshake => "handshake",
            State::Status => "status",
            State::Login => "login",
            State::Configuration => "configuration",
            State::Play => "play",
        }
    }
}

/// Protocol numbers of the releases the table knows (minecraft-data's `protocolVersions.json`
/// releases, 1.8 to 26.1): a version not listed is a snapshot, older or newer, and gets the
/// connection's unknown-version policy. minecraft-data 3.119 names 26.2 (776) and 26.3 (777)
/// releases but has no packet data for them yet: until it does, their clients meet that policy
/// too (carried opaque after the handshake by default, refused under `Refuse`).
pub const RELEASES: [i32; 48] = [
    47, 107, 108, 109, 110, 210, 315, 316, 335, 338, 340, 393, 401, 404, 477, 480, 485, 490, 498,
    573, 575, 578, 735, 736, 751, 753, 754, 755, 756, 757, 758, 759, 760, 761, 762, 763, 764, 765,
    766, 767, 768, 769, 770, 771, 772, 773, 774, 775,
];

/// The protocol number a status handshake carries when the client only probes (to learn the
/// server's version): no release's, and never refused as an unknown version.
pub const STATUS_PROBE: i32 = -1;

/// The oldest release handled (1.8).
pub const OLDEST: i32 = 47;
/// The newest release handled (26.1).
pub const NEWEST: i32 = 775;

/// 1.13: login plugin messages.
pub const V1_13: i32 = 393;
/// 1.20.2: the configuration state, Login Acknowledged.
pub const V1_20_2: i32 = 764;
/// 1.20.3: Disconnect in configuration and play carries an NBT text component.
pub const V1_20_3: i32 = 765;
/// 1.20.5: Transfer, cookies, handshake next state 3.
pub const V1_20_5: i32 = 766;

/// Whether `version` is a release the table knows.
pub fn is_release(version: i32) -> bool {
    RELEASES.binary_search(&version).is_ok()
}

/// A packet the proxy's state machine recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum KnownPacket {
    /// Handshake (serverbound, handshake state).
    Handshake,
    /// Status Request (serverbound).
    StatusRequest,
    /// Status Response (clientbound).
    StatusResponse,
    /// Ping Request (serverbound, status).
    Ping,
    /// Pong Response (clientbound, status).
    Pong,
    /// Login Start (serverbound).
    LoginStart,
    /// Encryption Response (serverbound).
    EncryptionResponse,
    /// Login Plugin Response (serverbound, 1.13+).
    LoginPluginResponse,
    /// Login Acknowledged (serverbound, 1.20.2+): the client enters configuration.
    LoginAcknowledged,
    /// Encryption Request (clientbound): everything after it is encrypted.
    EncryptionRequest,
    /// Login Success (clientbound).
    LoginSuccess,
    /// Set Compression (clientbound; login, and play in 1.8).
    SetCompression,
    /// Login Plugin Request (clientbound, 1.13+).
    LoginPluginRequest,
    /// Disconnect (clientbound; login, configuration, play).
    Disconnect,
    /// Keep Alive (both directions; configuration, play).
    KeepAlive,
    /// Finish Configuration (clientbound, 1.20.2+).
    FinishConfiguration,
    /// Acknowledge Finish Configuration (serverbound, 1.20.2+): the client enters play.
    FinishConfigurationAck,
    /// Start Configuration (clientbound, play, 1.20.2+).
    StartConfiguration,
    /// Acknowledge Configuration (serverbound, play, 1.20.2+): the client re-enters configuration.
    ConfigurationAck,
    /// Transfer (clientbound; configuration, play; 1.20.5+).
    Transfer,
    /// Cookie Request (clientbound; login, configuration, play; 1.20.5+).
    CookieRequest,
    /// Cookie Response (serverbound; login, configuration, play; 1.20.5+).
    CookieResponse,
    /// Store Cookie (clientbound; configuration, play; 1.20.5+).
    StoreCookie,
}

impl KnownPacket {
    /// A short name, for logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            KnownPacket::Handshake => "handshake",
            KnownPacket::StatusRequest => "status_request",
            KnownPacket::StatusResponse => "status_response",
            KnownPacket::Ping => "ping",
            KnownPacket::Pong => "pong",
            KnownPacket::LoginStart => "login_start",
            KnownPacket::EncryptionResponse => "encryption_response",
            KnownPacket::LoginPluginResponse => "login_plugin_response",
            KnownPacket::LoginAcknowledged => "login_acknowledged",
            KnownPacket::EncryptionRequest => "encryption_request",
            KnownPacket::LoginSuccess => "login_success",
            KnownPacket::SetCompression => "set_compression",
            KnownPacket::LoginPluginRequest => "login_plugin_request",
            KnownPacket::Disconnect => "disconnect",
            KnownPacket::KeepAlive => "keep_alive",
            KnownPacket::FinishConfiguration => "finish_configuration",
            KnownPacket::FinishConfigurationAck => "finish_configuration_ack",
            KnownPacket::StartConfiguration => "start_configuration",
            KnownPacket::ConfigurationAck => "configuration_ack",
            KnownPacket::Transfer => "transfer",
            KnownPacket::CookieRequest => "cookie_request",
            KnownPacket::CookieResponse => "cookie_response",
            KnownPacket::StoreCookie => "store_cookie",
        }
    }
}

/// No such packet in this version.
const NONE: i32 = -1;

use Direction::{Clientbound as C, Serverbound as S};
use KnownPacket as K;

/// The packets of each state that has version-dependent IDs, in table column order.
const LOGIN: [(KnownPacket, Direction); 11] = [
    (K::LoginStart, S),
    (K::EncryptionResponse, S),
    (K::LoginPluginResponse, S),
    (K::LoginAcknowledged, S),
    (K::CookieResponse, S),
    (K::Disconnect, C),
    (K::EncryptionRequest, C),
    (K::LoginSuccess, C),
    (K::SetCompression, C),
    (K::LoginPluginRequest, C),
    (K::CookieRequest, C),
];
const CONFIGURATION: [(KnownPacket, Direction); 9] = [
    (K::CookieResponse, S),
    (K::FinishConfigurationAck, S),
    (K::KeepAlive, S),
    (K::CookieRequest, C),
    (K::Disconnect, C),
    (K::FinishConfiguration, C),
    (K::KeepAlive, C),
    (K::StoreCookie, C),
    (K::Transfer, C),
];
const PLAY: [(KnownPacket, Direction); 10] = [
    (K::Disconnect, C),
    (K::KeepAlive, C),
    (K::KeepAlive, S),
    (K::StartConfiguration, C),
    (K::ConfigurationAck, S),
    (K::Transfer, C),
    (K::CookieRequest, C),
    (K::CookieResponse, S),
    (K::StoreCookie, C),
    (K::SetCompression, C),
];

/// Login IDs: fixed since 1.8, with packets added in 1.13, 1.20.2 and 1.20.5.
const fn login_row(v: i32) -> [i32; 11] {
    let plugin = v >= V1_13;
    let ack = v >= V1_20_2;
    let cookie = v >= V1_20_5;
    [
        0x00,
        0x01,
        if plugin { 0x02 } else { NONE },
        if ack { 0x03 } else { NONE },
        if cookie { 0x04 } else { NONE },
        0x00,
        0x01,
        0x02,
        0x03,
        if plugin { 0x04 } else { NONE },
        if cookie { 0x05 } else { NONE },
    ]
}

/// Configuration IDs (columns of [`CONFIGURATION`]), from the version each row starts at.
#[rustfmt::skip]
const CONFIGURATION_ROWS: [(i32, [i32; 9]); 2] = [
    (764, [NONE, 0x02, 0x03, NONE, 0x01, 0x02, 0x03, NONE, NONE]),
    (766, [0x01, 0x03, 0x04, 0x00, 0x02, 0x03, 0x04, 0x0a, 0x0b]),
];

/// Play IDs (columns of [`PLAY`]), from the version each row starts at.
#[rustfmt::skip]
const PLAY_ROWS: [(i32, [i32; 10]); 22] = [
    (47,  [0x40, 0x00, 0x00, NONE, NONE, NONE, NONE, NONE, NONE, 0x46]),
    (107, [0x1a, 0x1f, 0x0b, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (335, [0x1a, 0x1f, 0x0c, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (338, [0x1a, 0x1f, 0x0b, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (393, [0x1b, 0x21, 0x0e, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (477, [0x1a, 0x20, 0x0f, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (573, [0x1b, 0x21, 0x0f, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (735, [0x1a, 0x20, 0x10, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (751, [0x19, 0x1f, 0x10, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (755, [0x1a, 0x21, 0x0f, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (759, [0x17, 0x1e, 0x11, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (760, [0x19, 0x20, 0x12, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (761, [0x17, 0x1f, 0x11, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (762, [0x1a, 0x23, 0x12, NONE, NONE, NONE, NONE, NONE, NONE, NONE]),
    (764, [0x1b, 0x24, 0x14, 0x65, 0x0b, NONE, NONE, NONE, NONE, NONE]),
    (765, [0x1b, 0x24, 0x15, 0x67, 0x0b, NONE, NONE, NONE, NONE, NONE]),
    (766, [0x1d, 0x26, 0x18, 0x69, 0x0c, 0x73, 0x16, 0x11, 0x6b, NONE]),
    (768, [0x1d, 0x27, 0x1a, 0x70, 0x0e, 0x7a, 0x16, 0x13, 0x72, NONE]),
    (770, [0x1c, 0x26, 0x1a, 0x6f, 0x0e, 0x7a, 0x15, 0x13, 0x71, NONE]),
    (771, [0x1c, 0x26, 0x1b, 0x6f, 0x0f, 0x7a, 0x15, 0x14, 0x71, NONE]),
    (773, [0x20, 0x2b, 0x1b, 0x74, 0x0f, 0x7f, 0x15, 0x14, 0x76, NONE]),
    (775, [0x20, 0x2c, 0x1c, 0x76, 0x10, 0x81, 0x15, 0x15, 0x78, NONE]),
];

/// The row in effect at `v`: the last one starting at or before it.
fn row_at<const N: usize, const R: usize>(rows: &[(i32, [i32; N]); R], v: i32) -> [i32; N] {
    let mut found = [NONE; N];
    for (from, row) in rows {
        if *from <= v {
            found = *row;
        }
    }
    found
}

/// The recognised packet IDs of one protocol version, resolved once per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PacketIds {
    version: i32,
    login: [i32; 11],
    configuration: [i32; 9],
    play: [i32; 10],
}

impl PacketIds {
    /// The table for `version`. A version outside [`OLDEST`]..=[`NEWEST`] gets the nearest
    /// release's login IDs and no configuration or play IDs (the connection machine does not
    /// parse such a connection past the handshake).
    pub fn for_version(version: i32) -> PacketIds {
        let known = (OLDEST..=NEWEST).contains(&version);
        PacketIds {
            version,
            login: login_row(version),
            configuration: if known {
                row_at(&CONFIGURATION_ROWS, version)
            } else {
                [NONE; 9]
            },
            play: if known {
                row_at(&PLAY_ROWS, version)
            } else {
                [NONE; 10]
            },
        }
    }

    /// The protocol version the table is for.
    pub const fn version(&self) -> i32 {
        self.version
    }

    fn columns(&self, state: State) -> (&'static [(KnownPacket, Direction)], &[i32]) {
        match state {
            State::Handshake => (&[(K::Handshake, S)], &[0x00]),
            State::Status => (
                &[
                    (K::StatusRequest, S),
                    (K::Ping, S),
                    (K::StatusResponse, C),
                    (K::Pong, C),
                ],
                &[0x00, 0x01, 0x00, 0x01],
            ),
            State::Login => (&LOGIN, &self.login),
            State::Configuration => (&CONFIGURATION, &self.configuration),
            State::Play => (&PLAY, &self.play),
        }
    }

    /// Which recognised packet `id` is in `state` and `direction`, if any.
    #[inline]
    pub fn identify(&self, state: State, direction: Direction, id: i32) -> Option<KnownPacket> {
        if id < 0 {
            return None;
        }
        let (names, ids) = self.columns(state);
        names
            .iter()
            .zip(ids)
            .find(|((_, d), i)| *d == direction && **i == id)
            .map(|((k, _), _)| *k)
    }

    /// The ID of `packet` in `state` and `direction`, if this version has it there.
    pub fn id(&self, state: State, direction: Direction, packet: KnownPacket) -> Option<i32> {
        let (names, ids) = self.columns(state);
        names
            .iter()
            .zip(ids)
            .find(|((k, d), i)| *k == packet && *d == direction && **i != NONE)
            .map(|(_, i)| *i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_sorted_and_bounded() {
        assert!(RELEASES.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(RELEASES[0], OLDEST);
        assert_eq!(RELEASES[RELEASES.len() - 1], NEWEST);
        assert!(PLAY_ROWS.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(is_release(769) && is_release(485) && !is_release(750) && !is_release(776));
    }

    /// Spot checks against minecraft-data's protocol.json for the releases the proxy's
    /// interop tests use.
    #[test]
    fn known_ids() {
        let v47 = PacketIds::for_version(47);
        assert_eq!(v47.identify(State::Play, C, 0x46), Some(K::SetCompression));
        assert_eq!(v47.id(State::Play, C, K::Disconnect), Some(0x40));
        assert_eq!(v47.id(State::Login, S, K::LoginPluginResponse), None);
        assert_eq!(v47.id(State::Configuration, C, K::Disconnect), None);

        let v340 = PacketIds::for_version(340);
        assert_eq!(v340.id(State::Play, C, K::Disconnect), Some(0x1a));
        assert_eq!(v340.id(State::Play, S, K::KeepAlive), Some(0x0b));
        assert_eq!(v340.id(State::Play, C, K::SetCompression), None);

        let v765 = PacketIds::for_version(765);
        assert_eq!(v765.id(State::Play, C, K::StartConfiguration), Some(0x67));
        assert_eq!(v765.id(State::Play, S, K::ConfigurationAck), Some(0x0b));
        assert_eq!(
            v765.identify(State::Configuration, S, 0x02),
            Some(K::FinishConfigurationAck)
        );
        assert_eq!(v765.id(State::Login, S, K::LoginAcknowledged), Some(0x03));
        assert_eq!(v765.id(State::Configuration, C, K::Transfer), None);

        let v769 = PacketIds::for_version(769);
        assert_eq!(v769.id(State::Play, C, K::StartConfiguration), Some(0x70));
        assert_eq!(v769.id(State::Play, S, K::ConfigurationAck), Some(0x0e));
        assert_eq!(v769.id(State::Play, C, K::Transfer), Some(0x7a));
        assert_eq!(
            v769.id(State::Configuration, C, K::FinishConfiguration),
            Some(0x03)
        );
        assert_eq!(v769.id(State::Configuration, C, K::Disconnect), Some(0x02));
        assert_eq!(v769.id(State::Login, C, K::CookieRequest), Some(0x05));

        let v775 = PacketIds::for_version(775);
        assert_eq!(v775.id(State::Play, C, K::StartConfiguration), Some(0x76));
        assert_eq!(v775.id(State::Play, S, K::ConfigurationAck), Some(0x10));
        assert_eq!(v775.id(State::Play, C, K::Transfer), Some(0x81));

        // 1.9.1 and 1.14.2, absent from minecraft-data, take their neighbours' rows.
        assert_eq!(
            PacketIds::for_version(108).play,
            PacketIds::for_version(107).play
        );
        assert_eq!(
            PacketIds::for_version(485).play,
            PacketIds::for_version(480).play
        );
    }

    #[test]
    fn identify_and_id_agree() {
        for &v in &RELEASES {
            let t = PacketIds::for_version(v);
            for state in State::ALL {
                for d in Direction::BOTH {
                    for id in 0..0x100 {
                        if let Some(k) = t.identify(state, d, id) {
                            assert_eq!(t.id(state, d, k), Some(id), "{v} {state:?} {d:?}");
                        }
                    }
                    assert_eq!(t.identify(state, d, -1), None);
                }
            }
        }
    }
}
