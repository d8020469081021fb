//! The interactive shell: line editing, history kept across sessions, and
//! completion of commands, keywords, queue numbers, clusters and job ids.
//!
//! This is the imperative part of sc_console: it owns the terminal (through
//! rustyline), the history file and the connection. What to complete and
//! hint is decided by [`crate::complete`], what a line does by
//! [`crate::session`]; the choices of paths and prompt are pure functions
//! here so they can be tested without a terminal.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::Validator;
use rustyline::{CompletionType, Config, Context, Editor, Helper};
use scored_proto::exitcode;

use crate::complete::{self, Live};
use crate::session::{chain, execute, io_text, Daemon};

/// The environment variable that names the history file; empty turns
/// persistent history off.
pub const HISTORY_ENV: &str = "SC_CONSOLE_HISTORY";

/// How many lines the history keeps.
const HISTORY_SIZE: usize = 1000;

/// The history file: `$SC_CONSOLE_HISTORY` if set (empty: none), else
/// `$XDG_STATE_HOME/sc_console/history`, else
/// `$HOME/.local/state/sc_console/history`. Relative XDG and home
/// directories are ignored, as the XDG base directory specification says.
pub fn history_path(
    explicit: Option<OsString>,
    xdg_state_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return (!path.is_empty()).then(|| PathBuf::from(path));
    }
    let absolute =
        |value: Option<OsString>| value.map(PathBuf::from).filter(|path| path.is_absolute());
    if let Some(state) = absolute(xdg_state_home) {
        return Some(state.join("sc_console/history"));
    }
    absolute(home).map(|home| home.join(".local/state/sc_console/history"))
}

/// The prompt names the daemon: `scored[~/run/scored.sock]> `, with a path
/// under the home directory shortened to `~`.
pub fn prompt(socket: &Path, home: Option<&Path>) -> String {
    let shown = match home
        .filter(|home| home.is_absolute() && home.parent().is_some())
        .and_then(|home| socket.strip_prefix(home).ok())
    {
        Some(rest) if rest.as_os_str().is_empty() => "~".to_string(),
        Some(rest) => format!("~/{}", rest.display()),
        None => socket.display().to_string(),
    };
    format!("scored[{shown}]> ")
}

/// What a line typed at the prompt is to the shell itself.
#[derive(Debug, PartialEq, Eq)]
enum Builtin {
    /// `quit` or `exit`.
    Leave,
    /// `quit` or `exit` with arguments.
    Misused(String),
    /// Not a builtin: a console line.
    None,
}

fn builtin(line: &str) -> Builtin {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [word] if complete::BUILTINS.contains(word) => Builtin::Leave,
        [word, ..] if complete::BUILTINS.contains(word) => {
            Builtin::Misused(format!("error: {word} takes no arguments\n"))
        }
        _ => Builtin::None,
    }
}

/// Live values for completion, asked of the daemon on the shell's connection.
struct DaemonLive<'a>(&'a RefCell<Daemon>);

impl DaemonLive<'_> {
    fn column(&self, command: &str, keys: &[&str]) -> Vec<String> {
        let Some(listing) = self.0.borrow_mut().listing(command) else {
            return Vec::new();
        };
        keys.iter()
            .flat_map(|key| complete::column(&listing, key))
            .collect()
    }
}

impl Live for DaemonLive<'_> {
    fn queues(&self) -> Vec<String> {
        self.column("queues", &["queue"])
    }
    fn clusters(&self) -> Vec<String> {
        self.column("clusters", &["cluster", "name"])
    }
    fn jobs(&self) -> Vec<String> {
        self.column("jobs", &["id"])
    }
    fn users(&self) -> Vec<String> {
        let mut users = self.column("jobs", &["user"]);
        users.sort();
        users.dedup();
        users
    }
    fn names(&self) -> Vec<String> {
        let mut names = self.column("jobs", &["name"]);
        names.sort();
        names.dedup();
        names
    }
}

/// The rustyline helper: completion and hints, a dimmed hint, no other
/// highlighting and no validation.
struct ConsoleHelper {
    daemon: Rc<RefCell<Daemon>>,
}

impl Completer for ConsoleHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let completion = complete::complete(line, pos, &DaemonLive(&self.daemon));
        let candidates = completion
            .candidates
            .into_iter()
            .map(|word| Pair {
                replacement: complete::replacement(&word),
                display: word,
            })
            .collect();
        Ok((completion.start, candidates))
    }
}

impl rustyline::hint::Hint for complete::Hint {
    fn display(&self) -> &str {
        &self.display
    }

    fn completion(&self) -> Option<&str> {
        self.completion.as_deref()
    }
}

impl Hinter for ConsoleHelper {
    type Hint = complete::Hint;

    fn hint(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> Option<complete::Hint> {
        complete::hint(line, pos)
    }
}

impl Highlighter for ConsoleHelper {
    fn highlight_hint<'h>(&self, hint: &'h str) -> Cow<'h, str> {
        // Dim, so the hint does not read as typed text.
        Cow::Owned(format!("\x1b[2m{hint}\x1b[0m"))
    }
}

impl Validator for ConsoleHelper {}

impl Helper for ConsoleHelper {}

/// Runs the shell until `quit`, `exit` or end of input (status 0), or
/// until the connection is lost (status 70).
pub fn run(mut daemon: Daemon, json: bool) -> i32 {
    // Connect before the first prompt, so an operator learns at once that
    // the daemon is not there rather than at the first command.
    if let Err(error) = daemon.connect() {
        eprintln!("sc_console: {}", chain(&error));
        return error.exit_code();
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let prompt = prompt(daemon.path(), home.as_deref());
    let daemon = Rc::new(RefCell::new(daemon));

    let config = Config::builder()
        .completion_type(CompletionType::List)
        .max_history_size(HISTORY_SIZE)
        .expect("a positive history size is valid")
        .history_ignore_dups(true)
        .expect("ignoring duplicates is valid")
        .auto_add_history(false)
        .build();
    let mut editor: Editor<ConsoleHelper, FileHistory> = match Editor::with_config(config) {
        Ok(editor) => editor,
        Err(error) => {
            eprintln!(
                "sc_console: cannot use the terminal: {}",
                readline_text(&error)
            );
            return exitcode::FAILURE;
        }
    };
    editor.set_helper(Some(ConsoleHelper {
        daemon: Rc::clone(&daemon),
    }));
    let history = open_history(&mut editor);

    let status = loop {
        let text = match editor.readline(&prompt) {
            Ok(text) => text,
            // Ctrl-C abandons the line being typed, as in a shell.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break exitcode::OK,
            Err(error) => {
                eprintln!(
                    "sc_console: cannot read the terminal: {}",
                    readline_text(&error)
                );
                break exitcode::FAILURE;
            }
        };
        // A paste (bracketed, as terminals send it) may hold several lines:
        // run each in turn, as a shell does.
        if let Some(status) = text
            .split('\n')
            .find_map(|line| run_line(line, json, &mut editor, &daemon))
        {
            break status;
        }
    };

    if let Some(path) = history {
        if let Err(error) = editor.append_history(&path) {
            eprintln!(
                "sc_console: cannot save the history to {}: {}",
                path.display(),
                readline_text(&error)
            );
        }
    }
    status
}

/// Runs one line typed at the prompt; `Some(status)` ends the shell.
fn run_line(
    line: &str,
    json: bool,
    editor: &mut Editor<ConsoleHelper, FileHistory>,
    daemon: &RefCell<Daemon>,
) -> Option<i32> {
    // Completion leaves a blank after the last word; neither the history
    // nor the daemon needs it.
    let line = line.trim();
    if !line.is_empty() {
        // Only an in-memory list changes here; the file is written at exit.
        let _ = editor.add_history_entry(line);
    }
    match builtin(line) {
        Builtin::Leave => return Some(exitcode::OK),
        Builtin::Misused(text) => {
            eprint!("{text}");
            return None;
        }
        Builtin::None => {}
    }
    let mut send = |line: &str, json: bool| daemon.borrow_mut().send(line, json);
    let printed = match execute(line, json, &mut send) {
        Ok(None) => Ok(()),
        Ok(Some(answer)) if answer.ok => write_all(&mut io::stdout(), &answer.output(json)),
        Ok(Some(answer)) => write_all(&mut io::stderr(), &answer.output(false)),
        Err(error) => {
            eprintln!("sc_console: {}", chain(&error));
            return Some(error.exit_code());
        }
    };
    match printed {
        Ok(()) => None,
        Err(error) => {
            eprintln!("sc_console: cannot write the answer: {}", io_text(&error));
            Some(exitcode::FAILURE)
        }
    }
}

fn write_all(stream: &mut dyn Write, text: &str) -> io::Result<()> {
    stream.write_all(text.as_bytes())?;
    stream.flush()
}

/// Finds the history file, creates its directory and loads it. A history
/// that cannot be kept is reported once and the shell goes on without it.
fn open_history(editor: &mut Editor<ConsoleHelper, FileHistory>) -> Option<PathBuf> {
    let path = history_path(
        std::env::var_os(HISTORY_ENV),
        std::env::var_os("XDG_STATE_HOME"),
        std::env::var_os("HOME"),
    )?;
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        if let Err(error) = std::fs::create_dir_all(dir) {
            eprintln!(
                "sc_console: history is not kept: cannot create {}: {}",
                dir.display(),
                io_text(&error)
            );
            return None;
        }
    }
    match editor.load_history(&path) {
        Ok(()) => Some(path),
        Err(ReadlineError::Io(error)) if error.kind() == io::ErrorKind::NotFound => Some(path),
        Err(error) => {
            eprintln!(
                "sc_console: history is not kept: cannot read {}: {}",
                path.display(),
                readline_text(&error)
            );
            None
        }
    }
}

fn readline_text(error: &ReadlineError) -> String {
    match error {
        ReadlineError::Io(error) => io_text(error),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(value: &str) -> Option<OsString> {
        Some(OsString::from(value))
    }

    #[test]
    fn history_override_then_xdg_then_home() {
        assert_eq!(
            history_path(os("/tmp/h"), os("/state"), os("/home/op")),
            Some(PathBuf::from("/tmp/h"))
        );
        assert_eq!(history_path(os(""), os("/state"), os("/home/op")), None);
        assert_eq!(
            history_path(None, os("/state"), os("/home/op")),
            Some(PathBuf::from("/state/sc_console/history"))
        );
        assert_eq!(
            history_path(None, os("relative"), os("/home/op")),
            Some(PathBuf::from("/home/op/.local/state/sc_console/history"))
        );
        assert_eq!(
            history_path(None, None, os("/home/op")),
            Some(PathBuf::from("/home/op/.local/state/sc_console/history"))
        );
        assert_eq!(history_path(None, None, os("")), None);
        assert_eq!(history_path(None, None, None), None);
    }

    #[test]
    fn prompt_shortens_the_home_directory() {
        let home = Path::new("/home/op");
        assert_eq!(
            prompt(Path::new("/home/op/run/scored.sock"), Some(home)),
            "scored[~/run/scored.sock]> "
        );
        assert_eq!(
            prompt(Path::new("/home/operator/s.sock"), Some(home)),
            "scored[/home/operator/s.sock]> "
        );
        assert_eq!(
            prompt(Path::new("/run/scored/scored.sock"), Some(home)),
            "scored[/run/scored/scored.sock]> "
        );
        assert_eq!(
            prompt(Path::new("/run/scored/scored.sock"), Some(Path::new("/"))),
            "scored[/run/scored/scored.sock]> "
        );
        assert_eq!(
            prompt(Path::new("/run/scored.sock"), None),
            "scored[/run/scored.sock]> "
        );
    }

    #[test]
    fn quit_and_exit_are_builtins() {
        assert_eq!(builtin("quit"), Builtin::Leave);
        assert_eq!(builtin("  exit  "), Builtin::Leave);
        assert_eq!(
            builtin("exit 3"),
            Builtin::Misused("error: exit takes no arguments\n".to_string())
        );
        assert_eq!(builtin("jobs"), Builtin::None);
        assert_eq!(builtin(""), Builtin::None);
    }
}
