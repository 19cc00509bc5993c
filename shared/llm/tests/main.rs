//! The LLM drivers' integration tests as one binary, so the crate links a single test
//! executable: each former test file is a module here, and `scripted` is the loopback provider
//! several of them replay recorded transcripts through.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod scripted;

mod capabilities;
mod conformance;
mod models;
mod real_model;
mod request_mapping;
mod tool_loop;
