//! The typed JSON messages carried in `H`, `S`, `X` and `T` frames.
//!
//! Every message has a closed key set (`deny_unknown_fields`) and is validated after parsing;
//! `from_json`/`from_frame` return a [`MessageError`] naming what is wrong, and `to_frame`
//! validates too, so a sender cannot emit a message its peer would refuse.
//!
//! Parts: [`Door`], [`Hello`] (`H`), [`Spec`] (`S`) with [`is_fixed_env_key`], [`ExitRecord`]
//! (`X`), and [`BuildEvent`] (`T`) with [`BuildStep`] and [`StepOutcome`].

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::frame::{Frame, FrameError, FrameKind};
pub use atelier_layout::names::{Door, UnknownDoor};

/// The only protocol version spoken: the `v` of [`Hello`] and [`Spec`].
pub const PROTOCOL_VERSION: u32 = 1;

/// Environment keys a [`Spec`] may not set: the shim fixes them itself.
pub const FIXED_ENV_KEYS: [&str; 4] = [
    "HOME",
    "BUN_RUNTIME_TRANSPILER_CACHE_PATH",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_NOSYSTEM",
];

/// Prefixes of environment keys a [`Spec`] may not set: they carry the units' own settings.
pub const FIXED_ENV_KEY_PREFIXES: [&str; 2] = ["DEDALO_", "ATELIER_"];

/// Returns true if and only if `key` is an environment key the spec may not set: one of
/// [`FIXED_ENV_KEYS`] or starting with one of [`FIXED_ENV_KEY_PREFIXES`].
pub fn is_fixed_env_key(key: &str) -> bool {
    FIXED_ENV_KEYS.contains(&key)
        || FIXED_ENV_KEY_PREFIXES
            .iter()
            .any(|prefix| key.starts_with(prefix))
}

/// Returns true if and only if `key` matches `^[A-Za-z_][A-Za-z0-9_]*$`.
pub fn is_valid_env_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    match bytes.next() {
        Some(first) if first.is_ascii_alphabetic() || first == b'_' => {
            bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }
        _ => false,
    }
}

/// Why a message was refused.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// The frame is not of the kind that carries this message.
    #[error("expected a {expected} frame, got a {found} frame")]
    WrongKind {
        /// The kind that carries the message.
        expected: FrameKind,
        /// The kind of the frame given.
        found: FrameKind,
    },
    /// The payload is not JSON of the message's shape: bad syntax, an unknown or duplicate
    /// key, a missing key, or a value of the wrong type. The source names which.
    #[error("{message} is malformed: {source}")]
    Json {
        /// The message being parsed, e.g. `spec`.
        message: &'static str,
        /// serde's description, e.g. "unknown field `x`, expected one of ...".
        #[source]
        source: serde_json::Error,
    },
    /// The message's `v` is not [`PROTOCOL_VERSION`].
    #[error("{message} has version {found}, only version 1 is spoken")]
    UnsupportedVersion {
        /// The message being parsed.
        message: &'static str,
        /// The version it carried.
        found: u32,
    },
    /// A field that must not be empty is empty.
    #[error("{field} is empty")]
    Empty {
        /// The field's wire name, e.g. `argv`, `argv[0]`, `hostNetns`.
        field: &'static str,
    },
    /// An argv element contains a NUL byte, which no process can receive.
    #[error("argv[{index}] contains a NUL byte")]
    NulInArgv {
        /// The element's index.
        index: usize,
    },
    /// An env key does not match `^[A-Za-z_][A-Za-z0-9_]*$`.
    #[error("env key {key:?} is not a valid name")]
    InvalidEnvKey {
        /// The offending key.
        key: String,
    },
    /// The spec's env sets a key the shim fixes itself (see [`is_fixed_env_key`]).
    #[error("env sets the fixed env key {key}")]
    FixedEnvKey {
        /// The offending key.
        key: String,
    },
    /// An env value contains a NUL byte, which no process can receive.
    #[error("env value of {key} contains a NUL byte")]
    NulInEnvValue {
        /// The key whose value is bad.
        key: String,
    },
    /// The message does not fit in a frame of its kind.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// `H`: the shim's first frame, `{"v":1,"door":..,"unit":..}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// Protocol version; must be [`PROTOCOL_VERSION`].
    pub v: u32,
    /// The door the shim's unit states.
    pub door: Door,
    /// The unit's instance name; not empty.
    pub unit: String,
}

// === impl Hello ===

impl Hello {
    /// A version-1 hello.
    pub fn new(door: Door, unit: impl Into<String>) -> Hello {
        Hello {
            v: PROTOCOL_VERSION,
            door,
            unit: unit.into(),
        }
    }

    /// Checks the rules serde cannot: the version and a non-empty unit.
    pub fn validate(&self) -> Result<(), MessageError> {
        check_version("hello", self.v)?;
        check_not_empty("unit", &self.unit)
    }
}

/// `S`: the daemon's run spec, `{"v":1,"door":..,"argv":[..],"env":{..},"hostNetns":..}` and
/// optionally `"stdin":..`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Protocol version; must be [`PROTOCOL_VERSION`].
    pub v: u32,
    /// The door this spec is for; the shim refuses a spec for another door.
    pub door: Door,
    /// The program and its arguments; not empty, `argv[0]` not empty, later elements may be
    /// empty (e.g. `--setting-sources ''`).
    pub argv: Vec<String>,
    /// Environment for the program: valid names, no fixed key, no duplicate key on the wire.
    #[serde(deserialize_with = "deserialize_env")]
    pub env: BTreeMap<String, String>,
    /// The daemon's network namespace identity (`readlink /proc/self/ns/net`), which the shim's
    /// own must differ from; not empty.
    #[serde(rename = "hostNetns")]
    pub host_netns: String,
    /// What the program reads on its stdin, then end of file; absent, stdin is `/dev/null`.
    /// (A prompt given this way reaches a CLI exactly, where its argv parser would not pass it
    /// on as it is.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
}

// === impl Spec ===

impl Spec {
    /// Checks the rules serde cannot: version, argv, env keys and values, and `hostNetns`.
    pub fn validate(&self) -> Result<(), MessageError> {
        check_version("spec", self.v)?;
        check_argv(&self.argv)?;
        for (key, value) in &self.env {
            if !is_valid_env_key(key) {
                return Err(MessageError::InvalidEnvKey { key: key.clone() });
            }
            if is_fixed_env_key(key) {
                return Err(MessageError::FixedEnvKey { key: key.clone() });
            }
            if value.contains('\0') {
                return Err(MessageError::NulInEnvValue { key: key.clone() });
            }
        }
        check_not_empty("hostNetns", &self.host_netns)
    }
}

/// `X`: the shim's last frame, `{"code":int|null,"signal":string|null}`; both keys required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExitRecord {
    /// The exit code, if the program exited.
    #[serde(deserialize_with = "deserialize_present")]
    pub code: Option<i32>,
    /// The signal's name (e.g. `SIGKILL`), if a signal ended the program; not empty.
    #[serde(deserialize_with = "deserialize_present")]
    pub signal: Option<String>,
}

// === impl ExitRecord ===

impl ExitRecord {
    /// The record of a program that exited with `code`.
    pub fn exited(code: i32) -> ExitRecord {
        ExitRecord {
            code: Some(code),
            signal: None,
        }
    }

    /// The record of a program ended by the signal named `signal`.
    pub fn signaled(signal: impl Into<String>) -> ExitRecord {
        ExitRecord {
            code: None,
            signal: Some(signal.into()),
        }
    }

    /// Checks the rules serde cannot: a present signal name is not empty.
    pub fn validate(&self) -> Result<(), MessageError> {
        match &self.signal {
            Some(signal) => check_not_empty("signal", signal),
            None => Ok(()),
        }
    }
}

/// A build step of the site manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildStep {
    /// Installing dependencies.
    Install,
    /// Building the site.
    Build,
}

/// How a build step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// Exited with code 0.
    Ok,
    /// Exited non-zero or was killed.
    Failed,
    /// Killed at its deadline.
    TimedOut,
}

/// `T`: a build event, tagged by `"event"`, e.g.
/// `{"event":"step_started","step":"install","argv":["bun","install"]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum BuildEvent {
    /// A step's program was started.
    StepStarted {
        /// Which step.
        step: BuildStep,
        /// The program and arguments run; not empty, `argv[0]` not empty.
        argv: Vec<String>,
    },
    /// A step's program ended.
    StepFinished {
        /// Which step.
        step: BuildStep,
        /// How it ended.
        outcome: StepOutcome,
        /// Its exit code, if it exited (the key is required, `null` allowed).
        #[serde(deserialize_with = "deserialize_present")]
        code: Option<i32>,
        /// Wall time the step took, in milliseconds.
        duration_ms: u64,
    },
    /// The output directory was checked.
    OutputVerified {
        /// The output directory, relative to the site; not empty.
        output: String,
        /// Number of files in it.
        files: u64,
        /// Total size of those files, in bytes.
        bytes: u64,
    },
    /// The build refused to run.
    Refused {
        /// Why; not empty.
        reason: String,
    },
}

// === impl BuildEvent ===

impl BuildEvent {
    /// Checks the rules serde cannot: non-empty argv, program, output and reason.
    pub fn validate(&self) -> Result<(), MessageError> {
        match self {
            BuildEvent::StepStarted { argv, .. } => check_argv(argv),
            BuildEvent::StepFinished { .. } => Ok(()),
            BuildEvent::OutputVerified { output, .. } => check_not_empty("output", output),
            BuildEvent::Refused { reason } => check_not_empty("reason", reason),
        }
    }
}

/// Gives a message `from_json`, `from_frame` and `to_frame`, all validating.
macro_rules! framed_message {
    ($ty:ident, $kind:expr, $name:literal) => {
        impl $ty {
            #[doc = concat!("The frame kind that carries a ", $name, ".")]
            pub const KIND: FrameKind = $kind;

            #[doc = concat!("Parses a ", $name, " from JSON and validates it.")]
            pub fn from_json(json: &[u8]) -> Result<$ty, MessageError> {
                let message: $ty = parse_json($name, json)?;
                message.validate()?;
                Ok(message)
            }

            #[doc = concat!("Parses a ", $name, " from a frame of kind `KIND`.")]
            pub fn from_frame(frame: &Frame) -> Result<$ty, MessageError> {
                if frame.kind != Self::KIND {
                    return Err(MessageError::WrongKind {
                        expected: Self::KIND,
                        found: frame.kind,
                    });
                }
                $ty::from_json(&frame.payload)
            }

            #[doc = concat!("Validates this ", $name, " and encodes it as a frame within its cap.")]
            pub fn to_frame(&self) -> Result<Frame, MessageError> {
                self.validate()?;
                Ok(Frame::json(Self::KIND, self)?)
            }
        }
    };
}

framed_message!(Hello, FrameKind::Hello, "hello");
framed_message!(Spec, FrameKind::Spec, "spec");
framed_message!(ExitRecord, FrameKind::Exit, "exit record");
framed_message!(BuildEvent, FrameKind::Event, "build event");

/// Parses a message, which must be a JSON object: serde's derives also accept a struct as an
/// array of its values (and an internally tagged enum as `[tag, ...]`), which is not our wire
/// form.
fn parse_json<T: DeserializeOwned>(message: &'static str, json: &[u8]) -> Result<T, MessageError> {
    parse_object(json).map_err(|source| MessageError::Json { message, source })
}

/// Parses `json`, which must be a JSON object (see [`parse_json`] for why this is checked).
pub(crate) fn parse_object<T: DeserializeOwned>(json: &[u8]) -> Result<T, serde_json::Error> {
    let first = json
        .iter()
        .find(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'));
    if first.is_some_and(|&byte| byte != b'{') {
        return Err(serde::de::Error::custom("expected a JSON object"));
    }
    serde_json::from_slice(json)
}

fn check_version(message: &'static str, found: u32) -> Result<(), MessageError> {
    if found == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(MessageError::UnsupportedVersion { message, found })
    }
}

fn check_not_empty(field: &'static str, value: &str) -> Result<(), MessageError> {
    if value.is_empty() {
        Err(MessageError::Empty { field })
    } else {
        Ok(())
    }
}

fn check_argv(argv: &[String]) -> Result<(), MessageError> {
    let Some(program) = argv.first() else {
        return Err(MessageError::Empty { field: "argv" });
    };
    check_not_empty("argv[0]", program)?;
    match argv.iter().position(|arg| arg.contains('\0')) {
        Some(index) => Err(MessageError::NulInArgv { index }),
        None => Ok(()),
    }
}

/// Deserializes an `Option` whose key must be present (serde would default a missing one to
/// `None`); `null` is still `None`.
pub(crate) fn deserialize_present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}

/// Deserializes the env object, refusing a key given twice: a map would keep the last one,
/// and two readers disagreeing on which value wins is how checks get bypassed.
fn deserialize_env<'de, D>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: Deserializer<'de>,
{
    struct EnvVisitor;

    impl<'de> serde::de::Visitor<'de> for EnvVisitor {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object of string values")
        }

        fn visit_map<A>(self, mut map: A) -> Result<Self::Value, A::Error>
        where
            A: serde::de::MapAccess<'de>,
        {
            let mut env = BTreeMap::new();
            while let Some((key, value)) = map.next_entry::<String, String>()? {
                if env.contains_key(&key) {
                    return Err(serde::de::Error::custom(format_args!(
                        "duplicate env key `{key}`"
                    )));
                }
                env.insert(key, value);
            }
            Ok(env)
        }
    }

    deserializer.deserialize_map(EnvVisitor)
}

#[cfg(test)]
mod tests;
