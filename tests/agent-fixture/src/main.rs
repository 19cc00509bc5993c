//! atelier-test-agent entry point.

fn main() {}
