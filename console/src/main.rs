//! sc_console: the operator's shell for scored.
//!
//! Three modes share one way of running a line ([`session`]): `-c LINE`
//! runs one line, a script on standard input runs line by line and stops at
//! the first failure ([`batch`]), and a terminal gets the interactive shell
//! ([`shell`]). This file only reads the flags, picks the mode and turns
//! its status into the process's exit status.
#![forbid(unsafe_code)]

mod batch;
mod complete;
mod session;
mod shell;

use std::io::{self, BufRead, IsTerminal};
use std::path::PathBuf;

use clap::Parser;
use scored_proto::client;
use scored_proto::exitcode;

use crate::session::{io_text, Daemon};

/// Run console commands on scored: interactively on a terminal, one line
/// with -c, or a script read from standard input.
#[derive(Debug, Parser)]
#[command(
    name = "sc_console",
    version,
    after_help = "Type 'help' at the prompt, or run 'sc_console -c help', for the commands.\n\n\
                  Exit status: 0 success, 1 a command failed, 69 scored cannot be reached, \
                  70 the connection to scored was lost."
)]
struct Args {
    /// The daemon's socket (default: $SCORED_SOCKET, else the daemon's default socket).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Run one console line and exit.
    #[arg(short = 'c', long = "command", value_name = "LINE")]
    command: Option<String>,
    /// Print answers as JSON.
    #[arg(long)]
    json: bool,
}

fn main() {
    let args = Args::parse();
    let settings = match scored_proto::settings::read() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("sc_console: cannot tell where scored is: {error}");
            std::process::exit(exitcode::UNREACHABLE);
        }
    };
    let (path, source) = client::socket_path(args.socket, &settings);
    let mut daemon = Daemon::new(path, source);
    let mut send = |line: &str, json: bool| daemon.send(line, json);
    let status = if let Some(line) = &args.command {
        batch::run_line(
            line,
            args.json,
            &mut send,
            &mut io::stdout().lock(),
            &mut io::stderr().lock(),
        )
    } else if !io::stdin().is_terminal() {
        let lines = io::stdin().lock().lines();
        batch::run_script(
            lines,
            args.json,
            &mut send,
            &mut io::stdout().lock(),
            &mut io::stderr().lock(),
        )
    } else {
        Ok(shell::run(daemon, args.json))
    };
    let status = match status {
        Ok(status) => status,
        // A closed pipe means the reader has seen enough (`sc_console -c jobs
        // | head -1`); like ripgrep, end quietly.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => exitcode::OK,
        Err(error) => {
            eprintln!("sc_console: cannot write the answer: {}", io_text(&error));
            exitcode::FAILURE
        }
    };
    std::process::exit(status);
}
