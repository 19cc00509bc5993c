//! The gate's integration tests as one binary, so the crate links a single test executable:
//! each former test file is a module here, and `support` is what they share (the lab network,
//! TLS, and the MCP and model provider stand-ins).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod binary;
mod lab;
mod model;
