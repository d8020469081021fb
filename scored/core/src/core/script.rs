//! The start-up script (`scored.rc`): console commands run one line at a
//! time as [`Input::Console`], the way a console client's commands are, so
//! that what they change comes out as actions for the shell to carry out
//! rather than being dropped.
#![forbid(unsafe_code)]

use std::fmt;

use super::{Action, ClientEvent, Core, Input};
use crate::ids::{ClientToken, Cred, Tick};
use scored_proto::command::reply::Reply;
use scored_proto::command::{self, Command, ParseError};

/// The client the script's answers are addressed to. The script runs
/// before the daemon accepts any connection, and its answers are taken
/// from the actions here, so the token reaches no one.
const SCRIPT: ClientToken = ClientToken(0);

/// Why a line of a start-up script was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptProblem {
    /// The line is not a console command.
    Syntax(ParseError),
    /// The command (`shutdown`, `restart`) has no meaning at start-up.
    NotAtStartUp(&'static str),
    /// The core refused the command; the message is its reply.
    Refused(String),
}

impl fmt::Display for ScriptProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScriptProblem::Syntax(error) => write!(f, "{error}"),
            ScriptProblem::NotAtStartUp(word) => {
                write!(f, "{word} cannot be used in a start-up script")
            }
            ScriptProblem::Refused(message) => f.write_str(message),
        }
    }
}

/// A refused line of a start-up script: `NAME:LINE: message`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptError {
    /// The script's name as the user knows it (its path).
    pub name: String,
    /// The line number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub problem: ScriptProblem,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.name, self.line, self.problem)
    }
}

impl std::error::Error for ScriptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            ScriptProblem::Syntax(error) => Some(error),
            _ => None,
        }
    }
}

/// What running a start-up script gave.
#[derive(Debug, Default)]
pub struct ScriptRun {
    /// What the accepted lines asked of the shell, in order (the answers
    /// to the script are not among them).
    pub actions: Vec<Action>,
    /// `NAME:LINE: warning: ...` for lines accepted with a warning.
    pub warnings: Vec<String>,
    /// The refused lines; each changed nothing.
    pub errors: Vec<ScriptError>,
}

impl Core {
    /// Runs the start-up script `text` (called `name` in messages) line by
    /// line as `cred` at `now`. Every line is tried, so that all mistakes
    /// are reported at once.
    pub fn run_script(&mut self, cred: &Cred, name: &str, text: &str, now: Tick) -> ScriptRun {
        let mut run = ScriptRun::default();
        for (idx, line) in text.lines().enumerate() {
            let refuse = |problem| ScriptError {
                name: name.to_string(),
                line: idx + 1,
                problem,
            };
            let command = match command::parse_line(line) {
                Ok(None) => continue,
                Ok(Some(Command::Shutdown { .. })) => {
                    run.errors
                        .push(refuse(ScriptProblem::NotAtStartUp("shutdown")));
                    continue;
                }
                Ok(Some(Command::Restart)) => {
                    run.errors
                        .push(refuse(ScriptProblem::NotAtStartUp("restart")));
                    continue;
                }
                Ok(Some(command)) => command,
                Err(error) => {
                    run.errors.push(refuse(ScriptProblem::Syntax(error)));
                    continue;
                }
            };
            let input = Input::Console {
                client: SCRIPT,
                cred: cred.clone(),
                command: Box::new(command),
            };
            for action in self.handle(input, now) {
                let notice = match action {
                    Action::Notify(notice) if notice.client == SCRIPT => *notice,
                    action => {
                        run.actions.push(action);
                        continue;
                    }
                };
                match notice.event {
                    ClientEvent::Answer(Reply::Error(message)) => {
                        run.errors.push(refuse(ScriptProblem::Refused(message)))
                    }
                    ClientEvent::Answer(reply) => {
                        // Accepted, but perhaps not meant: the operator
                        // reads them in the log at start.
                        run.warnings.extend(
                            reply
                                .to_text()
                                .lines()
                                .filter(|text| text.starts_with("warning:"))
                                .map(|warning| format!("{name}:{}: {warning}", idx + 1)),
                        );
                    }
                    event => run.actions.push(Action::notify(SCRIPT, event)),
                }
            }
        }
        run
    }
}
