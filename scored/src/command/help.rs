//! Help texts of console commands.
#![forbid(unsafe_code)]
