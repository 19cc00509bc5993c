//! The real `atelier-shim` binary over a real socketpair, speaking real frames: the relay,
//! exit records, the environment, inherited descriptors, hang-ups, refusals, and (under
//! `unshare --net`, as root) the namespace proof and the gate forwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod namespace;
mod refusals;
mod relay;
mod support;
