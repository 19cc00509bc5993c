//! The proof that the unit's private network namespace is in effect: the shim's namespace is
//! not the daemon's, and every interface it can see other than its own loopback is down.
//!
//! Interfaces are counted from `/proc/self/net/dev`, which the kernel answers for the reader's
//! own namespace; `/sys/class/net` keeps showing the host's interfaces inside a private one.
//! Each one's flags come from `ioctl(SIOCGIFFLAGS)` on a socket the shim opens, which the
//! kernel answers for the namespace the socket was made in: the shim's own.
//!
//! Why an interface that is down is not a way out: where the ipip, ip_gre, sit, ip6_tunnel,
//! ip6_gre, ip_vti or ip6_vti modules are loaded (Calico in IPIP mode, for one), Linux puts its
//! fallback tunnel devices (`tunl0`, `gre0`, `gretap0`, `erspan0`, `sit0`, `ip6tnl0`,
//! `ip6gre0`, `ip_vti0`, `ip6_vti0`) into every new network namespace, down and without an
//! address, so requiring loopback alone would refuse every run on such a host. An interface
//! that is down carries no packet, and the unit holds no capability (its bounding set is empty)
//! to bring one up. One that is up is refused, as is anything that cannot be read.

use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::Path;

use rustix::net::{AddressFamily, SocketFlags, SocketType};

use crate::procfs::{self, NetDevError};

/// Where the kernel names the shim's network namespace.
const OWN_NETNS: &str = "/proc/self/ns/net";
/// The interface table of the shim's own network namespace.
const OWN_NET_DEV: &str = "/proc/self/net/dev";
/// The one interface a private network namespace has that may be up.
const LOOPBACK: &str = "lo";

/// An interface of the shim's namespace, as the proof judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name, as `/proc/self/net/dev` lists it.
    pub name: String,
    /// Whether its `IFF_UP` flag is set. Not read for `lo`, whose state the rule ignores;
    /// [`prove`] records it as false there.
    pub up: bool,
}

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
    /// The interface table could not be read or parsed, or an interface's flags could not be
    /// read; the text says which.
    #[error("this unit cannot read its interfaces: {0}")]
    InterfacesUnreadable(String),
    /// The table lists no interface at all, not even loopback.
    #[error("this unit can see no interface at all, not even lo")]
    NoInterface,
    /// Interfaces besides loopback are up; only those are named.
    #[error("this unit can see a host interface that is up ({})", .0.join(", "))]
    HostInterface(Vec<String>),
}

/// Proves the namespace against the daemon's identity `host_netns`, reading the shim's own
/// from `/proc/self`.
pub fn prove(host_netns: &str) -> Result<(), NotInEffect> {
    let own = read_own_identity(Path::new(OWN_NETNS));
    check(host_netns, own, read_own_interfaces())
}

fn read_own_identity(link: &Path) -> Result<String, String> {
    let target = std::fs::read_link(link).map_err(|e| e.to_string())?;
    target
        .into_os_string()
        .into_string()
        .map_err(|raw| format!("{raw:?} is not text"))
}

/// The interfaces of the shim's own namespace: the names from `/proc/self/net/dev`, and for
/// each besides `lo` whether it is up.
fn read_own_interfaces() -> Result<Vec<Interface>, String> {
    let table = std::fs::read_to_string(OWN_NET_DEV).map_err(|e| format!("{OWN_NET_DEV}: {e}"))?;
    let names = procfs::interfaces_from_net_dev(&table)
        .map_err(|e: NetDevError| format!("{OWN_NET_DEV}: {e}"))?;
    // Opened only when there is an interface to ask about.
    let mut socket: Option<OwnedFd> = None;
    let mut interfaces = Vec::with_capacity(names.len());
    for name in names {
        let up = if name == LOOPBACK {
            false
        } else {
            let socket = match &mut socket {
                Some(socket) => socket,
                empty => empty.insert(flags_socket()?),
            };
            is_up(socket, &name)?
        };
        interfaces.push(Interface { name, up });
    }
    Ok(interfaces)
}

/// A socket of the shim's own namespace to ask for interface flags on.
fn flags_socket() -> Result<OwnedFd, String> {
    rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("cannot open a socket to read interface flags on: {e}"))
}

/// `name` as `struct ifreq` holds it: NUL-terminated in `IFNAMSIZ` bytes; `None` when it does
/// not fit or holds a NUL, which no interface name can.
fn ifreq_name(name: &str) -> Option<[libc::c_char; libc::IFNAMSIZ]> {
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return None;
    }
    let mut field = [0; libc::IFNAMSIZ];
    for (slot, byte) in field.iter_mut().zip(bytes) {
        *slot = *byte as libc::c_char;
    }
    Some(field)
}

/// Whether the interface `name` of `socket`'s namespace has `IFF_UP` set.
fn is_up(socket: &OwnedFd, name: &str) -> Result<bool, String> {
    let ifr_name = ifreq_name(name).ok_or_else(|| {
        format!(
            "the interface name {name:?} does not fit in IFNAMSIZ ({} bytes)",
            libc::IFNAMSIZ
        )
    })?;
    let mut request = libc::ifreq {
        ifr_name,
        ifr_ifru: libc::__c_anonymous_ifr_ifru { ifru_flags: 0 },
    };
    #[allow(unsafe_code)]
    // SAFETY: SIOCGIFFLAGS reads the NUL-terminated name from `request` and writes the flags
    // into it; `request` is a whole `struct ifreq` that lives across the call, and `socket` is
    // an open descriptor borrowed for the call. No safe API for this request exists in rustix.
    let result = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) };
    if result == -1 {
        let error = std::io::Error::last_os_error();
        return Err(format!("the flags of {name} (SIOCGIFFLAGS): {error}"));
    }
    #[allow(unsafe_code)]
    // SAFETY: the union was made with `ifru_flags`, and a successful SIOCGIFFLAGS writes that
    // field; every bit pattern is a valid c_short.
    let flags = unsafe { request.ifr_ifru.ifru_flags };
    Ok(libc::c_int::from(flags) & libc::IFF_UP != 0)
}

/// The proof's decision over what was read: both conditions must hold, and anything that
/// could not be read is a refusal, never a skipped check.
///
/// Only the interfaces besides `lo` are judged, and only by whether they are up. A table
/// without `lo` is judged the same way: the rule is about what can carry a packet out, and
/// nothing that is down can. (The kernel gives every namespace a loopback, so such a table is
/// not expected. Were it seen, a door's forwards on 127.0.0.1 could not listen and its run
/// would stop there with its own refusal; a door without forwards would run with no usable
/// network at all, which is what the proof is for.)
pub fn check(
    host_netns: &str,
    own: Result<String, String>,
    interfaces: Result<Vec<Interface>, String>,
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
    let up: Vec<String> = interfaces
        .into_iter()
        .filter(|interface| interface.name != LOOPBACK && interface.up)
        .map(|interface| interface.name)
        .collect();
    if !up.is_empty() {
        return Err(NotInEffect::HostInterface(up));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
