//! What a unit file says, read into the same normalized properties PID 1 reports over D-Bus,
//! so a rendered unit can be checked against the expectations without booting anything.
//!
//! Only the directives Atelier's door units use (and the ones conformance requires to be
//! empty) are converted; the rest are ignored. Values are converted the way systemd 252
//! converts them: sizes are 1024-based, `CPUQuota=` becomes microseconds per second, time
//! spans microseconds, signals numbers, modes integers, `IPAddressAllow=localhost` its two
//! prefixes; list directives accumulate and an empty assignment resets them.

use std::collections::BTreeMap;

use crate::property::{Interface, LoadedUnit, Property, UnitKind};
use crate::value::{ExecCommand, Value};

/// One `Key=value` line of a unit file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// The section it is in, without brackets.
    pub section: String,
    /// The key.
    pub key: String,
    /// The value, untrimmed of inner spaces.
    pub value: String,
}

/// The directives of a unit file, in order.
pub fn parse(text: &str) -> Vec<Directive> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            name.clone_into(&mut section);
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            out.push(Directive {
                section: section.clone(),
                key: key.trim().to_owned(),
                value: value.trim().to_owned(),
            });
        }
    }
    out
}

/// The properties PID 1 would load from `text` for `unit`.
pub fn loaded(unit: &str, kind: UnitKind, text: &str) -> LoadedUnit {
    let mut loaded = LoadedUnit::new(unit, kind);
    loaded.set(Property::unit("LoadState"), Value::str("loaded"));
    if kind == UnitKind::Service {
        // What PID 1 loads for those the renderer leaves at systemd's default.
        loaded.set(Property::service("DynamicUser"), Value::Bool(false));
        loaded.set(Property::service("PrivateUsers"), Value::Bool(false));
        loaded.set(Property::service("NoNewPrivileges"), Value::Bool(false));
        loaded.set(
            Property::service("ProtectKernelTunables"),
            Value::Bool(false),
        );
        loaded.set(Property::service("ProtectHome"), Value::str("no"));
    }
    let mut lists: BTreeMap<(Interface, &'static str), Vec<String>> = BTreeMap::new();
    let mut pairs: BTreeMap<(Interface, &'static str), Vec<(String, String)>> = BTreeMap::new();
    let mut commands: BTreeMap<(Interface, &'static str), Vec<ExecCommand>> = BTreeMap::new();
    for directive in parse(text) {
        let interface = match (directive.section.as_str(), kind) {
            ("Unit", _) => Interface::Unit,
            ("Service", UnitKind::Service) => Interface::Service,
            ("Socket", UnitKind::Socket) => Interface::Socket,
            _ => continue,
        };
        let value = directive.value.as_str();
        let Some(conversion) = conversion(interface, &directive.key) else {
            continue;
        };
        match conversion {
            Conversion::Scalar(name, convert) => {
                loaded.set(property(interface, name), convert(value));
            }
            Conversion::List(name, split) => {
                let list = lists.entry((interface, name)).or_default();
                if value.is_empty() {
                    list.clear();
                } else {
                    list.extend(split(value));
                }
            }
            Conversion::Pairs(name, split) => {
                let list = pairs.entry((interface, name)).or_default();
                if value.is_empty() {
                    list.clear();
                } else {
                    list.extend(split(&directive.key, value));
                }
            }
            Conversion::Exec(name, extended) => {
                for (property_name, ex) in [(name, false), (extended, true)] {
                    let list = commands.entry((interface, property_name)).or_default();
                    if value.is_empty() {
                        list.clear();
                    } else {
                        list.push(exec_command(value, ex));
                    }
                }
            }
        }
    }
    for ((interface, name), list) in lists {
        loaded.set(property(interface, name), Value::List(list));
    }
    for ((interface, name), list) in pairs {
        loaded.set(property(interface, name), Value::Pairs(list));
    }
    for ((interface, name), list) in commands {
        loaded.set(property(interface, name), Value::Commands(list));
    }
    loaded
}

fn property(interface: Interface, name: &'static str) -> Property {
    Property { interface, name }
}

type Split = fn(&str) -> Vec<String>;
type SplitPairs = fn(&str, &str) -> Vec<(String, String)>;

enum Conversion {
    Scalar(&'static str, fn(&str) -> Value),
    List(&'static str, Split),
    Pairs(&'static str, SplitPairs),
    Exec(&'static str, &'static str),
}

/// How a directive becomes a property, by section and key.
fn conversion(interface: Interface, key: &str) -> Option<Conversion> {
    use Conversion::{Exec, List, Pairs, Scalar};
    let unit_list = |name| Some(List(name, words));
    if interface == Interface::Unit {
        return match key {
            "BindsTo" => unit_list("BindsTo"),
            "After" => unit_list("After"),
            "Before" => unit_list("Before"),
            "Requires" => unit_list("Requires"),
            "Wants" => unit_list("Wants"),
            "Conflicts" => unit_list("Conflicts"),
            "PartOf" => unit_list("PartOf"),
            "JoinsNamespaceOf" => unit_list("JoinsNamespaceOf"),
            "CollectMode" => Some(Scalar("CollectMode", string)),
            "StopWhenUnneeded" => Some(Scalar("StopWhenUnneeded", boolean)),
            _ => None,
        };
    }
    Some(match key {
        // Booleans.
        "Accept" => Scalar("Accept", boolean),
        "DynamicUser" => Scalar("DynamicUser", boolean),
        "LockPersonality" => Scalar("LockPersonality", boolean),
        "NoNewPrivileges" => Scalar("NoNewPrivileges", boolean),
        "PrivateDevices" => Scalar("PrivateDevices", boolean),
        "PrivateIPC" => Scalar("PrivateIPC", boolean),
        "PrivateMounts" => Scalar("PrivateMounts", boolean),
        "PrivateNetwork" => Scalar("PrivateNetwork", boolean),
        "PrivatePIDs" => Scalar("PrivatePIDs", boolean),
        "PrivateTmp" => Scalar("PrivateTmp", boolean),
        "PrivateUsers" => Scalar("PrivateUsers", boolean),
        "ProtectClock" => Scalar("ProtectClock", boolean),
        "ProtectControlGroups" => Scalar("ProtectControlGroups", boolean),
        "ProtectHostname" => Scalar("ProtectHostname", boolean),
        "ProtectKernelLogs" => Scalar("ProtectKernelLogs", boolean),
        "ProtectKernelModules" => Scalar("ProtectKernelModules", boolean),
        "ProtectKernelTunables" => Scalar("ProtectKernelTunables", boolean),
        "RemoveIPC" => Scalar("RemoveIPC", boolean),
        "RestrictRealtime" => Scalar("RestrictRealtime", boolean),
        "RestrictSUIDSGID" => Scalar("RestrictSUIDSGID", boolean),
        "SendSIGKILL" => Scalar("SendSIGKILL", boolean),
        // Strings.
        "DevicePolicy" => Scalar("DevicePolicy", string),
        "Group" => Scalar("Group", string),
        "IPCNamespacePath" => Scalar("IPCNamespacePath", string),
        "KeyringMode" => Scalar("KeyringMode", string),
        "KillMode" => Scalar("KillMode", string),
        "LogNamespace" => Scalar("LogNamespace", string),
        "OpenFile" => List("OpenFile", words),
        "NetworkNamespacePath" => Scalar("NetworkNamespacePath", string),
        "PAMName" => Scalar("PAMName", string),
        "ProcSubset" => Scalar("ProcSubset", string),
        "ProtectHome" => Scalar("ProtectHome", tristate),
        "ProtectProc" => Scalar("ProtectProc", string),
        "ProtectSystem" => Scalar("ProtectSystem", tristate),
        "RootDirectory" => Scalar("RootDirectory", string),
        "RootImage" => Scalar("RootImage", string),
        "SocketGroup" => Scalar("SocketGroup", string),
        "SocketUser" => Scalar("SocketUser", string),
        "StandardError" => Scalar("StandardError", string),
        "StandardInput" => Scalar("StandardInput", string),
        "StandardOutput" => Scalar("StandardOutput", string),
        "Type" => Scalar("Type", string),
        "User" => Scalar("User", string),
        "WorkingDirectory" => Scalar("WorkingDirectory", string),
        // Numbers.
        "DirectoryMode" => Scalar("DirectoryMode", octal),
        "SocketMode" => Scalar("SocketMode", octal),
        "UMask" => Scalar("UMask", octal),
        "MaxConnections" => Scalar("MaxConnections", unsigned),
        "TriggerLimitBurst" => Scalar("TriggerLimitBurst", unsigned),
        "TasksMax" => Scalar("TasksMax", unsigned),
        "MemoryMax" => Scalar("MemoryMax", size),
        "CPUQuota" => Scalar("CPUQuotaPerSecUSec", cpu_quota),
        "RuntimeMaxSec" => Scalar("RuntimeMaxUSec", timespan),
        "TimeoutStopSec" => Scalar("TimeoutStopUSec", timespan),
        "TriggerLimitIntervalSec" => Scalar("TriggerLimitIntervalUSec", timespan),
        "KillSignal" => Scalar("KillSignal", signal),
        "FinalKillSignal" => Scalar("FinalKillSignal", signal),
        "SystemCallErrorNumber" => Scalar("SystemCallErrorNumber", errno),
        "CapabilityBoundingSet" => Scalar("CapabilityBoundingSet", capabilities),
        "AmbientCapabilities" => Scalar("AmbientCapabilities", capabilities),
        "RestrictNamespaces" => Scalar("RestrictNamespaces", namespaces),
        // Lists.
        "Environment" => List("Environment", words),
        "ReadWritePaths" => List("ReadWritePaths", words),
        "ReadOnlyPaths" => List("ReadOnlyPaths", words),
        "InaccessiblePaths" => List("InaccessiblePaths", words),
        "SupplementaryGroups" => List("SupplementaryGroups", words),
        "PassEnvironment" => List("PassEnvironment", words),
        "RuntimeDirectory" => List("RuntimeDirectory", words),
        "StateDirectory" => List("StateDirectory", words),
        "CacheDirectory" => List("CacheDirectory", words),
        "LogsDirectory" => List("LogsDirectory", words),
        "ConfigurationDirectory" => List("ConfigurationDirectory", words),
        "EnvironmentFile" => List("EnvironmentFiles", words),
        "SystemCallArchitectures" => List("SystemCallArchitectures", words),
        "BindPaths" => List("BindPaths", bind_paths),
        "BindReadOnlyPaths" => List("BindReadOnlyPaths", bind_paths),
        "IPAddressAllow" => List("IPAddressAllow", ip_prefixes),
        "IPAddressDeny" => List("IPAddressDeny", ip_prefixes),
        "RestrictAddressFamilies" => List("RestrictAddressFamilies", families),
        "SystemCallFilter" => List("SystemCallFilter", families),
        "TemporaryFileSystem" => Pairs("TemporaryFileSystem", temporary),
        "LoadCredential" => Pairs("LoadCredential", credential_sources),
        "ListenStream" | "ListenDatagram" | "ListenSequentialPacket" | "ListenFIFO" => {
            Pairs("Listen", listen)
        }
        // Commands.
        "ExecCondition" => Exec("ExecCondition", "ExecConditionEx"),
        "ExecStart" => Exec("ExecStart", "ExecStartEx"),
        "ExecStartPre" => Exec("ExecStartPre", "ExecStartPreEx"),
        "ExecStartPost" => Exec("ExecStartPost", "ExecStartPostEx"),
        "ExecReload" => Exec("ExecReload", "ExecReloadEx"),
        "ExecStop" => Exec("ExecStop", "ExecStopEx"),
        "ExecStopPre" => Exec("ExecStopPre", "ExecStopPreEx"),
        "ExecStopPost" => Exec("ExecStopPost", "ExecStopPostEx"),
        _ => return None,
    })
}

fn string(value: &str) -> Value {
    Value::str(value)
}

/// A boolean as systemd parses one.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "yes" | "y" | "true" | "t" | "on" => Some(true),
        "0" | "no" | "n" | "false" | "f" | "off" => Some(false),
        _ => None,
    }
}

fn boolean(value: &str) -> Value {
    parse_bool(value)
        .map(Value::Bool)
        .unwrap_or_else(|| unparsed(value))
}

/// `ProtectSystem=`/`ProtectHome=`: a boolean reads as `yes`/`no`, a word as itself.
fn tristate(value: &str) -> Value {
    match parse_bool(value) {
        Some(true) => Value::str("yes"),
        Some(false) => Value::str("no"),
        None => Value::str(value),
    }
}

fn unparsed(value: &str) -> Value {
    Value::Unsupported(format!("unit file value {value:?}"))
}

fn octal(value: &str) -> Value {
    u64::from_str_radix(value, 8)
        .map(Value::UInt)
        .unwrap_or_else(|_| unparsed(value))
}

fn unsigned(value: &str) -> Value {
    if value == "infinity" {
        return Value::UInt(u64::MAX);
    }
    value
        .parse()
        .map(Value::UInt)
        .unwrap_or_else(|_| unparsed(value))
}

/// A size in bytes (`2G`: 1024-based suffixes K, M, G, T, P, E; `infinity`).
pub fn parse_size(value: &str) -> Option<u64> {
    if value == "infinity" {
        return Some(u64::MAX);
    }
    let (number, exponent) = match value.char_indices().last()? {
        (at, 'K') => (&value[..at], 1),
        (at, 'M') => (&value[..at], 2),
        (at, 'G') => (&value[..at], 3),
        (at, 'T') => (&value[..at], 4),
        (at, 'P') => (&value[..at], 5),
        (at, 'E') => (&value[..at], 6),
        _ => (value, 0),
    };
    let number: u64 = number.parse().ok()?;
    number.checked_mul(1024u64.checked_pow(exponent)?)
}

fn size(value: &str) -> Value {
    parse_size(value)
        .map(Value::UInt)
        .unwrap_or_else(|| unparsed(value))
}

/// `CPUQuota=200%` as PID 1 stores it: microseconds of CPU per second of wall time.
pub fn parse_cpu_quota(value: &str) -> Option<u64> {
    let percent: u64 = value.strip_suffix('%')?.parse().ok()?;
    percent.checked_mul(10_000)
}

fn cpu_quota(value: &str) -> Value {
    parse_cpu_quota(value)
        .map(Value::UInt)
        .unwrap_or_else(|| unparsed(value))
}

/// A time span in microseconds (`10`, `2s`, `100ms`, `5min 30s`, `infinity`); a bare number
/// is seconds.
pub fn parse_timespan(value: &str) -> Option<u64> {
    if value == "infinity" {
        return Some(u64::MAX);
    }
    let mut total: u64 = 0;
    let mut rest = value.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: u64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c.is_whitespace())
            .unwrap_or(rest.len());
        let per: u64 = match &rest[..unit_len] {
            "" | "s" | "sec" | "second" | "seconds" => 1_000_000,
            "us" | "usec" | "µs" => 1,
            "ms" | "msec" => 1_000,
            "m" | "min" | "minute" | "minutes" => 60_000_000,
            "h" | "hr" | "hour" | "hours" => 3_600_000_000,
            "d" | "day" | "days" => 86_400_000_000,
            "w" | "week" | "weeks" => 604_800_000_000,
            _ => return None,
        };
        total = total.checked_add(number.checked_mul(per)?)?;
        rest = rest[unit_len..].trim_start();
    }
    Some(total)
}

fn timespan(value: &str) -> Value {
    parse_timespan(value)
        .map(Value::UInt)
        .unwrap_or_else(|| unparsed(value))
}

/// A signal by name (`SIGTERM`, `TERM`) or number.
pub fn parse_signal(value: &str) -> Option<i64> {
    if let Ok(number) = value.parse() {
        return Some(number);
    }
    let name = value.strip_prefix("SIG").unwrap_or(value);
    Some(match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "KILL" => 9,
        "USR1" => 10,
        "USR2" => 12,
        "TERM" => 15,
        "CONT" => 18,
        "STOP" => 19,
        _ => return None,
    })
}

fn signal(value: &str) -> Value {
    parse_signal(value)
        .map(Value::Int)
        .unwrap_or_else(|| unparsed(value))
}

fn errno(value: &str) -> Value {
    match value {
        "EPERM" => Value::Int(1),
        "EACCES" => Value::Int(13),
        _ => value
            .parse()
            .map(Value::Int)
            .unwrap_or_else(|_| unparsed(value)),
    }
}

/// Only the empty set is converted: it is all Atelier renders.
fn capabilities(value: &str) -> Value {
    if value.is_empty() {
        Value::UInt(0)
    } else {
        unparsed(value)
    }
}

/// `RestrictNamespaces=yes` allows no namespace type (0); `no` allows all of them.
fn namespaces(value: &str) -> Value {
    match parse_bool(value) {
        Some(true) => Value::UInt(0),
        Some(false) => Value::UInt(ALL_NAMESPACES),
        None => unparsed(value),
    }
}

/// Every namespace type flag systemd knows (`CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS |
/// CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET`).
const ALL_NAMESPACES: u64 =
    0x0002_0000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000 | 0x2000_0000 | 0x4000_0000;

/// Space-separated words, double quotes kept together.
fn words(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in value.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(current);
    }
    out
}

/// `[-]source[:destination[:options]]` as `[-]source:destination[:norbind]`.
fn bind_paths(value: &str) -> Vec<String> {
    words(value)
        .into_iter()
        .map(|entry| {
            let (ignore, entry) = match entry.strip_prefix('-') {
                Some(rest) => ("-", rest.to_owned()),
                None => ("", entry),
            };
            let mut parts = entry.splitn(3, ':');
            let source = parts.next().unwrap_or_default().to_owned();
            let destination = parts.next().unwrap_or(&source).to_owned();
            let norbind = parts.next() == Some("norbind");
            format!(
                "{ignore}{source}:{destination}{}",
                if norbind { ":norbind" } else { "" }
            )
        })
        .collect()
}

/// Address prefixes, the keywords expanded as systemd expands them.
fn ip_prefixes(value: &str) -> Vec<String> {
    words(value)
        .into_iter()
        .flat_map(|entry| match entry.as_str() {
            "any" => vec!["0.0.0.0/0".to_owned(), "::/0".to_owned()],
            "localhost" => vec!["127.0.0.0/8".to_owned(), "::1/128".to_owned()],
            "link-local" => vec!["169.254.0.0/16".to_owned(), "fe80::/64".to_owned()],
            "multicast" => vec!["224.0.0.0/4".to_owned(), "ff00::/8".to_owned()],
            _ if entry.contains('/') => vec![entry],
            _ if entry.contains(':') => vec![format!("{entry}/128")],
            _ => vec![format!("{entry}/32")],
        })
        .collect()
}

/// Address family or syscall names; a deny list (`~AF_…`, `~@group`) marks each one with `~`.
fn families(value: &str) -> Vec<String> {
    match value.strip_prefix('~') {
        Some(rest) => words(rest).into_iter().map(|f| format!("~{f}")).collect(),
        None => words(value),
    }
}

/// `path[:options]` entries as (path, options).
fn temporary(_key: &str, value: &str) -> Vec<(String, String)> {
    words(value)
        .into_iter()
        .map(|entry| match entry.split_once(':') {
            Some((path, options)) => (path.to_owned(), options.to_owned()),
            None => (entry, String::new()),
        })
        .collect()
}

/// `LoadCredential=id:source` as (id, source).
fn credential_sources(_key: &str, value: &str) -> Vec<(String, String)> {
    match value.split_once(':') {
        Some((id, source)) => vec![(id.to_owned(), source.to_owned())],
        None => vec![(value.to_owned(), String::new())],
    }
}

/// `ListenStream=/path` as (`Stream`, path), as PID 1 reports `Listen`.
fn listen(key: &str, value: &str) -> Vec<(String, String)> {
    let kind = key.strip_prefix("Listen").unwrap_or(key);
    vec![(kind.to_owned(), value.to_owned())]
}

/// An `Exec*=` line: its prefixes (`-@:+!`), path and argv.
fn exec_command(value: &str, extended: bool) -> ExecCommand {
    let mut rest = value;
    let mut flags = Vec::new();
    let mut argv0_given = false;
    loop {
        if let Some(r) = rest.strip_prefix("!!") {
            flags.push("ambient");
            rest = r;
            continue;
        }
        let Some(c) = rest.chars().next() else { break };
        let flag = match c {
            '-' => "ignore-failure",
            '+' => "privileged",
            '!' => "no-setuid",
            ':' => "no-env-expand",
            '@' => {
                argv0_given = true;
                rest = &rest[1..];
                continue;
            }
            _ => break,
        };
        flags.push(flag);
        rest = &rest[c.len_utf8()..];
    }
    let mut parts = words(rest);
    let path = if parts.is_empty() {
        String::new()
    } else {
        parts[0].clone()
    };
    if argv0_given && !parts.is_empty() {
        parts.remove(0);
    }
    let flags: Vec<String> = if extended {
        flags.into_iter().map(str::to_owned).collect()
    } else if flags.contains(&"ignore-failure") {
        vec!["ignore-failure".to_owned()]
    } else {
        Vec::new()
    };
    ExecCommand {
        path,
        argv: parts,
        flags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: &str = "\
# atelier-provision: stamp
[Unit]
Description=x
BindsTo=a.target b.service
After=a.target
After=b.service

[Service]
Type=exec
User=atelier-a-example_1
ExecStart=/usr/local/bin/atelier-shim
Environment=A=1
Environment=B=two
MemoryMax=2G
CPUQuota=200%
RuntimeMaxSec=315
TimeoutStopSec=10
KillSignal=SIGTERM
FinalKillSignal=SIGKILL
UMask=0007
ReadWritePaths=/w
InaccessiblePaths=-/etc/x -/srv/y
InaccessiblePaths=/w/.git
TemporaryFileSystem=/run:ro
TemporaryFileSystem=/dev/shm:mode=1777,nosuid,nodev
BindPaths=/home/h
BindReadOnlyPaths=/run/a/s.sock:/run/e/s.sock
IPAddressDeny=any
IPAddressAllow=localhost
RestrictAddressFamilies=AF_UNIX AF_NETLINK
CapabilityBoundingSet=
RestrictNamespaces=yes
SystemCallErrorNumber=EPERM
PrivateNetwork=yes
";

    #[test]
    fn a_service_reads_as_pid_1_reports_it() {
        let loaded = loaded("x@probe.service", UnitKind::Service, UNIT);
        let get = |p: Property| loaded.get(&p).cloned();
        let service = Property::service;
        assert_eq!(get(Property::unit("LoadState")), Some(Value::str("loaded")));
        assert_eq!(
            get(Property::unit("BindsTo")),
            Some(Value::list(["a.target", "b.service"]))
        );
        assert_eq!(
            get(Property::unit("After")),
            Some(Value::list(["a.target", "b.service"]))
        );
        assert_eq!(
            get(service("User")),
            Some(Value::str("atelier-a-example_1"))
        );
        assert_eq!(
            get(service("ExecStartEx")),
            Some(Value::Commands(vec![ExecCommand::plain(&[
                "/usr/local/bin/atelier-shim"
            ])]))
        );
        assert_eq!(
            get(service("Environment")),
            Some(Value::list(["A=1", "B=two"]))
        );
        assert_eq!(get(service("MemoryMax")), Some(Value::UInt(2 << 30)));
        assert_eq!(
            get(service("CPUQuotaPerSecUSec")),
            Some(Value::UInt(2_000_000))
        );
        assert_eq!(
            get(service("RuntimeMaxUSec")),
            Some(Value::UInt(315_000_000))
        );
        assert_eq!(
            get(service("TimeoutStopUSec")),
            Some(Value::UInt(10_000_000))
        );
        assert_eq!(get(service("KillSignal")), Some(Value::Int(15)));
        assert_eq!(get(service("FinalKillSignal")), Some(Value::Int(9)));
        assert_eq!(get(service("UMask")), Some(Value::UInt(7)));
        assert_eq!(
            get(service("InaccessiblePaths")),
            Some(Value::list(["-/etc/x", "-/srv/y", "/w/.git"]))
        );
        assert_eq!(
            get(service("TemporaryFileSystem")),
            Some(Value::pairs([
                ("/run", "ro"),
                ("/dev/shm", "mode=1777,nosuid,nodev")
            ]))
        );
        assert_eq!(
            get(service("BindPaths")),
            Some(Value::list(["/home/h:/home/h"]))
        );
        assert_eq!(
            get(service("BindReadOnlyPaths")),
            Some(Value::list(["/run/a/s.sock:/run/e/s.sock"]))
        );
        assert_eq!(
            get(service("IPAddressDeny")),
            Some(Value::list(["0.0.0.0/0", "::/0"]))
        );
        assert_eq!(
            get(service("IPAddressAllow")),
            Some(Value::list(["127.0.0.0/8", "::1/128"]))
        );
        assert_eq!(
            get(service("RestrictAddressFamilies")),
            Some(Value::list(["AF_UNIX", "AF_NETLINK"]))
        );
        assert_eq!(get(service("CapabilityBoundingSet")), Some(Value::UInt(0)));
        assert_eq!(get(service("RestrictNamespaces")), Some(Value::UInt(0)));
        assert_eq!(get(service("SystemCallErrorNumber")), Some(Value::Int(1)));
        assert_eq!(get(service("PrivateNetwork")), Some(Value::Bool(true)));
        assert_eq!(get(service("DynamicUser")), Some(Value::Bool(false)));
        assert_eq!(get(service("ExecStartPre")), None);
    }

    #[test]
    fn an_empty_assignment_resets_a_list() {
        let text = "[Service]\nReadWritePaths=/a /b\nReadWritePaths=\nReadWritePaths=/c\nExecStart=/x\nExecStart=\nExecStart=/y\n";
        let loaded = loaded("x.service", UnitKind::Service, text);
        assert_eq!(
            loaded.get(&Property::service("ReadWritePaths")),
            Some(&Value::list(["/c"]))
        );
        assert_eq!(
            loaded.get(&Property::service("ExecStart")),
            Some(&Value::Commands(vec![ExecCommand::plain(&["/y"])]))
        );
    }

    #[test]
    fn a_socket_reads_listen_pairs() {
        let text = "[Unit]\nPartOf=s.service\n[Socket]\nListenStream=/run/a.sock\nAccept=yes\nMaxConnections=1\nSocketMode=0600\nDirectoryMode=0755\nTriggerLimitIntervalSec=2s\n";
        let loaded = loaded("a.socket", UnitKind::Socket, text);
        let socket = Property::socket;
        assert_eq!(
            loaded.get(&socket("Listen")),
            Some(&Value::pairs([("Stream", "/run/a.sock")]))
        );
        assert_eq!(loaded.get(&socket("Accept")), Some(&Value::Bool(true)));
        assert_eq!(loaded.get(&socket("SocketMode")), Some(&Value::UInt(0o600)));
        assert_eq!(
            loaded.get(&socket("DirectoryMode")),
            Some(&Value::UInt(0o755))
        );
        assert_eq!(
            loaded.get(&socket("TriggerLimitIntervalUSec")),
            Some(&Value::UInt(2_000_000))
        );
        // A service directive in a socket unit's file is not a Service property.
        assert_eq!(loaded.get(&Property::service("Accept")), None);
    }

    #[test]
    fn exec_prefixes() {
        for (case, line, path, argv, flags, plain_flags) in [
            (
                "plain",
                "/bin/a b",
                "/bin/a",
                vec!["/bin/a", "b"],
                vec![],
                vec![],
            ),
            (
                "ignore failure",
                "-/bin/a",
                "/bin/a",
                vec!["/bin/a"],
                vec!["ignore-failure"],
                vec!["ignore-failure"],
            ),
            (
                "privileged",
                "+/bin/a",
                "/bin/a",
                vec!["/bin/a"],
                vec!["privileged"],
                vec![],
            ),
            (
                "ambient",
                "!!/bin/a",
                "/bin/a",
                vec!["/bin/a"],
                vec!["ambient"],
                vec![],
            ),
            (
                "argv0",
                "@/bin/a other x",
                "/bin/a",
                vec!["other", "x"],
                vec![],
                vec![],
            ),
        ] {
            let ex = exec_command(line, true);
            assert_eq!(ex.path, path, "{case}");
            assert_eq!(ex.argv, argv, "{case}");
            assert_eq!(ex.flags, flags, "{case}");
            assert_eq!(exec_command(line, false).flags, plain_flags, "{case}");
        }
    }

    #[test]
    fn spans_sizes_signals() {
        for (text, usec) in [
            ("10", Some(10_000_000)),
            ("2s", Some(2_000_000)),
            ("100ms", Some(100_000)),
            ("5min 30s", Some(330_000_000)),
            ("1h", Some(3_600_000_000)),
            ("infinity", Some(u64::MAX)),
            ("", None),
            ("5 parsecs", None),
        ] {
            assert_eq!(parse_timespan(text), usec, "{text:?}");
        }
        for (text, bytes) in [
            ("2G", Some(2u64 << 30)),
            ("256M", Some(256u64 << 20)),
            ("512", Some(512)),
            ("infinity", Some(u64::MAX)),
            ("50%", None),
            ("99999999E", None),
        ] {
            assert_eq!(parse_size(text), bytes, "{text:?}");
        }
        assert_eq!(parse_cpu_quota("150%"), Some(1_500_000));
        assert_eq!(parse_cpu_quota("150"), None);
        assert_eq!(parse_signal("SIGKILL"), Some(9));
        assert_eq!(parse_signal("TERM"), Some(15));
        assert_eq!(parse_signal("SIGBOGUS"), None);
    }

    #[test]
    fn quoted_words_and_addresses() {
        assert_eq!(words(r#"A="x y" B=z"#), ["A=x y", "B=z"]);
        assert_eq!(
            ip_prefixes("10.0.0.1 ::1 192.168.0.0/16"),
            ["10.0.0.1/32", "::1/128", "192.168.0.0/16"]
        );
        assert_eq!(families("~AF_PACKET AF_X25"), ["~AF_PACKET", "~AF_X25"]);
        assert_eq!(
            bind_paths("-/a /b:/c:norbind /d:/e:rbind"),
            ["-/a:/a", "/b:/c:norbind", "/d:/e"]
        );
    }
}
