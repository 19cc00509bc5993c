//! The instance declaration and the one derivation of every name, path, owner, mode and unit.
//!
//! - [`declaration`]: `instance.json` parsed strictly into a [`Declaration`], every problem
//!   collected as a named [`Issue`].
//! - [`names`]: users, groups, site identities, doors and unit names.
//! - [`paths`]: the [`Layout`] of an instance (every path) and the mode matrix ([`paths::MODES`]).
//! - [`services`]: binary names, sited's env keys, workspaces and the doors' egress plans.
//! - [`files`]: the JSON files one binary writes and another reads (`sites.json`, gate plans).
//! - [`hosts`]: what a host on a gate plan may be, for the provisioner and the gate alike.
//! - [`workspace`]: names and modes inside a site's workspace and the sites root.
//! - [`stamp`]: the first line of every rendered file (instance, kind, sha256 of the body).
//! - [`pairing`]: the engine's pairing keys and the `/health` fingerprint.
//!
//! Nothing here touches the filesystem except [`Declaration::load`].

pub mod accounts;
pub mod declaration;
pub mod files;
pub mod hosts;
pub mod names;
pub mod pairing;
pub mod paths;
pub mod services;
pub mod stamp;
pub mod workspace;

pub use declaration::{Declaration, DeclarationError, Issue, LoadError, Reason};
pub use names::{Door, InstanceName, NameError, SiteOrdinal, UnknownDoor};
pub use paths::Layout;
