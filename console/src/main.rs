//! sc_console: the operator's shell.
#![forbid(unsafe_code)]

// The completion logic is complete before the shell that uses it.
#[allow(dead_code)]
mod complete;

fn main() {}
