//! atelierctl entry point.

fn main() {}
