//! The public-address classifier: may the gate dial this resolved address?
//!
//! One table-driven classifier with one closed set of reasons. IPv4 is a denylist of
//! special-purpose blocks; IPv6 is an allowlist (`2000::/3` minus its special-purpose blocks).
//! The IPv4 carriers `::ffff:0:0/96` (IPv4-mapped) and `64:ff9b::/96` (NAT64 well-known prefix)
//! are judged by the IPv4 address they embed; every other IPv6 form that embeds IPv4
//! (IPv4-compatible `::a.b.c.d`, IPv4-translated, 6to4, Teredo, the local-use NAT64 prefix
//! `64:ff9b:1::/48`) is refused whole, whatever it embeds.
//!
//! Blocks are matched in table order, so a more specific block sits before the block that
//! contains it (0.0.0.0/32 before 0.0.0.0/8, Teredo before `2001::/23`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[cfg(test)]
mod tests;

/// Whether an address may be dialled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// A publicly routable unicast address: the gate may dial it.
    Public,
    /// Not public, for this reason.
    Refused(Reason),
}

impl Verdict {
    /// Returns true if and only if the verdict is [`Verdict::Public`].
    pub fn is_public(self) -> bool {
        self == Verdict::Public
    }
}

/// Why an address is not public. Closed: every refusal names exactly one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The unspecified address, `0.0.0.0` or `::`.
    Unspecified,
    /// "This network", `0.0.0.0/8` (RFC 791, RFC 6890).
    ThisNetwork,
    /// Private-use, `10/8`, `172.16/12`, `192.168/16` (RFC 1918).
    Private,
    /// Shared address space (carrier-grade NAT), `100.64.0.0/10` (RFC 6598).
    SharedAddressSpace,
    /// Loopback, `127/8` and `::1`.
    Loopback,
    /// Link-local, `169.254/16` (cloud metadata lives here) and `fe80::/10`.
    LinkLocal,
    /// IETF protocol assignments, `192.0.0.0/24` and `2001::/23` (RFC 6890).
    IetfProtocolAssignments,
    /// Documentation, TEST-NET-1/2/3, `2001:db8::/32` and `3fff::/20` (RFC 5737, 3849, 9637).
    Documentation,
    /// The deprecated 6to4 relay anycast block, `192.88.99.0/24` (RFC 7526).
    SixToFourRelayAnycast,
    /// Benchmarking, `198.18.0.0/15` (RFC 2544) and `2001:2::/48` (RFC 5180).
    Benchmarking,
    /// Multicast, `224.0.0.0/4` and `ff00::/8`.
    Multicast,
    /// Limited broadcast, `255.255.255.255`.
    Broadcast,
    /// Reserved for future use, `240.0.0.0/4` (RFC 1112).
    Reserved,
    /// Deprecated IPv4-compatible IPv6, `::a.b.c.d` (`::/96`, RFC 4291).
    Ipv4Compatible,
    /// IPv4-translated IPv6, `::ffff:0:0:0/96` (SIIT, RFC 2765).
    Ipv4Translated,
    /// Local-use NAT64 prefix, `64:ff9b:1::/48` (RFC 8215).
    Nat64LocalUse,
    /// Discard-only, `100::/64` (RFC 6666).
    DiscardOnly,
    /// Unique local, `fc00::/7` (RFC 4193).
    UniqueLocal,
    /// Deprecated site-local, `fec0::/10` (RFC 3879).
    SiteLocal,
    /// Teredo, `2001::/32` (RFC 4380): embeds IPv4 that a relay would reach for us.
    Teredo,
    /// 6to4, `2002::/16` (RFC 3056): embeds IPv4 that a relay would reach for us.
    SixToFour,
    /// IPv6 outside the global unicast space `2000::/3`.
    NotGlobalUnicast,
    /// The text carried a zone id (`%`), which names a local interface.
    ZoneId,
    /// The text is not an IP address.
    Unparseable,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 24] = [
        Reason::Unspecified,
        Reason::ThisNetwork,
        Reason::Private,
        Reason::SharedAddressSpace,
        Reason::Loopback,
        Reason::LinkLocal,
        Reason::IetfProtocolAssignments,
        Reason::Documentation,
        Reason::SixToFourRelayAnycast,
        Reason::Benchmarking,
        Reason::Multicast,
        Reason::Broadcast,
        Reason::Reserved,
        Reason::Ipv4Compatible,
        Reason::Ipv4Translated,
        Reason::Nat64LocalUse,
        Reason::DiscardOnly,
        Reason::UniqueLocal,
        Reason::SiteLocal,
        Reason::Teredo,
        Reason::SixToFour,
        Reason::NotGlobalUnicast,
        Reason::ZoneId,
        Reason::Unparseable,
    ];

    /// The stable snake_case name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unspecified => "unspecified",
            Reason::ThisNetwork => "this_network",
            Reason::Private => "private",
            Reason::SharedAddressSpace => "shared_address_space",
            Reason::Loopback => "loopback",
            Reason::LinkLocal => "link_local",
            Reason::IetfProtocolAssignments => "ietf_protocol_assignments",
            Reason::Documentation => "documentation",
            Reason::SixToFourRelayAnycast => "six_to_four_relay_anycast",
            Reason::Benchmarking => "benchmarking",
            Reason::Multicast => "multicast",
            Reason::Broadcast => "broadcast",
            Reason::Reserved => "reserved",
            Reason::Ipv4Compatible => "ipv4_compatible",
            Reason::Ipv4Translated => "ipv4_translated",
            Reason::Nat64LocalUse => "nat64_local_use",
            Reason::DiscardOnly => "discard_only",
            Reason::UniqueLocal => "unique_local",
            Reason::SiteLocal => "site_local",
            Reason::Teredo => "teredo",
            Reason::SixToFour => "six_to_four",
            Reason::NotGlobalUnicast => "not_global_unicast",
            Reason::ZoneId => "zone_id",
            Reason::Unparseable => "unparseable",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Options that widen what counts as public. The default widens nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy {
    /// Treat the IPv4 benchmarking block `198.18.0.0/15` as public (and IPv4 carriers embedding
    /// it). For the lab network of end-to-end tests only: production never sets it. The IPv6
    /// benchmarking block `2001:2::/48` stays refused.
    pub allow_benchmark_range: bool,
}

/// A refused IPv4 block: the network, its prefix length, and why.
pub(crate) struct V4Block {
    pub(crate) net: u32,
    pub(crate) len: u8,
    pub(crate) reason: Reason,
}

/// A refused IPv6 block: the network, its prefix length, and why.
pub(crate) struct V6Block {
    pub(crate) net: u128,
    pub(crate) len: u8,
    pub(crate) reason: Reason,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8, reason: Reason) -> V4Block {
    V4Block {
        net: u32::from_be_bytes([a, b, c, d]),
        len,
        reason,
    }
}

const fn v6(segments: [u16; 8], len: u8, reason: Reason) -> V6Block {
    let mut net: u128 = 0;
    let mut i = 0;
    while i < 8 {
        net = (net << 16) | segments[i] as u128;
        i += 1;
    }
    V6Block { net, len, reason }
}

/// The benchmarking block that [`Policy::allow_benchmark_range`] lets through.
const BENCHMARK_V4: V4Block = v4(198, 18, 0, 0, 15, Reason::Benchmarking);

/// Refused IPv4 blocks, most specific first where blocks nest.
pub(crate) const REFUSED_V4: &[V4Block] = &[
    v4(0, 0, 0, 0, 32, Reason::Unspecified),
    v4(0, 0, 0, 0, 8, Reason::ThisNetwork),
    v4(10, 0, 0, 0, 8, Reason::Private),
    v4(100, 64, 0, 0, 10, Reason::SharedAddressSpace),
    v4(127, 0, 0, 0, 8, Reason::Loopback),
    v4(169, 254, 0, 0, 16, Reason::LinkLocal),
    v4(172, 16, 0, 0, 12, Reason::Private),
    v4(192, 0, 0, 0, 24, Reason::IetfProtocolAssignments),
    v4(192, 0, 2, 0, 24, Reason::Documentation),
    v4(192, 88, 99, 0, 24, Reason::SixToFourRelayAnycast),
    v4(192, 168, 0, 0, 16, Reason::Private),
    BENCHMARK_V4,
    v4(198, 51, 100, 0, 24, Reason::Documentation),
    v4(203, 0, 113, 0, 24, Reason::Documentation),
    v4(224, 0, 0, 0, 4, Reason::Multicast),
    v4(255, 255, 255, 255, 32, Reason::Broadcast),
    v4(240, 0, 0, 0, 4, Reason::Reserved),
];

/// IPv4-mapped IPv6, `::ffff:0:0/96`: judged by the embedded IPv4.
const MAPPED: V6Block = v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, Reason::Unspecified);
/// NAT64 well-known prefix, `64:ff9b::/96` (RFC 6052): judged by the embedded IPv4.
const NAT64_WELL_KNOWN: V6Block = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, Reason::Unspecified);
/// The global unicast space; IPv6 outside it is refused.
const GLOBAL_UNICAST: V6Block = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, Reason::NotGlobalUnicast);

/// Refused IPv6 blocks, most specific first where blocks nest. Anything outside `2000::/3`
/// that no row names is refused as [`Reason::NotGlobalUnicast`].
pub(crate) const REFUSED_V6: &[V6Block] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, Reason::Unspecified),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, Reason::Loopback),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, Reason::Ipv4Compatible),
    v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96, Reason::Ipv4Translated),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Reason::Nat64LocalUse),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, Reason::DiscardOnly),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, Reason::UniqueLocal),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, Reason::LinkLocal),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Reason::SiteLocal),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Reason::Multicast),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, Reason::Teredo),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, Reason::Benchmarking),
    v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        Reason::IetfProtocolAssignments,
    ),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, Reason::Documentation),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, Reason::SixToFour),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Reason::Documentation),
];

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

impl V4Block {
    pub(crate) fn contains(&self, addr: u32) -> bool {
        addr & mask32(self.len) == self.net
    }
}

impl V6Block {
    pub(crate) fn contains(&self, addr: u128) -> bool {
        addr & mask128(self.len) == self.net
    }
}

impl Policy {
    /// Classifies one address under this policy.
    pub fn classify(self, ip: IpAddr) -> Verdict {
        match ip {
            IpAddr::V4(v4) => self.classify_v4(v4),
            IpAddr::V6(v6) => self.classify_v6(v6),
        }
    }

    /// Parses `text` as an IP address and classifies it. A zone id (`%…`) is refused as
    /// [`Reason::ZoneId`]; anything else that is not a bare address (brackets, a port,
    /// whitespace, an `inet_aton` shorthand like `127.1`) as [`Reason::Unparseable`].
    /// IPv6 with a dotted-quad tail (`::ffff:10.0.0.1`) parses.
    pub fn parse_and_classify(self, text: &str) -> Verdict {
        if text.contains('%') {
            return Verdict::Refused(Reason::ZoneId);
        }
        match text.parse::<IpAddr>() {
            Ok(ip) => self.classify(ip),
            Err(_) => Verdict::Refused(Reason::Unparseable),
        }
    }

    fn classify_v4(self, ip: Ipv4Addr) -> Verdict {
        let addr = u32::from(ip);
        if self.allow_benchmark_range && BENCHMARK_V4.contains(addr) {
            return Verdict::Public;
        }
        match REFUSED_V4.iter().find(|block| block.contains(addr)) {
            Some(block) => Verdict::Refused(block.reason),
            None => Verdict::Public,
        }
    }

    fn classify_v6(self, ip: Ipv6Addr) -> Verdict {
        let addr = u128::from(ip);
        if MAPPED.contains(addr) || NAT64_WELL_KNOWN.contains(addr) {
            // The low 32 bits are the embedded IPv4 (bytes 12-15).
            return self.classify_v4(Ipv4Addr::from(addr as u32));
        }
        if let Some(block) = REFUSED_V6.iter().find(|block| block.contains(addr)) {
            return Verdict::Refused(block.reason);
        }
        if GLOBAL_UNICAST.contains(addr) {
            Verdict::Public
        } else {
            Verdict::Refused(Reason::NotGlobalUnicast)
        }
    }
}

/// Why a host's answers are not dialled ([`Policy::vet`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswersRefused {
    /// The name resolved to no address at all.
    NoAddress,
    /// These answers, each with its reason, in the resolver's order, are not public.
    NotPublic(Vec<(IpAddr, Reason)>),
}

impl fmt::Display for AnswersRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnswersRefused::NoAddress => f.write_str("it resolves to no address"),
            AnswersRefused::NotPublic(refused) => {
                f.write_str("it resolves to an address that is not public: ")?;
                f.write_str(&listed(refused))
            }
        }
    }
}

/// `refused` as `<address> <reason>`, `, `-separated.
pub fn listed(refused: &[(IpAddr, Reason)]) -> String {
    refused
        .iter()
        .map(|(ip, reason)| format!("{ip} {reason}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Policy {
    /// Vets the addresses a host resolved to: at least one, and every one public. The rule of
    /// both of the gate's ways out (a CONNECT and the model relay): one answer that is not
    /// public refuses them all, since a name answering with a public and a loopback address is
    /// rebinding or misconfigured, and which of them a dial would reach is not the gate's to
    /// guess.
    pub fn vet(self, answers: impl IntoIterator<Item = IpAddr>) -> Result<(), AnswersRefused> {
        let mut any = false;
        let mut refused = Vec::new();
        for ip in answers {
            any = true;
            if let Verdict::Refused(reason) = self.classify(ip) {
                refused.push((ip, reason));
            }
        }
        match (any, refused.is_empty()) {
            (false, _) => Err(AnswersRefused::NoAddress),
            (true, true) => Ok(()),
            (true, false) => Err(AnswersRefused::NotPublic(refused)),
        }
    }
}

/// Classifies one address under the default policy (nothing widened).
pub fn classify(ip: IpAddr) -> Verdict {
    Policy::default().classify(ip)
}

/// Parses and classifies `text` under the default policy; see [`Policy::parse_and_classify`].
pub fn parse_and_classify(text: &str) -> Verdict {
    Policy::default().parse_and_classify(text)
}
