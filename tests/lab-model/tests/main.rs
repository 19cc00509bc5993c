//! The lab model's integration tests as one binary, so the crate links a single test
//! executable: each former test file is a module here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lab_model;
mod os_trust_store;
