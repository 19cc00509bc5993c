//! atelierctl: the operator's client for atelier-sited — pairs through `/health` the way the
//! engine does, then drives every route of the contract over sited's unix socket. The client
//! itself (pairing, routes, the event stream, where the target is) is `atelier-site-client`;
//! this crate is the command line around it.
//!
//! - [`cli`]: the command line, its flags and subcommands, and how each runs.
//! - [`render`]: what an operator reads: the readable output of each reply.

#![forbid(unsafe_code)]

pub mod cli;
pub mod render;
