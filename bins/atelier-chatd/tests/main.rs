//! chatd's integration tests as one binary, so the crate links a single test executable: each
//! former test file is a module here, and `support` is what they share (the CMS stand-in among
//! it is one per process, serving every module's chatd).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod binary;
mod catalogue;
mod chatd;
mod css;
mod gates;
mod images;
mod journey;
mod kill;
mod reads;
mod real_model;
mod site_turn;
mod turn;
