//! systemd confinement: a run is one `connect()` to the site's door socket, and PID 1 starts
//! the shim as the site's identity, in its own network namespace, with only that site's gate
//! sockets bound in. Nothing here starts a process.

use std::collections::BTreeMap;

use atelier_layout::names::{Door as LayoutDoor, InstanceName, SiteOrdinal};
use atelier_proto::Door;
use tokio::net::UnixStream;

use super::{RunRefusal, RunTarget};

/// The door sockets of one instance's declared sites.
#[derive(Debug, Clone)]
pub struct SystemdDoors {
    instance: InstanceName,
    identities: BTreeMap<String, SiteOrdinal>,
}

impl SystemdDoors {
    /// The doors of `instance`, whose declared sites have the ordinals in `identities`.
    pub fn new(instance: InstanceName, identities: BTreeMap<String, SiteOrdinal>) -> SystemdDoors {
        SystemdDoors {
            instance,
            identities,
        }
    }

    /// Site `slug`'s ordinal, or the refusal naming the missing identity.
    pub fn ordinal(&self, slug: &str) -> Result<SiteOrdinal, RunRefusal> {
        self.identities
            .get(slug)
            .copied()
            .ok_or_else(|| RunRefusal::IdentityMissing(slug.to_owned()))
    }

    /// One `connect()` to the door's socket, never retried.
    pub(super) async fn open(
        &self,
        target: &RunTarget,
        door: Door,
    ) -> Result<UnixStream, RunRefusal> {
        let k = self.ordinal(&target.slug)?;
        let path = atelier_layout::paths::door_socket_path(&self.instance, k, layout_door(door));
        UnixStream::connect(&path)
            .await
            .map_err(|e| RunRefusal::UnitRefused {
                door,
                detail: format!("connecting to {}: {e}", path.display()),
            })
    }
}

/// The layout's name for a wire door (the same three doors).
pub fn layout_door(door: Door) -> LayoutDoor {
    match door {
        Door::Turn => LayoutDoor::Turn,
        Door::Build => LayoutDoor::Build,
        Door::Git => LayoutDoor::Git,
    }
}
