//! Test parts shared by the lab tests: the lab network, TLS, and the MCP stand-ins.

pub mod lab;
pub mod mcp;
pub mod tls;
