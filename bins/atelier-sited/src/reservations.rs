//! Per-site reservations: at most one holder per site at a time, and the holder names the
//! busy reason every other request on the site is refused with.
//!
//! Beside them, each site's serving lock ([`Reservations::serving`]): publish and rollback run
//! while a turn or a build holds the site, as the contract allows, but what they change (the
//! release stores, the served links, `published`) must not be torn by a delete removing the
//! same, nor by a build's promote pruning what a publish copies. Those four take it in turn;
//! a holder waits for the one before it rather than being refused, as none has a busy reason
//! of its own and each is short.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use atelier_site_api::Reason;

/// What holds a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// A create, until its workspace and first commit exist.
    Init,
    /// A delete, until everything is gone.
    Deleting,
    /// An agent turn.
    Session,
    /// A build.
    Build,
    /// The boot sweep's recovery commit.
    Recovery,
    /// A standalone git operation.
    Git,
}

impl Hold {
    /// Every hold.
    pub const ALL: [Hold; 6] = [
        Hold::Init,
        Hold::Deleting,
        Hold::Session,
        Hold::Build,
        Hold::Recovery,
        Hold::Git,
    ];

    /// The machine reason of the 409 a request meets while this holds the site.
    pub fn busy_reason(self) -> Reason {
        match self {
            Hold::Init => Reason::SiteInitializing,
            Hold::Deleting => Reason::SiteDeleting,
            Hold::Session => Reason::SessionRunning,
            Hold::Build => Reason::BuildRunning,
            Hold::Recovery => Reason::SiteRecovering,
            Hold::Git => Reason::GitRunning,
        }
    }

    /// The `reason` of the 409 a request meets while this holds the site, as on the wire.
    pub fn reason(self) -> &'static str {
        self.busy_reason().as_str()
    }
}

/// The site is held by someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the site is busy: {}", .0.reason())]
pub struct Busy(pub Hold);

/// The daemon's reservations, shared by every request.
#[derive(Debug, Clone, Default)]
pub struct Reservations {
    held: Arc<Mutex<HashMap<String, Hold>>>,
    serving: Arc<Mutex<HashMap<String, Arc<Mutex<()>>>>>,
}

/// A held reservation; dropping it frees the site.
#[derive(Debug)]
pub struct Reservation {
    held: Arc<Mutex<HashMap<String, Hold>>>,
    slug: String,
    hold: Hold,
}

impl Reservations {
    /// No site held.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds `slug` for `hold`, or says who holds it.
    pub fn reserve(&self, slug: &str, hold: Hold) -> Result<Reservation, Busy> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = held.get(slug) {
            return Err(Busy(*existing));
        }
        held.insert(slug.to_owned(), hold);
        Ok(Reservation {
            held: Arc::clone(&self.held),
            slug: slug.to_owned(),
            hold,
        })
    }

    /// How many sites are held for `hold` now.
    pub fn count(&self, hold: Hold) -> usize {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.values().filter(|h| **h == hold).count()
    }

    /// Who holds `slug`, if anyone.
    pub fn holder(&self, slug: &str) -> Option<Hold> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(slug).copied()
    }

    /// `slug`'s serving lock (see the module's note), to hold while changing what the site
    /// serves. Blocking: taken off the async workers only.
    pub fn serving(&self, slug: &str) -> Arc<Mutex<()>> {
        let mut locks = self.serving.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(locks.entry(slug.to_owned()).or_default())
    }
}

/// Holds `lock` (a [`Reservations::serving`] lock) until the guard goes; a holder that
/// panicked left nothing half done that the next must not see, as each step is atomic.
pub fn hold(lock: &Mutex<()>) -> std::sync::MutexGuard<'_, ()> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Reservation {
    /// What this reservation holds the site for.
    pub fn hold(&self) -> Hold {
        self.hold
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.remove(&self.slug);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_s_serving_lock_is_one_lock_and_another_site_s_is_another() {
        let r = Reservations::new();
        let lock = r.serving("museum");
        let held = hold(&lock);
        let same = r.serving("museum");
        assert!(same.try_lock().is_err(), "the same site's lock is held");
        let other = r.serving("archive");
        assert!(other.try_lock().is_ok(), "another site's is free");
        drop(held);
        assert!(same.try_lock().is_ok());
    }

    #[test]
    fn one_holder_per_site_and_drop_frees_it() {
        let r = Reservations::new();
        for hold in Hold::ALL {
            let held = r.reserve("museum", hold).unwrap();
            assert_eq!(r.holder("museum"), Some(hold));
            assert_eq!(r.reserve("museum", Hold::Deleting).unwrap_err(), Busy(hold));
            assert!(r.reserve("other", Hold::Build).is_ok());
            drop(held);
            assert_eq!(r.holder("museum"), None);
        }
        let reasons: std::collections::BTreeSet<_> = Hold::ALL.iter().map(|h| h.reason()).collect();
        assert_eq!(reasons.len(), Hold::ALL.len());
    }
}
