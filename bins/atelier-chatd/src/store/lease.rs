//! The single-writer lease: at most one turn writes to a conversation at a time, so a second
//! concurrent send is refused before it appends anything.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// The conversations that have a turn in flight in this process.
#[derive(Debug, Clone, Default)]
pub struct Leases {
    held: Arc<Mutex<HashSet<String>>>,
}

/// A held lease; dropping it releases the conversation, whatever path the turn ended on.
#[derive(Debug)]
pub struct Lease {
    leases: Leases,
    conversation_id: String,
}

impl Leases {
    /// Takes the lease on `conversation_id`, or `None` while another turn holds it.
    pub fn try_acquire(&self, conversation_id: &str) -> Option<Lease> {
        self.lock()
            .insert(conversation_id.to_owned())
            .then(|| Lease {
                leases: self.clone(),
                conversation_id: conversation_id.to_owned(),
            })
    }

    /// How many turns are in flight.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Returns true if and only if a turn holds `conversation_id`.
    pub fn is_held(&self, conversation_id: &str) -> bool {
        self.lock().contains(conversation_id)
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        // The set is consistent after any panic (inserts and removes are single calls).
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Lease {
    /// The conversation this lease holds.
    pub fn conversation_id(&self) -> &str {
        &self.conversation_id
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.leases.lock().remove(&self.conversation_id);
    }
}
