//! The proof that the unit's private network namespace is in effect: the shim's namespace is
//! not the daemon's, and the only interface it can see is its own loopback.
//!
//! Interfaces are counted from `/proc/self/net/dev`, which the kernel answers for the reader's
//! own namespace; `/sys/class/net` keeps showing the host's interfaces inside a private one.

use std::path::Path;

use crate::procfs::{self, NetDevError};

/// Where the kernel names the shim's network namespace.
const OWN_NETNS: &str = "/proc/self/ns/net";
/// The interface table of the shim's own network namespace.
const OWN_NET_DEV: &str = "/proc/self/net/dev";
/// The one interface a private network namespace has.
const LOOPBACK: &str = "lo";

/// Why the namespace proof failed; each reads after "network namespace not in effect: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInEffect {
    /// The spec's `hostNetns` is not a namespace identity, so nothing can be compared.
    #[error("the daemon's namespace identity {0:?} is not of the form net:[<inode>]; refusing rather than skipping the check")]
    BadHostIdentity(String),
    /// The shim's own identity could not be read.
    #[error("this unit cannot read its own network namespace identity: {0}")]
    OwnIdentityUnreadable(String),
    /// The shim's namespace is the daemon's.
    #[error("this unit shares the daemon's network namespace ({0})")]
    SharesDaemonNamespace(String),
    /// The interface table could not be read or parsed.
    #[error("this unit cannot read its interfaces from {OWN_NET_DEV}: {0}")]
    InterfacesUnreadable(String),
    /// The table lists no interface at all, not even loopback.
    #[error("this unit can see no interface at all, not even lo")]
    NoInterface,
    /// The table lists an interface besides loopback.
    #[error("this unit can see a host interface ({})", .0.join(", "))]
    HostInterface(Vec<String>),
}

/// Proves the namespace against the daemon's identity `host_netns`, reading the shim's own
/// from `/proc/self`.
pub fn prove(host_netns: &str) -> Result<(), NotInEffect> {
    let own = read_own_identity(Path::new(OWN_NETNS));
    let interfaces = std::fs::read_to_string(OWN_NET_DEV)
        .map_err(|e| e.to_string())
        .and_then(|table| {
            procfs::interfaces_from_net_dev(&table).map_err(|e: NetDevError| e.to_string())
        });
    check(host_netns, own, interfaces)
}

fn read_own_identity(link: &Path) -> Result<String, String> {
    let target = std::fs::read_link(link).map_err(|e| e.to_string())?;
    target
        .into_os_string()
        .into_string()
        .map_err(|raw| format!("{raw:?} is not text"))
}

/// The proof's decision over what was read: both conditions must hold, and anything that
/// could not be read is a refusal, never a skipped check.
pub fn check(
    host_netns: &str,
    own: Result<String, String>,
    interfaces: Result<Vec<String>, String>,
) -> Result<(), NotInEffect> {
    if !procfs::is_netns_identity(host_netns) {
        return Err(NotInEffect::BadHostIdentity(host_netns.to_owned()));
    }
    let own = own.map_err(NotInEffect::OwnIdentityUnreadable)?;
    if !procfs::is_netns_identity(&own) {
        return Err(NotInEffect::OwnIdentityUnreadable(format!(
            "{own:?} is not of the form net:[<inode>]"
        )));
    }
    if own == host_netns {
        return Err(NotInEffect::SharesDaemonNamespace(own));
    }
    let interfaces = interfaces.map_err(NotInEffect::InterfacesUnreadable)?;
    if interfaces.is_empty() {
        return Err(NotInEffect::NoInterface);
    }
    let others: Vec<String> = interfaces
        .into_iter()
        .filter(|name| name != LOOPBACK)
        .collect();
    if !others.is_empty() {
        return Err(NotInEffect::HostInterface(others));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
