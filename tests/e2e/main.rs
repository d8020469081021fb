//! End-to-end tests: a real scored on a temporary socket, the real scrun
//! and sc_console, and /proc as the witness. One test binary, as ripgrep
//! and cargo do, sharing the harness in `scored_tests`.

mod backfill;
mod batch;
mod blocking;
mod console;
mod crash;
mod descendants;
mod docs;
mod faults;
mod gang;
mod handed_over;
mod hostile;
mod isolation;
mod launch;
mod limits;
mod mpi;
mod mpi_spawn;
mod private_daemon;
mod recovery;
mod replay;
mod replies;
mod restart;
mod security;
mod sessions;
mod setup;
mod shell_child;
mod shell_parity;
mod spawn;
mod startup;
mod terminals;
mod units;
mod users;
