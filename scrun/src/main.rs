//! scrun: launch a parallel job under scored.

// The command line parser is complete before the launcher that uses it.
#[allow(dead_code)]
mod cli;

fn main() {}
