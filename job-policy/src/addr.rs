//! The one address policy: which IP addresses a stranger's job may make us connect to.
//! Intake stage 1 (repository URLs) and the egress proxy (every A/AAAA answer, every IP literal) both call
//! [`check`]; only globally routable unicast addresses pass. IPv6 forms that embed an IPv4 address are
//! judged by the address they embed.

use serde::Serialize;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of address an IP is, as far as the policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AddrClass {
    /// Globally routable unicast: the only class [`check`] accepts.
    Public,
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 (`10/8`, `172.16/12`, `192.168/16`), IPv6 unique-local `fc00::/7`, site-local `fec0::/10`,
    /// local-use NAT64 `64:ff9b:1::/48`.
    Private,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// Carrier-grade NAT shared space `100.64.0.0/10`.
    SharedCgnat,
    /// Cloud instance metadata services: `169.254.169.254`, `169.254.170.2`, `100.100.100.200`, `fd00:ec2::254`.
    Metadata,
    /// `255.255.255.255`.
    Broadcast,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// Documentation ranges: `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// Benchmarking: `198.18.0.0/15`, `2001:2::/48`.
    Benchmark,
    /// Anything else not globally routable: `0/8`, `192.0.0/24`, `192.88.99/24`, `240/4`, IPv6 outside
    /// `2000::/3`, `100::/64`, IETF protocol assignments `2001::/23`, ...
    Reserved,
}

impl AddrClass {
    /// A short human name of the class.
    pub fn describe(self) -> &'static str {
        match self {
            AddrClass::Public => "public",
            AddrClass::Unspecified => "unspecified",
            AddrClass::Loopback => "loopback",
            AddrClass::Private => "private",
            AddrClass::LinkLocal => "link-local",
            AddrClass::SharedCgnat => "carrier-grade NAT (shared address space)",
            AddrClass::Metadata => "cloud metadata service",
            AddrClass::Broadcast => "broadcast",
            AddrClass::Multicast => "multicast",
            AddrClass::Documentation => "documentation range",
            AddrClass::Benchmark => "benchmarking range",
            AddrClass::Reserved => "reserved, not globally routable",
        }
    }
}

impl fmt::Display for AddrClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Embedding {
    /// `::ffff:a.b.c.d`.
    V4Mapped,
    /// `::ffff:0:a.b.c.d` (SIIT).
    V4Translated,
    /// `::a.b.c.d` (deprecated IPv4-compatible).
    V4Compatible,
    /// `64:ff9b::a.b.c.d` (well-known NAT64 prefix).
    Nat64,
    /// `2002:AABB:CCDD::/48` (6to4).
    SixToFour,
    /// `2001:0::/32` Teredo: server address in bits 32-63, client address (inverted) in bits 96-127.
    Teredo,
}

/// An address the policy refuses, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{addr} refused: {why}")]
#[non_exhaustive]
pub struct Refused {
    /// The address asked for.
    pub addr: IpAddr,
    /// Its class (for an embedding form, the class of the embedded IPv4 address).
    pub class: AddrClass,
    /// Why, in words (names the embedded address when there is one).
    pub why: String,
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from(Ipv4Addr::new(a, b, c, d))
}

fn in4(ip: u32, net: u32, bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    ip & mask == net & mask
}

fn in6(ip: u128, net: u128, bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    ip & mask == net & mask
}

/// The class of an IPv4 address.
pub fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let x = u32::from(ip);
    // Exact addresses first: they sit inside wider ranges.
    if x == 0 {
        return AddrClass::Unspecified;
    }
    if x == u32::MAX {
        return AddrClass::Broadcast;
    }
    if x == v4(169, 254, 169, 254) || x == v4(169, 254, 170, 2) || x == v4(100, 100, 100, 200) {
        return AddrClass::Metadata;
    }
    let table: &[(u32, u32, AddrClass)] = &[
        (v4(0, 0, 0, 0), 8, AddrClass::Reserved),
        (v4(10, 0, 0, 0), 8, AddrClass::Private),
        (v4(100, 64, 0, 0), 10, AddrClass::SharedCgnat),
        (v4(127, 0, 0, 0), 8, AddrClass::Loopback),
        (v4(169, 254, 0, 0), 16, AddrClass::LinkLocal),
        (v4(172, 16, 0, 0), 12, AddrClass::Private),
        (v4(192, 0, 0, 0), 24, AddrClass::Reserved),
        (v4(192, 0, 2, 0), 24, AddrClass::Documentation),
        (v4(192, 88, 99, 0), 24, AddrClass::Reserved),
        (v4(192, 168, 0, 0), 16, AddrClass::Private),
        (v4(198, 18, 0, 0), 15, AddrClass::Benchmark),
        (v4(198, 51, 100, 0), 24, AddrClass::Documentation),
        (v4(203, 0, 113, 0), 24, AddrClass::Documentation),
        (v4(224, 0, 0, 0), 4, AddrClass::Multicast),
        (v4(240, 0, 0, 0), 4, AddrClass::Reserved),
    ];
    table
        .iter()
        .find(|(net, bits, _)| in4(x, *net, *bits))
        .map_or(AddrClass::Public, |(_, _, c)| *c)
}

/// The IPv4 address(es) an IPv6 address embeds, if it is one of the embedding forms (Teredo embeds two).
pub fn embedded_v4(ip: Ipv6Addr) -> Option<(Embedding, Vec<Ipv4Addr>)> {
    let x = u128::from(ip);
    let low = Ipv4Addr::from(x as u32);
    if in6(x, 0xffff_0000_0000, 96) {
        return Some((Embedding::V4Mapped, vec![low]));
    }
    if in6(x, 0xffff_0000_0000_0000, 96) {
        return Some((Embedding::V4Translated, vec![low]));
    }
    if in6(x, 0x0064_ff9b << 96, 96) {
        return Some((Embedding::Nat64, vec![low]));
    }
    if in6(x, 0, 96) && x > 1 {
        return Some((Embedding::V4Compatible, vec![low]));
    }
    if in6(x, 0x2002 << 112, 16) {
        return Some((Embedding::SixToFour, vec![Ipv4Addr::from((x >> 80) as u32)]));
    }
    if in6(x, 0x2001_0000 << 96, 32) {
        let server = Ipv4Addr::from((x >> 64) as u32);
        let client = Ipv4Addr::from(!(x as u32));
        return Some((Embedding::Teredo, vec![server, client]));
    }
    None
}

/// The class of an IPv6 address that embeds no IPv4 address.
fn classify_v6_plain(x: u128) -> AddrClass {
    if x == 0 {
        return AddrClass::Unspecified;
    }
    if x == 1 {
        return AddrClass::Loopback;
    }
    if x == u128::from(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)) {
        return AddrClass::Metadata;
    }
    let table: &[(u128, u32, AddrClass)] = &[
        (0x0064_ff9b_0001 << 80, 48, AddrClass::Private),
        (0x0100 << 112, 64, AddrClass::Reserved),
        (0x2001_0002 << 96, 48, AddrClass::Benchmark),
        (0x2001_0db8 << 96, 32, AddrClass::Documentation),
        (0x2001 << 112, 23, AddrClass::Reserved),
        (0x3fff << 112, 20, AddrClass::Documentation),
        (0x5f00 << 112, 16, AddrClass::Reserved),
        (0xfc00 << 112, 7, AddrClass::Private),
        (0xfe80 << 112, 10, AddrClass::LinkLocal),
        (0xfec0 << 112, 10, AddrClass::Private),
        (0xff00 << 112, 8, AddrClass::Multicast),
    ];
    if let Some((_, _, c)) = table.iter().find(|(net, bits, _)| in6(x, *net, *bits)) {
        return *c;
    }
    if !in6(x, 0x2000 << 112, 3) {
        return AddrClass::Reserved;
    }
    AddrClass::Public
}

/// The class of an address; an IPv6 form embedding IPv4 gets the class of what it embeds (for Teredo, the
/// first non-public of its two).
pub fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => match embedded_v4(a) {
            Some((_, inner)) => inner
                .iter()
                .map(|v| classify_v4(*v))
                .find(|c| *c != AddrClass::Public)
                .unwrap_or(AddrClass::Public),
            None => classify_v6_plain(u128::from(a)),
        },
    }
}

/// Accepts only globally routable unicast addresses; anything else is refused with the reason.
pub fn check(ip: IpAddr) -> Result<(), Refused> {
    let class = classify(ip);
    if class == AddrClass::Public {
        return Ok(());
    }
    let why = match ip {
        IpAddr::V6(a) => match embedded_v4(a) {
            Some((form, inner)) => {
                let shown: Vec<String> = inner.iter().map(|v| v.to_string()).collect();
                format!(
                    "{form:?} IPv6 form of {} ({})",
                    shown.join(" / "),
                    class.describe()
                )
            }
            None => class.describe().to_string(),
        },
        IpAddr::V4(_) => class.describe().to_string(),
    };
    Err(Refused {
        addr: ip,
        class,
        why,
    })
}

/// Classes an operator's `allow_networks` reaches only when an entry names the address itself (a `/32`, a
/// `/128` or a plain address): a range never opens them.
pub const NAMED_ONLY: &[AddrClass] = &[
    AddrClass::Loopback,
    AddrClass::LinkLocal,
    AddrClass::Metadata,
];

/// Classes no operator setting reaches: nothing is ever dialled there.
pub const NEVER: &[AddrClass] = &[
    AddrClass::Unspecified,
    AddrClass::Multicast,
    AddrClass::Broadcast,
];

/// Networks a range in `allow_networks` may not cover (wider than one address): loopback, link-local, cloud
/// metadata, unspecified, multicast and broadcast addresses, and the IPv6 forms that embed an IPv4 address.
const SENSITIVE: &[(&str, &str)] = &[
    ("0.0.0.0/8", "unspecified (0.0.0.0 reaches this host)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("169.254.169.254/32", "cloud metadata service"),
    ("169.254.170.2/32", "cloud metadata service"),
    ("100.100.100.200/32", "cloud metadata service"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fe80::/10", "link-local"),
    ("fd00:ec2::254/128", "cloud metadata service"),
    ("ff00::/8", "multicast"),
    ("::/96", "IPv4-compatible forms (which embed loopback)"),
    ("::ffff:0:0/96", "IPv4-mapped forms (which embed loopback)"),
    (
        "::ffff:0:0:0/96",
        "IPv4-translated forms (which embed loopback)",
    ),
    ("64:ff9b::/96", "NAT64 forms (which embed loopback)"),
    ("2002::/16", "6to4 forms (which embed loopback)"),
    ("2001::/32", "Teredo forms (which embed loopback)"),
];

/// Why an entry of the operator's `allow_networks` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkEntryError {
    /// Not an IP address nor a CIDR network.
    #[error("`{0}`: not an IP address or a CIDR network (such as 10.20.0.0/16 or fd12:3456::/48)")]
    NotCidr(String),
    /// Bits set after the prefix length.
    #[error("`{entry}`: bits set after the prefix length; write {network}")]
    HostBits {
        /// The entry as written.
        entry: String,
        /// The network it most likely means.
        network: String,
    },
    /// A range (wider than one address) over loopback, link-local, metadata or other never-opened space.
    #[error(
        "`{entry}`: the range covers {covered} ({what}); loopback, link-local and metadata addresses are \
         reached only when named one by one (a /32, a /128 or a plain address)"
    )]
    Covers {
        /// The entry as written.
        entry: String,
        /// The sensitive network it overlaps.
        covered: String,
        /// What that network is.
        what: String,
    },
    /// One address of a class no setting opens.
    #[error("`{entry}`: {class} addresses are never dialled, whatever the operator allows")]
    Never {
        /// The entry as written.
        entry: String,
        /// Its class.
        class: AddrClass,
    },
}

/// The operator's `[egress] allow_networks`: networks whose addresses the address policy then accepts for names
/// on a job's allowlist (a company mirror on a private address, a registry behind an interception). Loopback,
/// link-local and metadata addresses stay refused unless an entry names the address itself; unspecified,
/// multicast and broadcast addresses are never accepted. Never settable by a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AllowNetworks {
    nets: Vec<ipnet::IpNet>,
}

impl AllowNetworks {
    /// No network: the plain address policy.
    pub fn none() -> AllowNetworks {
        AllowNetworks::default()
    }

    /// Parses every entry (`CIDR` or a plain address); the first unusable one is the error.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<AllowNetworks, NetworkEntryError> {
        let nets = entries
            .iter()
            .map(|e| parse_network(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AllowNetworks { nets })
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// The entries in canonical form (`10.20.0.0/16`, a single address as `/32` or `/128`).
    pub fn entries(&self) -> Vec<String> {
        self.nets.iter().map(ToString::to_string).collect()
    }

    /// Whether an entry names exactly `ip`.
    fn names(&self, ip: IpAddr) -> bool {
        self.nets
            .iter()
            .any(|n| n.prefix_len() == n.max_prefix_len() && n.addr() == ip)
    }

    /// Whether an entry contains `ip`.
    fn contains(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(&ip))
    }
}

/// One entry of `allow_networks`: a CIDR network or a plain address (one address), checked against the rules
/// of [`AllowNetworks`].
pub fn parse_network(entry: &str) -> Result<ipnet::IpNet, NetworkEntryError> {
    let text = entry.trim();
    let net = match text.parse::<IpAddr>() {
        Ok(ip) => ipnet::IpNet::from(ip),
        Err(_) => text
            .parse::<ipnet::IpNet>()
            .map_err(|_| NetworkEntryError::NotCidr(entry.to_owned()))?,
    };
    if net.trunc() != net {
        return Err(NetworkEntryError::HostBits {
            entry: entry.to_owned(),
            network: net.trunc().to_string(),
        });
    }
    if net.prefix_len() == net.max_prefix_len() {
        let class = classify(net.addr());
        if NEVER.contains(&class) {
            return Err(NetworkEntryError::Never {
                entry: entry.to_owned(),
                class,
            });
        }
        return Ok(net);
    }
    for (s, what) in SENSITIVE {
        let Ok(sens) = s.parse::<ipnet::IpNet>() else {
            continue;
        };
        if net.contains(&sens.network()) || sens.contains(&net.network()) {
            return Err(NetworkEntryError::Covers {
                entry: entry.to_owned(),
                covered: (*s).to_owned(),
                what: (*what).to_owned(),
            });
        }
    }
    Ok(net)
}

/// [`check`] with the operator's `allow_networks`: a refused address is accepted when an entry names it (any
/// class but unspecified, multicast and broadcast), or when an entry's range contains it and it is not loopback,
/// link-local or metadata. A refusal says which rule held.
pub fn check_with(ip: IpAddr, allow: &AllowNetworks) -> Result<(), Refused> {
    let Err(mut refused) = check(ip) else {
        return Ok(());
    };
    if allow.is_empty() || NEVER.contains(&refused.class) {
        return Err(refused);
    }
    if allow.names(ip) {
        return Ok(());
    }
    if NAMED_ONLY.contains(&refused.class) {
        refused.why = format!(
            "{}; the operator's allow_networks reaches it only by naming the address itself ({ip}/{})",
            refused.why,
            if ip.is_ipv4() { 32 } else { 128 }
        );
        return Err(refused);
    }
    if allow.contains(ip) {
        return Ok(());
    }
    refused.why = format!(
        "{}; not in the operator's allow_networks [{}]",
        refused.why,
        allow.entries().join(", ")
    );
    Err(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address parses")
    }

    #[test]
    fn table() {
        use AddrClass::*;
        let cases: &[(&str, AddrClass)] = &[
            ("8.8.8.8", Public),
            ("1.1.1.1", Public),
            ("93.184.216.34", Public),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Reserved),
            ("10.0.0.1", Private),
            ("10.255.255.255", Private),
            ("11.0.0.1", Public),
            ("100.63.255.255", Public),
            ("100.64.0.1", SharedCgnat),
            ("100.127.255.255", SharedCgnat),
            ("100.128.0.0", Public),
            ("100.100.100.200", Metadata),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("169.254.0.1", LinkLocal),
            ("169.254.169.254", Metadata),
            ("169.254.170.2", Metadata),
            ("172.15.255.255", Public),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("172.32.0.0", Public),
            ("192.0.0.170", Reserved),
            ("192.0.2.1", Documentation),
            ("192.88.99.1", Reserved),
            ("192.167.255.255", Public),
            ("192.168.1.1", Private),
            ("192.169.0.0", Public),
            ("198.17.255.255", Public),
            ("198.18.0.1", Benchmark),
            ("198.19.255.255", Benchmark),
            ("198.20.0.0", Public),
            ("198.51.100.7", Documentation),
            ("203.0.113.9", Documentation),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("240.0.0.1", Reserved),
            ("255.255.255.254", Reserved),
            ("255.255.255.255", Broadcast),
            // IPv6 plain
            ("::", Unspecified),
            ("::1", Loopback),
            ("2606:4700:4700::1111", Public),
            ("2a00:1450:4001:80b::200e", Public),
            ("fc00::1", Private),
            ("fd12:3456::1", Private),
            ("fd00:ec2::254", Metadata),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fec0::1", Private),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("3fff::1", Documentation),
            ("2001:2::1", Benchmark),
            ("2001:10::1", Reserved),
            ("100::1", Reserved),
            ("64:ff9b:1::1", Private),
            ("4000::1", Reserved),
            ("1000::1", Reserved),
            ("5f00::1", Reserved),
            // IPv4 embedded in IPv6: judged by the IPv4 address
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:10.1.2.3", Private),
            ("::ffff:169.254.169.254", Metadata),
            ("::ffff:8.8.8.8", Public),
            ("::ffff:0:192.168.0.1", Private),
            ("::127.0.0.1", Loopback),
            ("::8.8.8.8", Public),
            ("64:ff9b::7f00:1", Loopback),
            ("64:ff9b::a9fe:a9fe", Metadata),
            ("64:ff9b::808:808", Public),
            ("2002:7f00:0001::1", Loopback),
            ("2002:a9fe:a9fe::", Metadata),
            ("2002:0808:0808::1", Public),
            // Teredo: server 8.8.8.8, client 127.0.0.1 stored inverted (80ff:fffe)
            ("2001:0:808:808::80ff:fffe", Loopback),
            // Teredo: server 10.0.0.1, client public
            ("2001:0:a00:1::f7f7:f7f7", Private),
            // Teredo with both public
            ("2001:0:808:808::f7f7:f7f7", Public),
        ];
        let mut wrong = Vec::new();
        for (s, want) in cases {
            let got = classify(ip(s));
            if got != *want {
                wrong.push(format!("{s}: got {got:?}, want {want:?}"));
            }
            assert_eq!(check(ip(s)).is_ok(), *want == Public, "{s}");
        }
        assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
    }

    #[test]
    fn refusal_names_embedded_address() {
        let e = check(ip("::ffff:169.254.169.254")).expect_err("metadata refused");
        assert_eq!(e.class, AddrClass::Metadata);
        assert!(e.why.contains("169.254.169.254"), "{}", e.why);
        assert!(e.why.contains("V4Mapped"), "{}", e.why);
        let e = check(ip("10.0.0.1")).expect_err("private refused");
        assert_eq!(e.why, "private");
    }

    #[test]
    fn embedded_extraction() {
        let (form, v) = embedded_v4("2002:c000:0201::".parse().expect("v6")).expect("6to4");
        assert_eq!(form, Embedding::SixToFour);
        assert_eq!(v, vec![Ipv4Addr::new(192, 0, 2, 1)]);
        assert!(embedded_v4("2606:4700::1".parse().expect("v6")).is_none());
        assert!(embedded_v4(Ipv6Addr::LOCALHOST).is_none());
        assert!(embedded_v4(Ipv6Addr::UNSPECIFIED).is_none());
    }

    #[test]
    fn operator_networks_open_what_they_name_and_nothing_sensitive() {
        let nets = AllowNetworks::parse(&[
            "192.0.2.0/24",
            "10.20.0.0/16",
            "127.0.0.1/32",
            "fd12:3456::/48",
        ])
        .expect("parse");
        // (address, accepted with these networks)
        let cases: &[(&str, bool)] = &[
            // A registry name resolving into an allowed documentation range behind an interception.
            ("192.0.2.10", true),
            ("198.51.100.7", false),
            ("10.20.3.4", true),
            ("10.21.0.1", false),
            ("fd12:3456::1", true),
            ("fd12:3457::1", false),
            // Loopback only as named: 127.0.0.1 yes, 127.0.0.2 and ::1 no.
            ("127.0.0.1", true),
            ("127.0.0.2", false),
            ("::1", false),
            ("::ffff:127.0.0.1", false),
            // Metadata and link-local stay refused.
            ("169.254.169.254", false),
            ("169.254.1.1", false),
            ("fd00:ec2::254", false),
            // Public stays accepted.
            ("8.8.8.8", true),
        ];
        for (s, want) in cases {
            assert_eq!(check_with(ip(s), &nets).is_ok(), *want, "{s}");
        }
        let e = check_with(ip("127.0.0.2"), &nets).expect_err("not named");
        assert!(e.why.contains("127.0.0.2/32"), "{}", e.why);
        let e = check_with(ip("198.51.100.7"), &nets).expect_err("not listed");
        assert!(
            e.why.contains("not in the operator's allow_networks"),
            "{}",
            e.why
        );
        // Without networks: the plain policy.
        assert!(check_with(ip("10.20.3.4"), &AllowNetworks::none()).is_err());
        // Metadata named one by one is reached (the operator said so, address by address).
        let named = AllowNetworks::parse(&["169.254.169.254"]).expect("named");
        assert!(check_with(ip("169.254.169.254"), &named).is_ok());
        assert_eq!(named.entries(), vec!["169.254.169.254/32".to_string()]);
    }

    #[test]
    fn operator_network_entries_that_cannot_be_used_are_named() {
        for (entry, want) in [
            ("registry.example", "not an IP address or a CIDR network"),
            ("10.0.0.0/33", "not an IP address or a CIDR network"),
            ("", "not an IP address or a CIDR network"),
            ("10.0.0.1/8", "write 10.0.0.0/8"),
            ("127.0.0.0/8", "covers 127.0.0.0/8"),
            ("127.0.0.0/31", "covers 127.0.0.0/8"),
            ("0.0.0.0/0", "covers"),
            ("169.254.0.0/16", "covers 169.254.0.0/16"),
            ("100.64.0.0/10", "covers 100.100.100.200/32"),
            ("fd00::/8", "covers fd00:ec2::254/128"),
            ("::/0", "covers"),
            ("::ffff:0:0/96", "covers"),
            ("0.0.0.0", "never dialled"),
            ("224.0.0.1/32", "never dialled"),
            ("255.255.255.255", "never dialled"),
        ] {
            let e = AllowNetworks::parse(&[entry]).expect_err(entry).to_string();
            assert!(e.contains(want), "{entry}: {e}");
            assert!(e.contains(&format!("`{entry}`")), "{entry}: {e}");
        }
        for ok in [
            "10.0.0.0/8",
            "192.168.0.0/16",
            "203.0.113.5",
            "::1",
            "fe80::1/128",
        ] {
            AllowNetworks::parse(&[ok]).expect(ok);
        }
    }
}
