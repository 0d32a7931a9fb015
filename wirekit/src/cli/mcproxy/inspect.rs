//! A route's `[route.inspect]` table: packet rules, handshake bounds, budgets and the framing
//! toward the client, for `mode = "inspect"` (the policy for unknown versions is the route's
//! `unknown-version`, still read here for older files).

use serde::Deserialize;
use wirekit_core::minecraft::budget::{Budget, Budgets, DirectionBudgets};
use wirekit_core::minecraft::conn::UnknownVersion;
use wirekit_core::minecraft::ids::{Direction, KnownPacket, State};
use wirekit_core::minecraft::rules::{
    HandshakeRule, IdRange, NextStates, PacketRule, RuleAction, VersionRange,
};
use wirekit_core::zlib::Level;
use wirekit_proxy::inspect::{ClientCompression, InspectSettings, named_rules};

/// `[route.inspect]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct InspectConfig {
    /// Where older files set the route's `unknown-version` (the route key is read in its
    /// place; the two may not disagree).
    pub unknown_version: Option<String>,
    /// A threshold of the proxy's own toward the client (negative: uncompressed); packets
    /// are then compressed again at `client-level`.
    pub client_threshold: Option<i32>,
    /// `stored`, `quick`, `fast` (default), `medium`, `lazy`, `default`, `thorough` or `best`.
    pub client_level: Option<String>,
    /// The level packets toward the upstream are compressed at when framed again (the same
    /// names). These packets are the client's: `best` lets a client buy many times the
    /// proxy's CPU per byte (the serverbound budgets still bound the bytes).
    pub upstream_level: Option<String>,
    /// Largest packet (ID and data, inflated) from the client (default 262144).
    pub max_serverbound_packet: Option<usize>,
    /// Largest packet from the upstream (default 8388608).
    pub max_clientbound_packet: Option<usize>,
    /// Budgets: `{ rate = N, burst = M }` (burst defaults to the rate; a rate of 0: no
    /// budget). Client-to-upstream packets per second (default 500, burst 3500: Paper's
    /// packet limit).
    pub serverbound_packets: Option<BudgetConfig>,
    /// Client-to-upstream wire bytes per second (absent: the proxy-wide `serverbound-burst`
    /// and `serverbound-rate`).
    pub serverbound_bytes: Option<BudgetConfig>,
    /// Client-to-upstream inflated bytes per second (default 2 MiB, burst 8 MiB).
    pub serverbound_inflated: Option<BudgetConfig>,
    /// Upstream-to-client packets per second.
    pub clientbound_packets: Option<BudgetConfig>,
    /// Upstream-to-client wire bytes per second.
    pub clientbound_bytes: Option<BudgetConfig>,
    /// Upstream-to-client inflated bytes per second.
    pub clientbound_inflated: Option<BudgetConfig>,
    /// `[route.inspect.handshake]`.
    pub handshake: Option<HandshakeConfig>,
    /// `[[route.inspect.rule]]` tables, evaluated in order.
    #[serde(default)]
    pub rule: Vec<RuleConfig>,
}

/// A budget: a rate per second and a burst.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BudgetConfig {
    /// Refilled each second.
    pub rate: u32,
    /// Allowed at once (default: the rate).
    pub burst: Option<u32>,
}

/// `[route.inspect.handshake]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct HandshakeConfig {
    /// Lowest protocol version accepted.
    pub min_version: Option<i32>,
    /// Highest protocol version accepted.
    pub max_version: Option<i32>,
    /// Next states accepted: `status`, `login`, `transfer` (default all).
    pub next_states: Option<Vec<String>>,
    /// Longest host, in UTF-16 code units (a trailing dot not counted), as the core counts it.
    pub max_host_len: Option<u16>,
}

impl HandshakeConfig {
    /// The bounds this table describes.
    pub fn rule(&self) -> Result<HandshakeRule, String> {
        let mut next = NextStates::ALL;
        if let Some(states) = &self.next_states {
            next = NextStates::NONE;
            for s in states {
                next = next.with(match s.as_str() {
                    "status" => NextStates::STATUS,
                    "login" => NextStates::LOGIN,
                    "transfer" => NextStates::TRANSFER,
                    s => {
                        return Err(format!(
                            "handshake next-states {s:?}: status, login or transfer"
                        ));
                    }
                });
            }
        }
        Ok(HandshakeRule {
            versions: VersionRange::new(
                self.min_version.unwrap_or(VersionRange::ALL.min),
                self.max_version.unwrap_or(VersionRange::ALL.max),
            ),
            next_states: next,
            max_host_len: self.max_host_len.unwrap_or(HandshakeRule::ANY.max_host_len),
        })
    }
}

/// `[[route.inspect.rule]]`: a state, a direction, a packet (`id`, `ids = [first, last]` or a
/// named `packet`), an optional version range, and `action = "deny" | "drop"` or `max-len`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RuleConfig {
    /// `handshake`, `status`, `login`, `configuration` or `play`.
    pub state: String,
    /// `serverbound` or `clientbound`.
    pub direction: String,
    /// One packet ID.
    pub id: Option<i32>,
    /// An inclusive ID range.
    pub ids: Option<[i32; 2]>,
    /// A packet by name (`transfer`, `store_cookie`, `keep_alive`...), its ID resolved per
    /// version.
    pub packet: Option<String>,
    /// Lowest protocol version the rule applies to.
    pub min_version: Option<i32>,
    /// Highest protocol version the rule applies to.
    pub max_version: Option<i32>,
    /// `deny` (close) or `drop`.
    pub action: Option<String>,
    /// Close when the packet's data is longer than this.
    pub max_len: Option<u32>,
}

/// Every packet a rule can name.
const NAMED: [KnownPacket; 23] = [
    KnownPacket::Handshake,
    KnownPacket::StatusRequest,
    KnownPacket::StatusResponse,
    KnownPacket::Ping,
    KnownPacket::Pong,
    KnownPacket::LoginStart,
    KnownPacket::EncryptionResponse,
    KnownPacket::LoginPluginResponse,
    KnownPacket::LoginAcknowledged,
    KnownPacket::EncryptionRequest,
    KnownPacket::LoginSuccess,
    KnownPacket::SetCompression,
    KnownPacket::LoginPluginRequest,
    KnownPacket::Disconnect,
    KnownPacket::KeepAlive,
    KnownPacket::FinishConfiguration,
    KnownPacket::FinishConfigurationAck,
    KnownPacket::StartConfiguration,
    KnownPacket::ConfigurationAck,
    KnownPacket::Transfer,
    KnownPacket::CookieRequest,
    KnownPacket::CookieResponse,
    KnownPacket::StoreCookie,
];

fn level(s: Option<&str>, name: &str) -> Result<Level, String> {
    let Some(s) = s else {
        return Ok(Level::Fast);
    };
    Level::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Level::ALL.iter().map(|l| l.name()).collect();
        format!("{name} {s:?}: one of {}", names.join(", "))
    })
}

/// A route's `unknown-version`: `pass` (`opaque`, its older name, too) or `refuse`.
pub fn unknown_version(s: &str) -> Result<UnknownVersion, String> {
    match s {
        "pass" | "opaque" => Ok(UnknownVersion::Opaque),
        "refuse" => Ok(UnknownVersion::Refuse),
        u => Err(format!("unknown-version {u:?}: pass or refuse")),
    }
}

/// A configured budget (`key`): absent, the default; `{ rate = 0 }`, none. A byte budget
/// (`bytes`) left unset falls back to the proxy-wide one, so it cannot be turned off here
/// (`serverbound-burst = 0` and `clientbound-burst = 0` do that, for every route).
fn budget(
    key: &str,
    b: Option<BudgetConfig>,
    default: Option<Budget>,
    bytes: bool,
) -> Result<Option<Budget>, String> {
    match b {
        None => Ok(default),
        Some(b) if b.rate == 0 && b.burst.is_some() => Err(format!(
            "{key}: a rate of 0 turns the budget off; a burst with it means nothing"
        )),
        Some(b) if bytes && b.rate == 0 => Err(format!(
            "{key}: {{ rate = 0 }} would leave the proxy-wide byte budget in force; set its \
             burst to 0 (serverbound-burst, clientbound-burst) to turn that off"
        )),
        Some(b) if b.rate == 0 => Ok(None),
        Some(b) => Ok(Some(Budget::per_second(b.rate, b.burst.unwrap_or(b.rate)))),
    }
}

impl RuleConfig {
    fn rules(&self) -> Result<Vec<PacketRule>, String> {
        let state = State::ALL
            .into_iter()
            .find(|s| s.as_str() == self.state)
            .ok_or_else(|| {
                format!(
                    "rule state {:?}: handshake, status, login, configuration or play",
                    self.state
                )
            })?;
        let direction = Direction::BOTH
            .into_iter()
            .find(|d| d.as_str() == self.direction)
            .ok_or_else(|| {
                format!(
                    "rule direction {:?}: serverbound or clientbound",
                    self.direction
                )
            })?;
        let versions = VersionRange::new(
            self.min_version.unwrap_or(VersionRange::ALL.min),
            self.max_version.unwrap_or(VersionRange::ALL.max),
        );
        let action = match (self.action.as_deref(), self.max_len) {
            (Some("deny"), None) => RuleAction::Deny,
            (Some("drop"), None) => RuleAction::Drop,
            (None, Some(n)) => RuleAction::MaxLen(n),
            _ => return Err("rule: action = \"deny\" or \"drop\", or max-len".into()),
        };
        let one = |ids| PacketRule {
            state,
            direction,
            versions,
            ids,
            action,
        };
        match (self.id, self.ids, self.packet.as_deref()) {
            (Some(id), None, None) => Ok(vec![one(IdRange::one(id))]),
            (None, Some([a, b]), None) => Ok(vec![one(IdRange::new(a, b))]),
            (None, None, Some(name)) => {
                let packet = NAMED
                    .into_iter()
                    .find(|p| p.as_str() == name)
                    .ok_or_else(|| format!("rule packet {name:?}: not a packet the proxy knows"))?;
                let rules = named_rules(state, direction, packet, versions, action);
                if rules.is_empty() {
                    return Err(format!(
                        "rule packet {name:?}: no version in range has it in {} {}",
                        state.as_str(),
                        direction.as_str()
                    ));
                }
                Ok(rules)
            }
            _ => Err("rule: one of id, ids or packet".into()),
        }
    }
}

impl InspectConfig {
    /// The inspect settings this table describes.
    pub fn settings(&self) -> Result<InspectSettings, String> {
        let d = InspectSettings::default();
        let mut rules = Vec::new();
        for r in &self.rule {
            rules.extend(r.rules()?);
        }
        let handshake = match &self.handshake {
            None => HandshakeRule::ANY,
            Some(h) => h.rule()?,
        };
        let settings = InspectSettings {
            rules,
            handshake,
            budgets: Budgets {
                serverbound: DirectionBudgets {
                    packets: budget(
                        "serverbound-packets",
                        self.serverbound_packets,
                        d.budgets.serverbound.packets,
                        false,
                    )?,
                    bytes: budget(
                        "serverbound-bytes",
                        self.serverbound_bytes,
                        d.budgets.serverbound.bytes,
                        true,
                    )?,
                    inflated: budget(
                        "serverbound-inflated",
                        self.serverbound_inflated,
                        d.budgets.serverbound.inflated,
                        false,
                    )?,
                },
                clientbound: DirectionBudgets {
                    packets: budget(
                        "clientbound-packets",
                        self.clientbound_packets,
                        d.budgets.clientbound.packets,
                        false,
                    )?,
                    bytes: budget(
                        "clientbound-bytes",
                        self.clientbound_bytes,
                        d.budgets.clientbound.bytes,
                        true,
                    )?,
                    inflated: budget(
                        "clientbound-inflated",
                        self.clientbound_inflated,
                        d.budgets.clientbound.inflated,
                        false,
                    )?,
                },
            },
            client_compression: match self.client_threshold {
                None => None,
                Some(threshold) => Some(ClientCompression {
                    threshold,
                    level: level(self.client_level.as_deref(), "client-level")?,
                }),
            },
            max_serverbound_packet: self
                .max_serverbound_packet
                .unwrap_or(d.max_serverbound_packet),
            max_clientbound_packet: self
                .max_clientbound_packet
                .unwrap_or(d.max_clientbound_packet),
            upstream_level: level(self.upstream_level.as_deref(), "upstream-level")?,
        };
        // The library's checks (a status rule, for one), at load as for a library user.
        settings.check()?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_inspect_route_is_valid() {
        let readme = include_str!("../../../../README.md");
        let at = readme
            .find("[route.inspect]\n")
            .expect("the inspect example");
        let start = readme[..at].rfind("```toml\n").unwrap() + 8;
        let end = start + readme[start..].find("```").unwrap();
        let file: crate::cli::mcproxy::ProxyArgs = toml::from_str(&readme[start..end]).unwrap();
        let s = file.settings().unwrap();
        // What the proxy checks at start and `--check-config` too.
        s.check().unwrap();
        let i = &s.routes[0].inspect;
        assert_eq!(s.routes[0].mode, wirekit_proxy::Mode::Inspect);
        assert_eq!(s.routes[0].unknown_version, UnknownVersion::Refuse);
        assert_eq!(i.client_compression.map(|c| c.threshold), Some(512));
        assert_eq!(i.handshake.max_host_len, 64);
        // Every budget key of the block is read.
        let cb = i.budgets.clientbound;
        assert_eq!(cb.packets.map(|b| b.burst), Some(40000));
        assert_eq!(cb.bytes.map(|b| b.burst), Some(67108864));
        assert_eq!(cb.inflated.map(|b| b.burst), Some(134217728));
        assert!(i.rules.len() >= 2);
        assert_eq!(i.rules.last().unwrap().action, RuleAction::MaxLen(300));
    }

    #[test]
    fn rules_budgets_and_handshake_from_toml() {
        let c: InspectConfig = toml::from_str(
            r#"
client-threshold = 64
client-level = "quick"
serverbound-packets = { rate = 100, burst = 200 }
[handshake]
min-version = 47
next-states = ["login"]
[[rule]]
state = "play"
direction = "serverbound"
id = 7
action = "deny"
[[rule]]
state = "play"
direction = "clientbound"
packet = "transfer"
action = "drop"
[[rule]]
state = "login"
direction = "serverbound"
ids = [0, 3]
max-len = 300
min-version = 764
"#,
        )
        .unwrap();
        let s = c.settings().unwrap();
        assert_eq!(
            s.client_compression,
            Some(ClientCompression {
                threshold: 64,
                level: Level::Quick
            })
        );
        assert_eq!(
            s.budgets.serverbound.packets,
            Some(Budget::per_second(100, 200))
        );
        // Budgets not named keep their defaults.
        assert_eq!(
            s.budgets.serverbound.inflated,
            InspectSettings::default().budgets.serverbound.inflated
        );
        assert!(s.budgets.serverbound.inflated.is_some());
        assert_eq!(s.budgets.clientbound.packets, None);
        assert_eq!(s.handshake.next_states, NextStates::LOGIN);
        assert_eq!(s.rules[0].action, RuleAction::Deny);
        assert!(s.rules.len() >= 3);
        assert_eq!(s.rules.last().unwrap().action, RuleAction::MaxLen(300));
        assert!(s.check().is_ok());

        for bad in [
            "[[rule]]\nstate = \"play\"\ndirection = \"up\"\nid = 1\naction = \"deny\"\n",
            "[[rule]]\nstate = \"play\"\ndirection = \"serverbound\"\naction = \"deny\"\n",
            "[[rule]]\nstate = \"play\"\ndirection = \"serverbound\"\npacket = \"chat\"\naction = \"deny\"\n",
            "[[rule]]\nstate = \"play\"\ndirection = \"serverbound\"\nid = 1\n",
            "[[rule]]\nstate = \"status\"\ndirection = \"serverbound\"\nid = 1\naction = \"deny\"\n",
        ] {
            let c: InspectConfig = toml::from_str(bad).unwrap();
            assert!(c.settings().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_rate_of_zero_turns_a_default_budget_off() {
        let c: InspectConfig = toml::from_str(
            "serverbound-packets = { rate = 0 }\nserverbound-inflated = { rate = 0 }\n",
        )
        .unwrap();
        let s = c.settings().unwrap();
        assert_eq!(s.budgets.serverbound.packets, None);
        assert_eq!(s.budgets.serverbound.inflated, None);
        let defaults: InspectConfig = toml::from_str("").unwrap();
        let d = defaults.settings().unwrap();
        assert_eq!(d.budgets, InspectSettings::default().budgets);
        assert!(d.budgets.serverbound.packets.is_some());
        // A burst with a rate of 0, or a byte budget "off" (the proxy-wide one would apply):
        // refused, naming the key.
        for (bad, key) in [
            (
                "serverbound-packets = { rate = 0, burst = 5 }\n",
                "serverbound-packets",
            ),
            ("clientbound-bytes = { rate = 0 }\n", "clientbound-bytes"),
        ] {
            let c: InspectConfig = toml::from_str(bad).unwrap();
            let err = c.settings().unwrap_err();
            assert!(err.contains(key), "{err}");
        }
        let c: InspectConfig = toml::from_str("serverbound-bytes = { rate = 4096 }\n").unwrap();
        assert!(c.settings().unwrap().budgets.serverbound.bytes.is_some());
    }
}
