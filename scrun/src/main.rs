//! scrun: launch a parallel job under scored.
fn main() {}
