//! scrun: launch a parallel job under scored and stay its front-end until it ends.
//!
//! `main` only parses the command line and turns the outcome into an exit
//! status; [`launch::run`] does the rest. See scrun(1) for the statuses:
//! the job's own, or 64 (usage), 69 (no daemon), 70 (internal), 75
//! (rejected), 76 (killed by a limit), 128+N (scrun left on signal N), or
//! death by the signal that scrun passed on and that ended the job.
//! `unsafe` is allowed only in [`sys`], which wraps the few system calls
//! nix and rustix lack; every other module forbids it.
//!
//! The process starts in [`sys`]'s entry point, not in the Rust runtime's
//! (`no_main`): it makes the runtime's changes that scrun relies on and
//! calls `main`, leaving out the rest of the runtime's start, which every
//! launch would pay for.
#![deny(unsafe_code)]
#![cfg_attr(not(test), no_main)]

mod batch;
mod caller;
mod error;
mod launch;
mod pmi_server;
mod pmix_server;
mod pmix_sys;
mod report;
mod session;
mod signals;
mod single;
mod spawner;
mod submit;
mod sys;
mod terminal;

use std::io::Write;

use scored_proto::exitcode;
use scrun::cli;

fn main() {
    let outcome = match cli::parse(
        std::env::args_os().skip(1),
        std::env::var_os("SCORE_OPTIONS").as_deref(),
    ) {
        Ok(cli::Parsed::Help) => print_stdout(cli::USAGE).into(),
        Ok(cli::Parsed::Version) => {
            print_stdout(&format!("scrun {}\n", env!("CARGO_PKG_VERSION"))).into()
        }
        Ok(cli::Parsed::Run(invocation)) => launch::run(&invocation),
        Err(error) => {
            session::say(&error.to_string());
            session::say("try 'scrun -help' for usage");
            exitcode::USAGE.into()
        }
    };
    if let Some(signal) = outcome.reraise {
        // As bash and sudo do for a child killed by the signal they
        // received: the parent of scrun must see the same death, or a
        // shell loop around scrun would carry on after a Ctrl-C.
        sys::end_by(signal);
    }
    std::process::exit(outcome.code);
}

/// Prints help or version text. A closed or broken stdout is not an error
/// worth reporting, as with ripgrep's quiet broken pipe.
fn print_stdout(text: &str) -> i32 {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
    exitcode::OK
}
