//! End-to-end tests: a real scored on a temporary socket, the real scrun
//! and sc_console, and /proc as the witness. One test binary, as ripgrep
//! and cargo do, sharing the harness in `scored_tests`.

mod backfill;
mod console;
mod docs;
mod faults;
mod gang;
mod hostile;
mod launch;
mod limits;
mod replay;
mod startup;
mod users;
