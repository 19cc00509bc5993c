//! Releases of a built site: promote into a store, flip the served link atomically, prune,
//! roll back.
//!
//! Every touch of a webspace's release stores goes through this crate, and through
//! `atelier-fs` descriptors: walks never follow a link, the source of a promote is read without
//! trusting it, and the served link changes only by one `rename(2)` of a new link with a
//! relative target.
//!
//! Parts:
//! - [`id`]: [`ReleaseId`], the lexically sortable `<UTC ms>Z-<counter>` ids (also build ids).
//! - [`store`]: [`Store`] (promote, current, list, activate, prune, leftovers) and
//!   [`publish`].
//! - [`copy`]: [`Strategy`] (copy, reflink, link unchanged files), [`CopyStats`], the release
//!   modes, and why hard links between our own releases are safe.
//! - [`error`]: [`ReleaseError`], each refusal named with a stable [`ReleaseError::reason`].
//!
//! sited's use, per build: `Store::open(preprod.store_dir, preprod.link_path)` from the site
//! table → `promote(&Root::open(workspace)?.open_dir(output)?, Strategy::default())` →
//! `prune(RELEASES_RETAINED)`; per publish: `publish(&preprod, &prod, Strategy::default())`;
//! rollback: `prod.activate(id)`; releases: `prod.list()`, `prod.current()`.

pub mod copy;
pub mod error;
pub mod id;
pub mod store;

pub use copy::{CopyStats, Strategy, RELEASE_DIR_MODE, RELEASE_FILE_MODE};
pub use error::ReleaseError;
pub use id::ReleaseId;
pub use store::{
    publish, Promoted, Pruned, Published, Store, LINK_TEMP_INFIX, PRUNING_PREFIX, STAGING_PREFIX,
};
