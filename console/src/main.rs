//! sc_console: the operator's shell.
fn main() {}
