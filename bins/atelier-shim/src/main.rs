//! atelier-shim entry point.

fn main() {}
