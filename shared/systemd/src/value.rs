//! The comparable form of a unit property: what PID 1 reports over D-Bus (or what a unit file
//! says) normalized to booleans, integers, strings, string lists, pairs and commands.
//!
//! The normalization is by D-Bus signature, so every property of a kind reads the same way:
//! `b` is a boolean, `u`/`t` an unsigned integer, `i` a signed one, `as` a list, `a(ss)` pairs
//! (`Listen` is `(type, path)`, `TemporaryFileSystem` is `(path, options)`). The structured
//! ones are written the way a unit file writes them, so a mismatch reads like the directive:
//! bind paths as `[-]source:destination[:norbind]`, IP address lists as `address/prefix`,
//! address families as names (`~` before each one of a deny list), commands as their path,
//! argv and flags. Credential values (`SetCredential=`) are never carried, only their ids.

use std::fmt;

use zbus::zvariant;

/// One command of an `Exec*=` property.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExecCommand {
    /// The binary PID 1 executes.
    pub path: String,
    /// Its argv, `argv[0]` included.
    pub argv: Vec<String>,
    /// The command's prefix flags as systemd names them (`ignore-failure`, `privileged`,
    /// `no-setuid`, `ambient`, `no-env-expand`); empty for a plain command.
    pub flags: Vec<String>,
}

// === impl ExecCommand ===

impl ExecCommand {
    /// A plain command: `argv[0]` is the path, no flags.
    pub fn plain(argv: &[&str]) -> Self {
        Self {
            path: argv.first().map(|a| (*a).to_owned()).unwrap_or_default(),
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            flags: Vec::new(),
        }
    }
}

impl fmt::Display for ExecCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.flags.is_empty() {
            write!(f, "[{}] ", self.flags.join(","))?;
        }
        if self.argv.first() != Some(&self.path) {
            write!(f, "{} @ ", self.path)?;
        }
        f.write_str(&self.argv.join(" "))
    }
}

/// A property's value, normalized so that what PID 1 loaded and what Atelier expects compare
/// with `==`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A boolean (`b`).
    Bool(bool),
    /// An unsigned integer (`y`, `q`, `u`, `t`): modes, limits, microseconds. `u64::MAX` is
    /// systemd's "infinity" or "not set".
    UInt(u64),
    /// A signed integer (`n`, `i`, `x`): signals, error numbers.
    Int(i64),
    /// A string or object path.
    Str(String),
    /// A list of strings, in the order PID 1 reports them.
    List(Vec<String>),
    /// A list of pairs (`a(ss)`).
    Pairs(Vec<(String, String)>),
    /// A list of commands (`Exec*=`).
    Commands(Vec<ExecCommand>),
    /// A value of a shape this crate does not compare; carries its D-Bus signature, so an
    /// expectation on it fails naming what was there instead of passing silently.
    Unsupported(String),
}

// === impl Value ===

impl Value {
    /// A string value.
    pub fn str(text: impl Into<String>) -> Self {
        Value::Str(text.into())
    }

    /// A list of strings.
    pub fn list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Self {
        Value::List(items.into_iter().map(|s| s.as_ref().to_owned()).collect())
    }

    /// A list of pairs.
    pub fn pairs<A: AsRef<str>, B: AsRef<str>>(items: impl IntoIterator<Item = (A, B)>) -> Self {
        Value::Pairs(
            items
                .into_iter()
                .map(|(a, b)| (a.as_ref().to_owned(), b.as_ref().to_owned()))
                .collect(),
        )
    }

    /// Returns true if and only if the value is empty: an empty string, list, pair list or
    /// command list, or zero for a number (an empty `CapabilityBoundingSet=` is 0).
    pub fn is_empty(&self) -> bool {
        match self {
            Value::Str(s) => s.is_empty(),
            Value::List(items) => items.is_empty(),
            Value::Pairs(items) => items.is_empty(),
            Value::Commands(items) => items.is_empty(),
            Value::UInt(n) => *n == 0,
            Value::Int(n) => *n == 0,
            Value::Bool(_) | Value::Unsupported(_) => false,
        }
    }

    /// The same value with any list sorted, so that two lists holding the same items in
    /// another order compare equal.
    pub fn sorted(&self) -> Value {
        match self {
            Value::List(items) => {
                let mut items = items.clone();
                items.sort();
                Value::List(items)
            }
            Value::Pairs(items) => {
                let mut items = items.clone();
                items.sort();
                Value::Pairs(items)
            }
            Value::Commands(items) => {
                let mut items = items.clone();
                items.sort();
                Value::Commands(items)
            }
            other => other.clone(),
        }
    }

    /// The items of a list value as strings (pairs joined with a space), or `None` for a
    /// value that is not a list.
    pub fn items(&self) -> Option<Vec<String>> {
        match self {
            Value::List(items) => Some(items.clone()),
            Value::Pairs(items) => Some(items.iter().map(|(a, b)| format!("{a} {b}")).collect()),
            Value::Commands(items) => Some(items.iter().map(ExecCommand::to_string).collect()),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(true) => f.write_str("yes"),
            Value::Bool(false) => f.write_str("no"),
            Value::UInt(u64::MAX) => f.write_str("infinity"),
            Value::UInt(n) => write!(f, "{n}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::List(_) | Value::Pairs(_) | Value::Commands(_) => {
                let items = self.items().unwrap_or_default();
                write!(f, "[{}]", items.join(", "))
            }
            Value::Unsupported(signature) => write!(f, "<a value of D-Bus type {signature}>"),
        }
    }
}

/// The `MS_REC` mount flag: systemd reports a recursive (the default) bind with it.
const MS_REC: u64 = 16384;

/// Normalizes one property PID 1 reported: by its D-Bus signature, with the structured kinds
/// written the way a unit file writes them. `name` picks out the few properties whose shape
/// alone does not say how to read them.
pub fn from_dbus(name: &str, value: &zvariant::Value<'_>) -> Value {
    let value = unwrap_variant(value);
    let signature = value.value_signature().to_string();
    let normalized = match (name, signature.as_str()) {
        (_, "b") => as_bool(value).map(Value::Bool),
        (_, "y" | "q" | "u" | "t") => as_u64(value).map(Value::UInt),
        (_, "n" | "i" | "x") => as_i64(value).map(Value::Int),
        (_, "s" | "o" | "g") => as_string(value).map(Value::Str),
        (_, "as") => string_list(value).map(Value::List),
        // Credentials: the id only; a value must never reach an error or a log.
        ("SetCredential" | "SetCredentialEncrypted", _) => struct_list(value)
            .and_then(|items| items.iter().map(|f| field_string(f, 0)).collect())
            .map(Value::List),
        (_, "a(ss)") => struct_list(value)
            .and_then(|items| {
                items
                    .iter()
                    .map(|f| Some((field_string(f, 0)?, field_string(f, 1)?)))
                    .collect()
            })
            .map(Value::Pairs),
        (_, "a(ssbt)") => struct_list(value)
            .and_then(|items| items.iter().map(|f| bind_path(f)).collect())
            .map(Value::List),
        (_, "a(sb)") => struct_list(value)
            .and_then(|items| {
                items
                    .iter()
                    .map(|f| {
                        let path = field_string(f, 0)?;
                        let ignore = as_bool(f.get(1)?)?;
                        Some(if ignore { format!("-{path}") } else { path })
                    })
                    .collect()
            })
            .map(Value::List),
        (_, "a(iayu)") => struct_list(value)
            .and_then(|items| items.iter().map(|f| ip_prefix(f)).collect())
            .map(Value::List),
        (_, "a(sasbttttuii)") => struct_list(value)
            .and_then(|items| items.iter().map(|f| exec_command(f, false)).collect())
            .map(Value::Commands),
        (_, "a(sasasttttuii)") => struct_list(value)
            .and_then(|items| items.iter().map(|f| exec_command(f, true)).collect())
            .map(Value::Commands),
        (_, "(bas)") => address_families(value).map(Value::List),
        _ => None,
    };
    normalized.unwrap_or_else(|| {
        // An empty list reads the same whatever its items would have been.
        if array(value).is_some_and(<[_]>::is_empty) {
            Value::List(Vec::new())
        } else {
            Value::Unsupported(signature)
        }
    })
}

fn unwrap_variant<'v>(value: &'v zvariant::Value<'v>) -> &'v zvariant::Value<'v> {
    match value {
        zvariant::Value::Value(inner) => unwrap_variant(inner),
        other => other,
    }
}

fn as_bool(value: &zvariant::Value<'_>) -> Option<bool> {
    match unwrap_variant(value) {
        zvariant::Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn as_u64(value: &zvariant::Value<'_>) -> Option<u64> {
    match unwrap_variant(value) {
        zvariant::Value::U8(n) => Some(u64::from(*n)),
        zvariant::Value::U16(n) => Some(u64::from(*n)),
        zvariant::Value::U32(n) => Some(u64::from(*n)),
        zvariant::Value::U64(n) => Some(*n),
        _ => None,
    }
}

fn as_i64(value: &zvariant::Value<'_>) -> Option<i64> {
    match unwrap_variant(value) {
        zvariant::Value::I16(n) => Some(i64::from(*n)),
        zvariant::Value::I32(n) => Some(i64::from(*n)),
        zvariant::Value::I64(n) => Some(*n),
        _ => None,
    }
}

fn as_string(value: &zvariant::Value<'_>) -> Option<String> {
    match unwrap_variant(value) {
        zvariant::Value::Str(s) => Some(s.as_str().to_owned()),
        zvariant::Value::ObjectPath(p) => Some(p.as_str().to_owned()),
        zvariant::Value::Signature(s) => Some(s.to_string()),
        _ => None,
    }
}

fn array<'v>(value: &'v zvariant::Value<'v>) -> Option<&'v [zvariant::Value<'v>]> {
    match unwrap_variant(value) {
        zvariant::Value::Array(items) => Some(items.inner()),
        _ => None,
    }
}

fn string_list(value: &zvariant::Value<'_>) -> Option<Vec<String>> {
    array(value)?.iter().map(as_string).collect()
}

fn struct_list<'v>(value: &'v zvariant::Value<'v>) -> Option<Vec<&'v [zvariant::Value<'v>]>> {
    array(value)?
        .iter()
        .map(|item| match item {
            zvariant::Value::Structure(s) => Some(s.fields()),
            _ => None,
        })
        .collect()
}

fn field_string(fields: &[zvariant::Value<'_>], index: usize) -> Option<String> {
    as_string(fields.get(index)?)
}

/// `(source, destination, ignore-missing, mount flags)` as `[-]source:destination[:norbind]`.
fn bind_path(fields: &[zvariant::Value<'_>]) -> Option<String> {
    let source = field_string(fields, 0)?;
    let destination = field_string(fields, 1)?;
    let ignore_missing = as_bool(fields.get(2)?)?;
    let flags = as_u64(fields.get(3)?)?;
    let mut text = String::new();
    if ignore_missing {
        text.push('-');
    }
    text.push_str(&source);
    text.push(':');
    text.push_str(&destination);
    if flags & MS_REC == 0 {
        text.push_str(":norbind");
    }
    Some(text)
}

/// `(family, address bytes, prefix length)` as `address/prefix`.
fn ip_prefix(fields: &[zvariant::Value<'_>]) -> Option<String> {
    let family = as_i64(fields.first()?)?;
    let bytes: Vec<u8> = array(fields.get(1)?)?
        .iter()
        .map(|b| match b {
            zvariant::Value::U8(b) => Some(*b),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let prefix = as_u64(fields.get(2)?)?;
    let address = match (family, bytes.as_slice()) {
        (2, &[a, b, c, d]) => std::net::IpAddr::from([a, b, c, d]),
        (10, octets) => {
            let octets: [u8; 16] = octets.try_into().ok()?;
            std::net::IpAddr::from(octets)
        }
        _ => return None,
    };
    Some(format!("{address}/{prefix}"))
}

/// `(path, argv, ignore-failure | flags, timestamps…, pid, code, status)` as a command.
fn exec_command(fields: &[zvariant::Value<'_>], extended: bool) -> Option<ExecCommand> {
    let path = field_string(fields, 0)?;
    let argv = string_list(fields.get(1)?)?;
    let flags = if extended {
        string_list(fields.get(2)?)?
    } else if as_bool(fields.get(2)?)? {
        vec!["ignore-failure".to_owned()]
    } else {
        Vec::new()
    };
    Some(ExecCommand { path, argv, flags })
}

/// `(allow-list?, families)` as the family names, each one of a deny list prefixed with `~`.
fn address_families(value: &zvariant::Value<'_>) -> Option<Vec<String>> {
    let zvariant::Value::Structure(s) = unwrap_variant(value) else {
        return None;
    };
    let allow = as_bool(s.fields().first()?)?;
    let families = string_list(s.fields().get(1)?)?;
    Some(if allow {
        families
    } else {
        families.into_iter().map(|f| format!("~{f}")).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zvariant::{Structure, StructureBuilder};

    fn dbus<'a>(v: impl Into<zvariant::Value<'a>>) -> zvariant::Value<'a> {
        v.into()
    }

    #[test]
    fn basic_signatures() {
        assert_eq!(from_dbus("PrivateNetwork", &dbus(true)), Value::Bool(true));
        assert_eq!(from_dbus("SocketMode", &dbus(0o600u32)), Value::UInt(0o600));
        assert_eq!(
            from_dbus("MemoryMax", &dbus(u64::MAX)),
            Value::UInt(u64::MAX)
        );
        assert_eq!(from_dbus("KillSignal", &dbus(15i32)), Value::Int(15));
        assert_eq!(
            from_dbus("User", &dbus("atelier-a-x_1")),
            Value::str("atelier-a-x_1")
        );
        assert_eq!(
            from_dbus("ReadWritePaths", &dbus(vec!["/a", "/b"])),
            Value::list(["/a", "/b"])
        );
        // A variant around a value reads as the value.
        let wrapped = zvariant::Value::Value(Box::new(dbus(7u32)));
        assert_eq!(from_dbus("TasksMax", &wrapped), Value::UInt(7));
    }

    #[test]
    fn listen_pairs() {
        let listen = dbus(vec![("Stream", "/run/x.sock")]);
        assert_eq!(
            from_dbus("Listen", &listen),
            Value::pairs([("Stream", "/run/x.sock")])
        );
    }

    #[test]
    fn bind_paths_read_like_the_directive() {
        let binds = dbus(vec![
            ("/a", "/a", false, MS_REC),
            ("/b", "/c", true, MS_REC),
            ("/d", "/e", false, 0u64),
        ]);
        assert_eq!(
            from_dbus("BindPaths", &binds),
            Value::list(["/a:/a", "-/b:/c", "/d:/e:norbind"])
        );
    }

    #[test]
    fn ip_prefixes() {
        let list = dbus(vec![
            (2i32, vec![127u8, 0, 0, 0], 8u32),
            (
                10i32,
                vec![0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                128u32,
            ),
        ]);
        assert_eq!(
            from_dbus("IPAddressAllow", &list),
            Value::list(["127.0.0.0/8", "::1/128"])
        );
        // An address of the wrong length is not guessed at.
        let bad = dbus(vec![(2i32, vec![127u8, 0, 0], 8u32)]);
        assert_eq!(
            from_dbus("IPAddressAllow", &bad),
            Value::Unsupported("a(iayu)".into())
        );
    }

    fn exec_entry(path: &str, argv: Vec<&str>, ignore: bool) -> Structure<'static> {
        StructureBuilder::new()
            .add_field(path.to_owned())
            .add_field(argv.into_iter().map(str::to_owned).collect::<Vec<_>>())
            .add_field(ignore)
            .add_field(0u64)
            .add_field(0u64)
            .add_field(0u64)
            .add_field(0u64)
            .add_field(0u32)
            .add_field(0i32)
            .add_field(0i32)
            .build()
            .unwrap()
    }

    #[test]
    fn commands() {
        let mut array = zvariant::Array::new(exec_entry("/x", vec![], false).signature());
        array
            .append(exec_entry("/bin/shim", vec!["/bin/shim", "--a"], false).into())
            .unwrap();
        array
            .append(exec_entry("/bin/pre", vec!["pre"], true).into())
            .unwrap();
        let value = zvariant::Value::Array(array);
        assert_eq!(
            from_dbus("ExecStart", &value),
            Value::Commands(vec![
                ExecCommand::plain(&["/bin/shim", "--a"]),
                ExecCommand {
                    path: "/bin/pre".into(),
                    argv: vec!["pre".into()],
                    flags: vec!["ignore-failure".into()],
                },
            ])
        );
    }

    #[test]
    fn address_family_lists() {
        let allow = dbus(
            StructureBuilder::new()
                .add_field(true)
                .add_field(vec!["AF_UNIX".to_owned()])
                .build()
                .unwrap(),
        );
        assert_eq!(
            from_dbus("RestrictAddressFamilies", &allow),
            Value::list(["AF_UNIX"])
        );
        let deny = dbus(
            StructureBuilder::new()
                .add_field(false)
                .add_field(vec!["AF_PACKET".to_owned()])
                .build()
                .unwrap(),
        );
        assert_eq!(
            from_dbus("RestrictAddressFamilies", &deny),
            Value::list(["~AF_PACKET"])
        );
    }

    #[test]
    fn credential_values_never_carried() {
        let set = dbus(vec![("TOKEN", vec![0x73u8, 0x65, 0x63])]);
        let normalized = from_dbus("SetCredential", &set);
        assert_eq!(normalized, Value::list(["TOKEN"]));
        assert!(!normalized.to_string().contains("sec"));
    }

    #[test]
    fn unknown_shapes_are_named_not_guessed() {
        let odd = dbus(vec![(1u32, 2u32)]);
        assert_eq!(
            from_dbus("Whatever", &odd),
            Value::Unsupported("a(uu)".into())
        );
    }

    #[test]
    fn emptiness_and_display() {
        assert!(Value::UInt(0).is_empty());
        assert!(Value::list::<&str>([]).is_empty());
        assert!(!Value::Bool(false).is_empty());
        assert_eq!(Value::UInt(u64::MAX).to_string(), "infinity");
        assert_eq!(Value::Bool(false).to_string(), "no");
        assert_eq!(Value::list(["a", "b"]).to_string(), "[a, b]");
        assert_eq!(Value::list(["b", "a"]).sorted(), Value::list(["a", "b"]));
    }
}
