//! A rendered artifact and its stamp: the first line of every file Atelier writes names the
//! instance, the kind and the sha256 of the body, so drift (hand edits, foreign files, stale
//! renders) is told apart without any state of our own.

use std::fmt;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

/// The word that marks a stamp line as ours.
const STAMP_MARK: &str = "atelier-provision:";

/// What an artifact is; the closed list of kinds a stamp may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArtifactKind {
    /// sited's socket and service units.
    Unit,
    /// A site's door sockets, targets and service templates, tmpfiles.d and the turn gitconfig.
    AgentUnits,
    /// The polkit rule that lets the service user stop and kill its sites' runs.
    AgentAuthorization,
    /// A site's egress gate units and per-door plans.
    Gate,
    /// sited's environment file.
    Env,
    /// The site table `sites.json`.
    Sites,
    /// An nginx virtual host.
    NginxVhost,
    /// An Apache virtual host.
    ApacheVhost,
    /// The engine's pairing fragment.
    EngineFragment,
}

impl ArtifactKind {
    /// Every kind, in stamp order.
    pub const ALL: [ArtifactKind; 9] = [
        ArtifactKind::Unit,
        ArtifactKind::AgentUnits,
        ArtifactKind::AgentAuthorization,
        ArtifactKind::Gate,
        ArtifactKind::Env,
        ArtifactKind::Sites,
        ArtifactKind::NginxVhost,
        ArtifactKind::ApacheVhost,
        ArtifactKind::EngineFragment,
    ];

    /// The kind as a stamp names it.
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Unit => "unit",
            ArtifactKind::AgentUnits => "agent_units",
            ArtifactKind::AgentAuthorization => "agent_authorization",
            ArtifactKind::Gate => "gate",
            ArtifactKind::Env => "env",
            ArtifactKind::Sites => "sites",
            ArtifactKind::NginxVhost => "nginx_vhost",
            ArtifactKind::ApacheVhost => "apache_vhost",
            ArtifactKind::EngineFragment => "engine_fragment",
        }
    }

    /// Parses a kind a stamp names.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

impl fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a file format writes a comment line, which is what the stamp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentStyle {
    /// `#`: units, env files, tmpfiles.d, vhosts, gitconfig.
    Hash,
    /// `//`: the polkit rule (JavaScript) and JSON files whose readers strip the first line.
    Slashes,
}

impl CommentStyle {
    fn prefix(self) -> &'static str {
        match self {
            CommentStyle::Hash => "#",
            CommentStyle::Slashes => "//",
        }
    }
}

/// One file as the provisioner will write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Absolute path on the host.
    pub path: PathBuf,
    /// What it is.
    pub kind: ArtifactKind,
    /// Owning user name.
    pub owner: String,
    /// Owning group name.
    pub group: String,
    /// Permission bits.
    pub mode: u32,
    /// The whole file: stamp line, then the body.
    pub bytes: Vec<u8>,
}

impl Artifact {
    /// Builds an artifact whose file is `body` under a stamp for `instance` and `kind`.
    pub fn new(
        path: impl Into<PathBuf>,
        instance: &str,
        kind: ArtifactKind,
        style: CommentStyle,
        (owner, group, mode): (&str, &str, u32),
        body: &str,
    ) -> Self {
        Self {
            path: path.into(),
            kind,
            owner: owner.to_owned(),
            group: group.to_owned(),
            mode,
            bytes: stamped(instance, kind, style, body.as_bytes()),
        }
    }

    /// The body after the stamp line.
    pub fn body(&self) -> &[u8] {
        split_stamp(&self.bytes).map_or(&self.bytes[..], |(_, body)| body)
    }
}

/// A parsed stamp line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// The instance it names.
    pub instance: String,
    /// The kind it names.
    pub kind: ArtifactKind,
    /// The sha256 it records, lowercase hex.
    pub sha256: String,
}

/// How a file on the host relates to what we would write there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    /// Byte for byte what we render.
    Current,
    /// No parseable stamp: not ours, or ours with its stamp removed.
    Unstamped,
    /// Stamped for another instance.
    Foreign,
    /// Our stamp, but the body no longer matches its hash: edited by hand.
    HandEdited,
    /// Self-consistent and ours, but the renderer now produces something else.
    Stale,
}

impl Drift {
    /// The class as `check` and `plan` report it.
    pub fn as_str(self) -> &'static str {
        match self {
            Drift::Current => "current",
            Drift::Unstamped => "unstamped",
            Drift::Foreign => "foreign",
            Drift::HandEdited => "hand_edited",
            Drift::Stale => "stale",
        }
    }
}

/// `body` under a stamp line.
pub fn stamped(instance: &str, kind: ArtifactKind, style: CommentStyle, body: &[u8]) -> Vec<u8> {
    let line = format!(
        "{} {STAMP_MARK} {instance} {kind} {}\n",
        style.prefix(),
        sha256_hex(body)
    );
    let mut bytes = Vec::with_capacity(line.len() + body.len());
    bytes.extend_from_slice(line.as_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// Parses the stamp on the first line of `file`, if it carries one of ours.
pub fn parse_stamp(file: &[u8]) -> Option<Stamp> {
    let (line, _) = split_stamp(file)?;
    let line = std::str::from_utf8(line).ok()?;
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
    let prefix = words.next()?;
    if prefix.len() > 4 || words.next()? != STAMP_MARK {
        return None;
    }
    let instance = words.next()?.to_owned();
    let kind = ArtifactKind::parse(words.next()?)?;
    let sha256 = words.next()?.to_owned();
    let is_hash = sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (is_hash && words.next().is_none()).then_some(Stamp {
        instance,
        kind,
        sha256,
    })
}

/// Classifies what is on the host (`existing`) against what we render for `instance`.
pub fn classify(existing: &[u8], rendered: &[u8], instance: &str) -> Drift {
    if existing == rendered {
        return Drift::Current;
    }
    let Some(stamp) = parse_stamp(existing) else {
        return Drift::Unstamped;
    };
    if stamp.instance != instance {
        return Drift::Foreign;
    }
    let body = split_stamp(existing).map_or(&[][..], |(_, body)| body);
    if sha256_hex(body) != stamp.sha256 {
        Drift::HandEdited
    } else {
        Drift::Stale
    }
}

/// The first line (without its newline) and the rest.
fn split_stamp(file: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = file.iter().position(|&b| b == b'\n')?;
    Some((&file[..end], &file[end + 1..]))
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_round_trips_and_names_the_body_hash() {
        let file = stamped(
            "museum",
            ArtifactKind::Unit,
            CommentStyle::Hash,
            b"[Unit]\n",
        );
        let text = String::from_utf8(file.clone()).unwrap();
        assert_eq!(
            text.lines().next().unwrap(),
            format!(
                "# atelier-provision: museum unit {}",
                sha256_hex(b"[Unit]\n")
            )
        );
        let stamp = parse_stamp(&file).unwrap();
        assert_eq!(stamp.instance, "museum");
        assert_eq!(stamp.kind, ArtifactKind::Unit);
        let json = stamped(
            "museum",
            ArtifactKind::Sites,
            CommentStyle::Slashes,
            b"{}\n",
        );
        assert!(json.starts_with(b"// atelier-provision: museum sites "));
    }

    #[test]
    fn drift_classes() {
        let ours = stamped("museum", ArtifactKind::Env, CommentStyle::Hash, b"A=1\n");
        let newer = stamped("museum", ArtifactKind::Env, CommentStyle::Hash, b"A=2\n");
        let foreign = stamped("other", ArtifactKind::Env, CommentStyle::Hash, b"A=1\n");
        let mut edited = ours.clone();
        edited.extend_from_slice(b"B=evil\n");
        let cases: [(&str, &[u8], Drift); 6] = [
            ("identical", &ours, Drift::Current),
            ("no stamp", b"A=1\n", Drift::Unstamped),
            ("empty file", b"", Drift::Unstamped),
            ("another instance", &foreign, Drift::Foreign),
            ("edited by hand", &edited, Drift::HandEdited),
            ("an older render", &newer, Drift::Stale),
        ];
        for (name, existing, expected) in cases {
            assert_eq!(classify(existing, &ours, "museum"), expected, "case {name}");
        }
    }

    #[test]
    fn malformed_stamps_are_not_stamps() {
        let hash = "0".repeat(64);
        let cases = [
            format!("# atelier-provision: museum unit {}\n", &hash[..63]),
            format!("# atelier-provision: museum nosuchkind {hash}\n"),
            format!("##### atelier-provision: museum unit {hash}\n"),
            format!("# dedalo-provision: museum unit {hash}\n"),
            format!("# atelier-provision: museum unit {hash} extra\n"),
            format!(
                "# atelier-provision: museum unit {}\n",
                hash.to_uppercase().replace('0', "A")
            ),
        ];
        for case in cases {
            assert!(parse_stamp(case.as_bytes()).is_none(), "{case}");
        }
        let crlf = format!("# atelier-provision: museum unit {hash}\r\n");
        assert!(parse_stamp(crlf.as_bytes()).is_some());
    }
}
