//! The scored daemon's entry point.
fn main() {}
