//! atelier-build entry point.

fn main() {}
