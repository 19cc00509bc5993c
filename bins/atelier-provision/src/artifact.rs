//! A rendered artifact and its stamp: the first line of every file Atelier writes names the
//! instance, the kind and the sha256 of the body, so drift (hand edits, foreign files, stale
//! renders) is told apart without any state of our own.

use std::fmt;
use std::path::PathBuf;

use atelier_layout::stamp;

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
    /// certbot's deploy hook that applies the declaration again.
    RenewalHook,
    /// The chat runtime's socket, service and purge timer, and the web server's token include.
    Chat,
}

impl ArtifactKind {
    /// Every kind, in stamp order.
    pub const ALL: [ArtifactKind; 11] = [
        ArtifactKind::Unit,
        ArtifactKind::AgentUnits,
        ArtifactKind::AgentAuthorization,
        ArtifactKind::Gate,
        ArtifactKind::Env,
        ArtifactKind::Sites,
        ArtifactKind::NginxVhost,
        ArtifactKind::ApacheVhost,
        ArtifactKind::EngineFragment,
        ArtifactKind::RenewalHook,
        ArtifactKind::Chat,
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
            ArtifactKind::RenewalHook => "renewal_hook",
            ArtifactKind::Chat => "chat",
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

pub use atelier_layout::stamp::CommentStyle;

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
    /// What is written instead while a file the artifact names is not on the host yet.
    pub stand_in: Option<StandIn>,
}

/// The file that stands in for an artifact until the files it names exist: a letsencrypt
/// site's vhost that serves only the ACME challenge until certbot has put its certificate in
/// place (a server told to load a missing certificate would refuse its whole configuration).
/// The plan observes `requires` (never reading them) and picks which bytes to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandIn {
    /// The files the artifact names: a certificate chain and its key.
    pub requires: Vec<PathBuf>,
    /// The whole stand-in file: stamp line (same instance and kind), then its body.
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
            bytes: stamp::stamped(instance, kind.as_str(), style, body.as_bytes()),
            stand_in: None,
        }
    }

    /// The same artifact with a stand-in: `body`, stamped for `instance` in `style` like the
    /// artifact, written instead while any file of `requires` is missing from the host.
    pub fn with_stand_in(
        mut self,
        instance: &str,
        style: CommentStyle,
        requires: Vec<PathBuf>,
        body: &str,
    ) -> Self {
        self.stand_in = Some(StandIn {
            requires,
            bytes: stamp::stamped(instance, self.kind.as_str(), style, body.as_bytes()),
        });
        self
    }

    /// The body after the stamp line.
    pub fn body(&self) -> &[u8] {
        stamp::split_stamp(&self.bytes).map_or(&self.bytes[..], |(_, body)| body)
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

/// Parses the stamp on the first line of `file`, if it is ours and names a known kind.
pub fn parse_stamp(file: &[u8]) -> Option<Stamp> {
    let stamp = stamp::parse_stamp(file)?;
    Some(Stamp {
        kind: ArtifactKind::parse(&stamp.kind)?,
        instance: stamp.instance,
        sha256: stamp.sha256,
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
    let Some(raw) = stamp::parse_stamp(existing) else {
        return Drift::Unstamped;
    };
    if stamp::body_matches(existing, &raw) {
        Drift::Stale
    } else {
        Drift::HandEdited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamped(instance: &str, kind: ArtifactKind, body: &[u8]) -> Vec<u8> {
        stamp::stamped(instance, kind.as_str(), CommentStyle::Hash, body)
    }

    #[test]
    fn drift_classes() {
        let ours = stamped("museum", ArtifactKind::Env, b"A=1\n");
        let newer = stamped("museum", ArtifactKind::Env, b"A=2\n");
        let foreign = stamped("other", ArtifactKind::Env, b"A=1\n");
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
}
