//! The instance declaration and the one derivation of every name, path, owner, mode and unit.
//!
//! - [`declaration`]: `instance.json` parsed strictly into a [`Declaration`], every problem
//!   collected as a named [`Issue`].
//! - [`names`]: users, groups, site identities, doors and unit names.
//! - [`paths`]: the [`Layout`] of an instance (every path) and the mode matrix ([`paths::MODES`]).
//!
//! Nothing here touches the filesystem except [`Declaration::load`].

pub mod declaration;
pub mod names;
pub mod paths;

pub use declaration::{Declaration, DeclarationError, Issue, LoadError, Reason};
pub use names::{Door, InstanceName, NameError, SiteOrdinal};
pub use paths::Layout;
