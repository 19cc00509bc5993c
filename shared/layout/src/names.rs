//! Every name Atelier gives a principal or a unit: users, groups, site identities, doors, units.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The project's name: the stem of every user, group, unit and directory Atelier owns.
pub const PROJECT: &str = "atelier";

/// The longest user or group name the host's tools accept without complaint.
pub const MAX_UNIX_NAME_LEN: usize = 32;

/// The stem of every site identity: `atelier-a-<inst>_<k>`.
pub const IDENTITY_STEM: &str = "atelier-a-";

/// The highest site ordinal: three decimal digits keep the identity within 32 characters.
pub const MAX_ORDINAL: u16 = 999;

/// The longest instance name: `atelier-a-` (10) + name + `_999` (4) must fit in 32 characters.
pub const MAX_INSTANCE_LEN: usize = MAX_UNIX_NAME_LEN - IDENTITY_STEM.len() - 4;

/// The shortest instance name.
pub const MIN_INSTANCE_LEN: usize = 2;

// The bound above is arithmetic on the constants; this makes a change to one of them that
// breaks it fail the build rather than a host.
const _: () = assert!(IDENTITY_STEM.len() + MAX_INSTANCE_LEN + 4 <= MAX_UNIX_NAME_LEN);
const _: () = assert!(PROJECT.len() + 1 + MAX_INSTANCE_LEN <= MAX_UNIX_NAME_LEN);

/// A name that is not what the grammar allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The instance name breaks `^[a-z][a-z0-9-]{1,17}$`.
    #[error(
        "instance name {0:?} must be {MIN_INSTANCE_LEN}-{MAX_INSTANCE_LEN} characters of \
         a-z, 0-9 and '-', starting with a letter"
    )]
    BadInstance(String),
    /// The ordinal is outside 1..=999.
    #[error("site ordinal {0} is outside 1..={MAX_ORDINAL}")]
    OrdinalOutOfRange(u64),
}

/// Returns true if and only if `text` is a site slug: `^[a-z][a-z0-9-]{1,39}$`. A slug is also
/// a safe single path name, so every workspace and unit derived from it is too.
pub fn is_slug(text: &str) -> bool {
    let bytes = text.as_bytes();
    (2..=40).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// Returns true if and only if `label` is one DNS label: `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`.
pub fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// Returns true if and only if `text` is a site domain: a lowercase hostname of at least two
/// DNS labels, 253 characters at most.
pub fn is_domain(text: &str) -> bool {
    let labels: Vec<&str> = text.split('.').collect();
    text.len() <= 253 && labels.len() >= 2 && labels.iter().all(|l| is_dns_label(l))
}

/// A valid instance name: `^[a-z][a-z0-9-]{1,17}$`, short enough that every derived name fits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct InstanceName(String);

// === impl InstanceName ===

impl InstanceName {
    /// Checks `name` against the instance grammar.
    pub fn new(name: &str) -> Result<Self, NameError> {
        let bytes = name.as_bytes();
        let shaped = (MIN_INSTANCE_LEN..=MAX_INSTANCE_LEN).contains(&bytes.len())
            && bytes[0].is_ascii_lowercase()
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
        if shaped {
            Ok(Self(name.to_owned()))
        } else {
            Err(NameError::BadInstance(name.to_owned()))
        }
    }

    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InstanceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A site's ordinal `k`, 1..=999: allocated from the host's ledger, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct SiteOrdinal(u16);

// === impl SiteOrdinal ===

impl SiteOrdinal {
    /// Checks that `k` is in 1..=999.
    pub fn new(k: u64) -> Result<Self, NameError> {
        match u16::try_from(k) {
            Ok(small) if (1..=MAX_ORDINAL).contains(&small) => Ok(Self(small)),
            _ => Err(NameError::OrdinalOutOfRange(k)),
        }
    }

    /// The ordinal as a number.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Display for SiteOrdinal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One of a site's three doors; each is a socket, a target and a service template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Door {
    /// The coding agent's turn: the model's API through the gate, and the MCP relay.
    Turn,
    /// Install and build: the package registry through the gate.
    Build,
    /// The daemon's git commands: no way out at all.
    Git,
}

// === impl Door ===

impl Door {
    /// Every door, in the order units are rendered.
    pub const ALL: [Door; 3] = [Door::Turn, Door::Build, Door::Git];

    /// The door's name in units and frames: `turn`, `build` or `git`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Door::Turn => "turn",
            Door::Build => "build",
            Door::Git => "git",
        }
    }

    /// Returns true if and only if the door's runs reach the gate's CONNECT proxy.
    pub fn has_proxy(self) -> bool {
        match self {
            Door::Turn | Door::Build => true,
            Door::Git => false,
        }
    }

    /// Returns true if and only if the door's runs reach the gate's MCP relay.
    pub fn has_mcp(self) -> bool {
        match self {
            Door::Turn => true,
            Door::Build | Door::Git => false,
        }
    }

    /// Returns true if and only if the door has any way out (a gate socket of its own).
    pub fn has_way_out(self) -> bool {
        self.has_proxy() || self.has_mcp()
    }

    /// The doors that have a way out: one gate `ListenStream=` each.
    pub fn with_way_out() -> impl Iterator<Item = Door> {
        Self::ALL.into_iter().filter(|door| door.has_way_out())
    }
}

impl fmt::Display for Door {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Door {
    type Err = UnknownDoor;

    fn from_str(name: &str) -> Result<Door, UnknownDoor> {
        Door::ALL
            .into_iter()
            .find(|door| door.as_str() == name)
            .ok_or_else(|| UnknownDoor(name.to_owned()))
    }
}

/// A door name that is not `turn`, `build` or `git` (in a frame, a unit's environment, a
/// command line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown door {0:?}: expected turn, build or git")]
pub struct UnknownDoor(pub String);

/// The instance's service user, which runs sited: `atelier-<inst>`.
pub fn service_user(inst: &InstanceName) -> String {
    format!("{PROJECT}-{inst}")
}

/// The instance's group, every site identity's primary group: `atelier-<inst>`.
pub fn service_group(inst: &InstanceName) -> String {
    service_user(inst)
}

/// Site `k`'s unix identity: `atelier-a-<inst>_<k>`; its private group has the same name.
pub fn site_identity(inst: &InstanceName, k: SiteOrdinal) -> String {
    format!("{IDENTITY_STEM}{inst}_{k}")
}

/// Site `k`'s private group, holding exactly its identity and the service user.
pub fn site_private_group(inst: &InstanceName, k: SiteOrdinal) -> String {
    site_identity(inst, k)
}

/// Reads a site identity back into its instance and ordinal; `None` for any other name,
/// including a non-canonical ordinal such as `_07`.
pub fn parse_site_identity(name: &str) -> Option<(InstanceName, SiteOrdinal)> {
    let rest = name.strip_prefix(IDENTITY_STEM)?;
    let (inst, k) = rest.rsplit_once('_')?;
    let inst = InstanceName::new(inst).ok()?;
    if k.is_empty() || k.starts_with('0') || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let k = SiteOrdinal::new(k.parse().ok()?).ok()?;
    Some((inst, k))
}

/// The socket unit that starts sited: `atelier-sited@<inst>.socket`.
pub fn sited_socket_unit(inst: &InstanceName) -> String {
    format!("{PROJECT}-sited@{inst}.socket")
}

/// sited's service unit: `atelier-sited@<inst>.service`.
pub fn sited_service_unit(inst: &InstanceName) -> String {
    format!("{PROJECT}-sited@{inst}.service")
}

/// The socket unit that starts the instance's chat runtime: `atelier-chatd@<inst>.socket`.
pub fn chatd_socket_unit(inst: &InstanceName) -> String {
    format!("{PROJECT}-chatd@{inst}.socket")
}

/// The chat runtime's service unit: `atelier-chatd@<inst>.service`.
pub fn chatd_service_unit(inst: &InstanceName) -> String {
    format!("{PROJECT}-chatd@{inst}.service")
}

/// The timer that purges deleted conversations: `atelier-chatd-purge@<inst>.timer`.
pub fn chatd_purge_timer_unit(inst: &InstanceName) -> String {
    format!("{PROJECT}-chatd-purge@{inst}.timer")
}

/// The purge the timer starts: `atelier-chatd-purge@<inst>.service`.
pub fn chatd_purge_service_unit(inst: &InstanceName) -> String {
    format!("{PROJECT}-chatd-purge@{inst}.service")
}

/// The chat runtime's dynamic user, shared by its service and its purge so both own its
/// state: `atelier-chatd-<inst>`. Also the name of its folder below `/var/lib`.
pub fn chatd_user(inst: &InstanceName) -> String {
    format!("{PROJECT}-chatd-{inst}")
}

/// Whose account instance `name`'s service user (`atelier-<name>`) would be, if another
/// instance's: [`chatd_user`] of `<i>` is `atelier-chatd-<i>`, and site `k`'s gate runs as its
/// unit's name, `atelier-<i>-s<k>-gate` ([`gate_service_unit`]). Two principals under one uid
/// could read each other's secrets.
pub fn service_user_taken(name: &str) -> Option<String> {
    if let Some(other) = name.strip_prefix("chatd-") {
        return Some(format!("instance {other:?}'s chat runtime"));
    }
    let (other, k) = name.strip_suffix("-gate")?.rsplit_once("-s")?;
    let ordinal = !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit());
    (ordinal && !other.is_empty()).then(|| format!("instance {other:?}'s site {k} gate"))
}

/// The CMS's vhost file name: `atelier-<inst>.cms.conf` (a slug has no dot, so no site's
/// vhost can be named so).
pub fn chat_vhost_file(inst: &InstanceName) -> String {
    format!("{PROJECT}-{inst}.cms.conf")
}

/// The prefix every per-site unit of the instance starts with: `atelier-<inst>-s`.
///
/// A prefix alone does not tell instances apart (`atelier-a-s` begins instance `a-s1`'s units
/// too): a rule that grants anything must anchor the whole name with the ordinal and door.
/// Whole names are unambiguous, since the door and `-s<k>` are read off the end.
pub fn site_unit_prefix(inst: &InstanceName) -> String {
    format!("{PROJECT}-{inst}-s")
}

/// The stem of site `k`'s units for `door`: `atelier-<inst>-s<k>-<door>`.
pub fn door_unit_stem(inst: &InstanceName, k: SiteOrdinal, door: Door) -> String {
    format!("{}{k}-{door}", site_unit_prefix(inst))
}

/// The `systemctl list-units` pattern of the runs of the door named by `stem`
/// ([`door_unit_stem`]): `<stem>@*.service`.
pub fn door_run_pattern(stem: &str) -> String {
    format!("{stem}@*.service")
}

/// Whether `unit` is a run (`<stem>@<n>.service`) of the door named by `stem`: a pattern also
/// matches another instance's units whose name merely starts the same.
pub fn is_door_run(unit: &str, stem: &str) -> bool {
    unit.strip_prefix(stem)
        .and_then(|rest| rest.strip_prefix('@'))
        .is_some_and(|rest| rest.ends_with(".service"))
}

/// Site `k`'s socket for `door`: `atelier-<inst>-s<k>-<door>.socket`.
pub fn door_socket_unit(inst: &InstanceName, k: SiteOrdinal, door: Door) -> String {
    format!("{}.socket", door_unit_stem(inst, k, door))
}

/// Site `k`'s target for `door`, which conflicts with the other two: `….target`.
pub fn door_target_unit(inst: &InstanceName, k: SiteOrdinal, door: Door) -> String {
    format!("{}.target", door_unit_stem(inst, k, door))
}

/// Site `k`'s service template for `door`: `atelier-<inst>-s<k>-<door>@.service`.
pub fn door_service_template(inst: &InstanceName, k: SiteOrdinal, door: Door) -> String {
    format!("{}@.service", door_unit_stem(inst, k, door))
}

/// The three unit files of site `k`'s `door`: its socket, its target and its service template.
pub fn door_unit_files(inst: &InstanceName, k: SiteOrdinal, door: Door) -> [String; 3] {
    [
        door_socket_unit(inst, k, door),
        door_target_unit(inst, k, door),
        door_service_template(inst, k, door),
    ]
}

/// What every run instance of the template starts with: `atelier-<inst>-s<k>-<door>@`.
pub fn door_service_instance_stem(inst: &InstanceName, k: SiteOrdinal, door: Door) -> String {
    format!("{}@", door_unit_stem(inst, k, door))
}

/// Site `k`'s gate socket, one `ListenStream=` per door with a way out:
/// `atelier-<inst>-s<k>-gate.socket`.
pub fn gate_socket_unit(inst: &InstanceName, k: SiteOrdinal) -> String {
    format!("{}{k}-gate.socket", site_unit_prefix(inst))
}

/// Site `k`'s gate decisions socket, sited's subscription to the decisions of its runs:
/// `atelier-<inst>-s<k>-gate-decisions.socket`. A unit of its own, because every listener of
/// one socket unit has the same owner and this one is the service user's, not the site's.
pub fn gate_decisions_socket_unit(inst: &InstanceName, k: SiteOrdinal) -> String {
    format!("{}{k}-gate-decisions.socket", site_unit_prefix(inst))
}

/// sited's metrics socket unit: `atelier-sited-metrics@<inst>.socket`.
pub fn sited_metrics_socket_unit(inst: &InstanceName) -> String {
    format!("{PROJECT}-sited-metrics@{inst}.socket")
}

/// chatd's metrics socket unit: `atelier-chatd-metrics@<inst>.socket`.
pub fn chatd_metrics_socket_unit(inst: &InstanceName) -> String {
    format!("{PROJECT}-chatd-metrics@{inst}.socket")
}

/// Site `k`'s gate's metrics socket unit: `atelier-<inst>-s<k>-gate-metrics.socket`.
pub fn gate_metrics_socket_unit(inst: &InstanceName, k: SiteOrdinal) -> String {
    format!("{}{k}-gate-metrics.socket", site_unit_prefix(inst))
}

/// The `FileDescriptorName=` of every daemon's metrics socket: the daemon tells it from its
/// other listeners by this name (each metrics socket is a socket unit of its own, so the name
/// marks that one descriptor alone).
pub const METRICS_SOCKET_NAME: &str = "metrics";

/// The file name of the gate's decisions listener; the gate tells it from the others by it.
pub const GATE_DECISIONS_SOCKET_FILE: &str = "decisions.sock";

/// Site `k`'s gate service: `atelier-<inst>-s<k>-gate.service`.
pub fn gate_service_unit(inst: &InstanceName, k: SiteOrdinal) -> String {
    format!("{}{k}-gate.service", site_unit_prefix(inst))
}

/// The file name of a door's gate listener in the site's egress dir: `<door>.sock`. The gate
/// tells its listeners apart by this name: systemd gives every descriptor of one socket unit
/// the same `FileDescriptorName=`, so names cannot.
pub fn gate_socket_file(door: Door) -> String {
    format!("{door}.sock")
}

/// The file name of the gate's MCP relay listener (the turn door's second socket).
pub const GATE_MCP_SOCKET_FILE: &str = "mcp.sock";

/// The polkit rule's file name: `49-atelier-<inst>.rules`.
pub fn polkit_rule_file(inst: &InstanceName) -> String {
    format!("49-{PROJECT}-{inst}.rules")
}

/// The tmpfiles.d file name: `atelier-<inst>.conf`.
pub fn tmpfiles_file(inst: &InstanceName) -> String {
    format!("{PROJECT}-{inst}.conf")
}

/// A site's production vhost file name: `atelier-<inst>-<slug>.conf`.
pub fn prod_vhost_file(inst: &InstanceName, slug: &str) -> String {
    format!("{PROJECT}-{inst}-{slug}.conf")
}

/// A site's preproduction vhost file name: `atelier-<inst>-<slug>-pre.conf`.
pub fn preprod_vhost_file(inst: &InstanceName, slug: &str) -> String {
    format!("{PROJECT}-{inst}-{slug}-pre.conf")
}

/// certbot's deploy hook file name for an instance: `atelier-<inst>`. No extension: certbot
/// runs every executable of its hook folder whatever the name.
pub fn renewal_hook_file(inst: &InstanceName) -> String {
    format!("{PROJECT}-{inst}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(name: &str) -> InstanceName {
        InstanceName::new(name).unwrap()
    }

    #[test]
    fn a_door_run_is_told_from_look_alike_names() {
        let stem = "atelier-a-s1-turn";
        for (case, unit, is_run) in [
            ("a run", "atelier-a-s1-turn@3-0c1d.service", true),
            ("the template itself", "atelier-a-s1-turn@.service", true),
            ("the door's socket", "atelier-a-s1-turn.socket", false),
            ("another ordinal", "atelier-a-s11-turn@3.service", false),
            (
                "instance a-s1's site",
                "atelier-a-s1-turn-s2-turn@3.service",
                false,
            ),
            ("not a service", "atelier-a-s1-turn@3.scope", false),
            ("another door", "atelier-a-s1-build@3.service", false),
        ] {
            assert_eq!(is_door_run(unit, stem), is_run, "{case}: {unit}");
        }
        assert_eq!(door_run_pattern(stem), "atelier-a-s1-turn@*.service");
    }

    #[test]
    fn instance_grammar() {
        for good in ["ab", "museum", "a1-b2", "abcdefghijklmnopqr"] {
            assert!(InstanceName::new(good).is_ok(), "{good}");
        }
        // 19 characters: the identity would be 33 long at ordinal 999.
        for bad in [
            "a",
            "",
            "Museum",
            "1abc",
            "-abc",
            "ab_c",
            "ab.c",
            "abcdefghijklmnopqrs",
        ] {
            assert_eq!(
                InstanceName::new(bad),
                Err(NameError::BadInstance(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn ordinal_bounds() {
        assert!(SiteOrdinal::new(0).is_err());
        assert_eq!(SiteOrdinal::new(1).unwrap().get(), 1);
        assert_eq!(SiteOrdinal::new(999).unwrap().get(), 999);
        assert_eq!(
            SiteOrdinal::new(1000),
            Err(NameError::OrdinalOutOfRange(1000))
        );
        assert_eq!(
            SiteOrdinal::new(65_536 + 1),
            Err(NameError::OrdinalOutOfRange(65_537))
        );
    }

    #[test]
    fn longest_identity_fits_in_32() {
        let longest = inst(&"a".repeat(MAX_INSTANCE_LEN));
        let k = SiteOrdinal::new(999).unwrap();
        let identity = site_identity(&longest, k);
        assert_eq!(identity.len(), MAX_UNIX_NAME_LEN, "{identity}");
        assert!(service_user(&longest).len() <= MAX_UNIX_NAME_LEN);
        assert_eq!(parse_site_identity(&identity), Some((longest, k)));
    }

    #[test]
    fn identity_round_trip_and_refusals() {
        let museum = inst("museum");
        let k = SiteOrdinal::new(7).unwrap();
        assert_eq!(site_identity(&museum, k), "atelier-a-museum_7");
        assert_eq!(site_private_group(&museum, k), "atelier-a-museum_7");
        assert_eq!(parse_site_identity("atelier-a-museum_7"), Some((museum, k)));
        for bad in [
            "atelier-a-museum_07",
            "atelier-a-museum_0",
            "atelier-a-museum_1000",
            "atelier-a-museum_",
            "atelier-a-Museum_1",
            "atelier-museum",
            "atelier-a-museum_1x",
        ] {
            assert_eq!(parse_site_identity(bad), None, "{bad}");
        }
    }

    #[test]
    fn door_ways_out() {
        assert!(Door::Turn.has_proxy() && Door::Turn.has_mcp());
        assert!(Door::Build.has_proxy() && !Door::Build.has_mcp());
        assert!(!Door::Git.has_proxy() && !Door::Git.has_mcp() && !Door::Git.has_way_out());
        assert_eq!(
            Door::with_way_out().collect::<Vec<_>>(),
            [Door::Turn, Door::Build]
        );
    }
}
