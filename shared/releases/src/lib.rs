//! Releases of a built site: promote into a store, flip the served link atomically, prune, roll back.
