//! Test parts shared by the integration tests: the lab network, TLS, the MCP stand-ins and the
//! model provider stand-in.

pub mod lab;
pub mod mcp;
pub mod model;
pub mod tls;
