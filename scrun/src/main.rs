//! scrun: launch a parallel job under scored.
#![forbid(unsafe_code)]

// The launcher that uses these modules comes in a later commit.
#[allow(dead_code)]
mod cli;
#[allow(dead_code)]
mod error;
#[allow(dead_code)]
mod report;
#[allow(dead_code)]
mod signals;
#[allow(dead_code)]
mod session;
#[allow(dead_code)]
mod single;

fn main() {}
