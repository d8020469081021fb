//! Help texts of console commands: one static table entry per command word,
//! with its usage (the exact syntax sc_console(8) COMMANDS documents), a short summary for the
//! command list, a one-sentence description of what the daemon does, who may
//! run it, and an example line.
//!
//! The table is the single source of command names: the parser takes its
//! usage hints from here, and sc_console completes command names from
//! [`command_names`]. Every example must parse with
//! [`parse_line`](super::parse_line); a test checks it.
//!
//! Pure: no I/O, only static text and string building.
#![forbid(unsafe_code)]

use crate::units::quote;

/// Who may run a command: read-only commands are open to every local user,
/// changing ones need root or an operator (sc_console(8), ACCESS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only: open to every local user.
    Anyone,
    /// Changes state: needs root or the operator (`scored --operator USER`).
    Operator,
    /// Root, the operator, or the owner of the job.
    OperatorOrOwner,
    /// Anyone may show the value; setting it needs root or the operator.
    AnyoneToShow,
}

impl Access {
    /// The sentence shown in a command's help.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Anyone => "open to every user",
            Access::Operator => "needs root or the operator",
            Access::OperatorOrOwner => "needs root, the operator, or the job's owner",
            Access::AnyoneToShow => {
                "showing is open to every user; setting needs root or the operator"
            }
        }
    }
}

/// The help of one command word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelpEntry {
    /// The command word, as typed.
    pub name: &'static str,
    /// The syntax; `queue` has two forms, one per line.
    pub usage: &'static str,
    /// A short phrase for the command list.
    pub summary: &'static str,
    /// What the daemon does, in one sentence.
    pub description: &'static str,
    /// Who may run it.
    pub access: Access,
    /// A line that parses, showing typical use.
    pub example: &'static str,
}

/// The table, in the order of sc_console(8), COMMANDS.
static ENTRIES: &[HelpEntry] = &[
    HelpEntry {
        name: "help",
        usage: "help [COMMAND]",
        summary: "list the commands, or show one in full",
        description: "Lists every command with its usage, or shows one command's usage, \
                      description, access and an example.",
        access: Access::Anyone,
        example: "help queue",
    },
    HelpEntry {
        name: "status",
        usage: "status",
        summary: "uptime, time slice, job counts, switch statistics",
        description: "Shows uptime, time slice, clusters, queues, job counts and gang-switch \
                      statistics (count and switch latency), one key: value line per fact.",
        access: Access::Anyone,
        example: "status",
    },
    HelpEntry {
        name: "hosts",
        usage: "hosts",
        summary: "list hosts: cluster, CPUs, speed, memory, jobs, state",
        description: "Lists the logical hosts with their name, cluster, CPUs, speed, memory, \
                      admitted jobs and state.",
        access: Access::Anyone,
        example: "hosts",
    },
    HelpEntry {
        name: "clusters",
        usage: "clusters",
        summary: "list clusters: hosts, limits, what jobs reserve",
        description: "Lists the clusters with their hosts, their memory, disk and job-count \
                      limits, and how much of each the admitted jobs reserve.",
        access: Access::Anyone,
        example: "clusters",
    },
    HelpEntry {
        name: "cluster",
        usage: "cluster C limit memory=SIZE|none disk=SIZE|none jobs=N|none",
        summary: "set or remove a cluster's memory, disk and job limits",
        description: "Changes the limits of cluster C (an index or a name) on memory per host, \
                      disk for the whole cluster and the number of admitted jobs, where none \
                      removes a limit and limits not named stay as they are; jobs already \
                      admitted are kept.",
        access: Access::Operator,
        example: "cluster 0 limit memory=8G jobs=16",
    },
    HelpEntry {
        name: "queues",
        usage: "queues",
        summary: "list queues: state, mode, limits, jobs",
        description: "Lists the queues with their state, mode, limits and numbers of queued \
                      and running jobs.",
        access: Access::Anyone,
        example: "queues",
    },
    HelpEntry {
        name: "queue",
        usage: "queue Q enable|disable|activate|deactivate\n\
                queue Q set mode=gang|exclusive cputime=DUR|none residency=DUR|none \
                memory=PCT%|none disk=PCT%|none group=NAME|GID|none backfill=on|off mpl=N|none share=user|job \
                fairshare=DUR|none",
        summary: "change a queue's state or attributes",
        description: "Changes queue Q: disable only refuses new submissions (admitted jobs \
                      keep being scheduled while the queue is activated), enable accepts \
                      them again, deactivate stops scheduling the queue's jobs (their \
                      processes are stopped, or not created if they never started), \
                      activate schedules them again and implies enable, and set changes any \
                      subset of the mode, the CPU time limit that jobs inherit at \
                      submission, the CPU time after which a job sinks to the next lower \
                      queue, the shares of the cluster's memory and disk limits, the \
                      group whose members alone may submit, where none removes a setting, \
                      and backfilling: an exclusive queue with backfill=on reserves the \
                      earliest start for its first waiting job and starts later jobs that \
                      declared -time out of order only when they do not delay it, \
                      a gang queue's multiprogramming level (mpl), and what a gang \
                      queue shares a host contested by several users' jobs between: \
                      share=user (the default) gives each user's jobs together an equal \
                      share of the rotation, share=job each job, and, with fairshare=DUR, \
                      the order of an exclusive queue's or a leveled gang queue's waiting \
                      jobs behind the first: least used first, by each user's use of \
                      hosts over time, halving every DUR.",
        access: Access::Operator,
        example: "queue 2 set mode=gang cputime=1h residency=10m memory=50%",
    },
    HelpEntry {
        name: "jobs",
        usage: "jobs [all] [--user U] [--name N] [--state S]",
        summary: "list jobs (all: also recently finished)",
        description: "Lists the unfinished jobs, those not admitted yet (waiting for the jobs \
                      they depend on, their array's limit or resources, with the reason) \
                      among them; with all, also the recently finished ones; only user U's \
                      (a name or a uid) with --user, only those named N with --name, only \
                      those in state S (waiting, queued, running, stopped, held, ending, done \
                      or killed) with --state.",
        access: Access::Anyone,
        example: "jobs --user alice --state waiting",
    },
    HelpEntry {
        name: "job",
        usage: "job ID",
        summary: "show one job in full",
        description: "Shows job ID in full, one key: value line per fact (id, user, state, \
                      queue, hosts, procs, cpu, wall, stopped, switches, memory, and once \
                      ended exit and reason).",
        access: Access::Anyone,
        example: "job 42",
    },
    HelpEntry {
        name: "kill",
        usage: "kill [-s SIGNAL] ID [ID...]\n\
                kill [-s SIGNAL] [--user U] [--name N]\n\
                kill ID SIGNAL",
        summary: "kill jobs (SIGTERM, then SIGKILL after the grace)",
        description: "Kills the jobs named by id (every number is a job id), or every \
                      unfinished job of user U and named N: without a signal, or with TERM, \
                      it sends SIGTERM to all of a job's processes (letting a stopped job run \
                      to handle it) and SIGKILL to those left after the kill grace (scored \
                      --kill-grace, 5s by default); with KILL it kills them at once; a job not \
                      started or not admitted yet ends without running; any other signal (-s \
                      and a number from 1 to 64, or a name such as USR1, hup or RTMIN+2, which \
                      may also follow the ids) is sent alone to the jobs that have processes \
                      and they go on, except STOP, CONT and the terminal stop signals, which \
                      are refused (use suspend and resume); users may kill only their own \
                      jobs, and a command that names a job it may not kill, or no job, \
                      changes nothing; the reply says, job by job, what was done.",
        access: Access::OperatorOrOwner,
        example: "kill -s USR1 42 43",
    },
    HelpEntry {
        name: "suspend",
        usage: "suspend ID",
        summary: "hold a job: stopped until resume",
        description: "Holds job ID: its processes are stopped and the scheduler never \
                      resumes it until resume releases the hold.",
        access: Access::OperatorOrOwner,
        example: "suspend 42",
    },
    HelpEntry {
        name: "resume",
        usage: "resume ID",
        summary: "release a hold",
        description: "Releases the hold that suspend put on job ID, so the scheduler runs it \
                      again in its turn.",
        access: Access::OperatorOrOwner,
        example: "resume 42",
    },
    HelpEntry {
        name: "move",
        usage: "move ID Q",
        summary: "move a job to another queue",
        description: "Moves job ID to queue Q, whose state, mode and priority apply to it \
                      from then on.",
        access: Access::Operator,
        example: "move 42 0",
    },
    HelpEntry {
        name: "timeslice",
        usage: "timeslice [DUR]",
        summary: "show or set the gang time slice (default 500ms)",
        description: "Shows the gang time slice, or sets it to DUR, from 1ms to 1h (the \
                      default is 500ms).",
        access: Access::AnyoneToShow,
        example: "timeslice 100ms",
    },
    HelpEntry {
        name: "history",
        usage: "history [--user U] [--since T]",
        summary: "finished jobs from the journal, across restarts",
        description: "Lists the jobs that ended, as the job journal in the state directory \
                      remembers them across restarts and crashes: only user U's (a name or \
                      a uid) with --user, only those that ended since T with --since, where \
                      T is a duration before now (2h) or a UTC time (2026-11-23, \
                      2026-11-23T08:30:00), each with its name, command, exit status and \
                      reason; --json gives each job with the keys of job ID.",
        access: Access::Anyone,
        example: "history --user alice --since 1d",
    },
    HelpEntry {
        name: "restart",
        usage: "restart",
        summary: "re-execute scored in place, keeping every job",
        description: "Hands the daemon's whole state to a fresh copy of the scored binary at \
                      the path it was started from, in the same process: jobs keep running, \
                      stopped or waiting, every scrun keeps its connection; if the new binary \
                      cannot take over, the daemon carries on and says why.",
        access: Access::Operator,
        example: "restart",
    },
    HelpEntry {
        name: "shutdown",
        usage: "shutdown [now]",
        summary: "stop admitting, finish (now: kill) jobs, exit",
        description: "Stops admitting jobs, lets the admitted jobs finish and then exits; \
                      with now, it kills the jobs first.",
        access: Access::Operator,
        example: "shutdown",
    },
];

/// Every command's help entry, in the order of sc_console(8), COMMANDS.
pub fn entries() -> &'static [HelpEntry] {
    ENTRIES
}

/// The help entry of a command word.
pub fn entry(name: &str) -> Option<&'static HelpEntry> {
    ENTRIES.iter().find(|entry| entry.name == name)
}

/// The command words, for completion in sc_console.
pub fn command_names() -> impl Iterator<Item = &'static str> {
    ENTRIES.iter().map(|entry| entry.name)
}

/// The usage of a command word; `queue` has two lines, one per form.
pub fn usage(name: &str) -> Option<&'static str> {
    entry(name).map(|entry| entry.usage)
}

/// Where summaries start in the command list, and the width text wraps at.
const SUMMARY_COLUMN: usize = 20;
const WIDTH: usize = 79;

/// A `help` topic that is not a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTopic {
    /// The topic asked for.
    pub topic: String,
}

impl std::fmt::Display for UnknownTopic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no help for {}: it is not a command; help lists the commands",
            quote(&self.topic)
        )
    }
}

impl std::error::Error for UnknownTopic {}

/// The help text: with no topic the list of commands, with a topic that
/// command in full. An unknown topic is an `Err` naming it.
pub fn help(topic: Option<&str>) -> Result<String, UnknownTopic> {
    match topic {
        None => Ok(list()),
        Some(name) => match entry(name) {
            Some(entry) => Ok(detail(entry)),
            None => Err(UnknownTopic {
                topic: name.to_string(),
            }),
        },
    }
}

/// All commands: usage lines on the left, the summary in a column on the
/// right. A usage too long for the left column gets the summary on the line
/// below it, in the same column.
fn list() -> String {
    let mut out = String::from("commands (help COMMAND shows one in full):\n");
    for entry in ENTRIES {
        let usage_lines: Vec<&str> = entry.usage.lines().collect();
        let summary = wrap(entry.summary, WIDTH - SUMMARY_COLUMN);
        let first_fits = usage_lines
            .first()
            .is_some_and(|line| 2 + line.len() + 2 <= SUMMARY_COLUMN)
            && usage_lines.len() == 1;
        let mut summary_lines = summary.iter();
        for line in &usage_lines {
            out.push_str("  ");
            out.push_str(line);
            if first_fits {
                if let Some(text) = summary_lines.next() {
                    out.extend(std::iter::repeat_n(' ', SUMMARY_COLUMN - 2 - line.len()));
                    out.push_str(text);
                }
            }
            out.push('\n');
        }
        for text in summary_lines {
            out.extend(std::iter::repeat_n(' ', SUMMARY_COLUMN));
            out.push_str(text);
            out.push('\n');
        }
    }
    // A blank line sets the note about rights apart from the table.
    out.push('\n');
    let note = "Read-only commands are open to every user; changing commands need root or \
                the operator, and a user may kill, suspend and resume their own jobs.";
    for line in wrap(note, WIDTH) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// One command: usage, description, access and example.
fn detail(entry: &HelpEntry) -> String {
    let mut out = String::new();
    for (idx, line) in entry.usage.lines().enumerate() {
        out.push_str(if idx == 0 { "usage: " } else { "       " });
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    for line in wrap(entry.description, WIDTH) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    out.push_str("access: ");
    out.push_str(entry.access.as_str());
    out.push('\n');
    out.push_str("example: ");
    out.push_str(entry.example);
    out.push('\n');
    out
}

/// Greedy word wrap; a word longer than the width gets a line of its own.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{parse_line, Command};

    #[test]
    fn every_command_word_has_an_entry() {
        let names: Vec<&str> = command_names().collect();
        assert_eq!(
            names,
            [
                "help",
                "status",
                "hosts",
                "clusters",
                "cluster",
                "queues",
                "queue",
                "jobs",
                "job",
                "kill",
                "suspend",
                "resume",
                "move",
                "timeslice",
                "history",
                "restart",
                "shutdown"
            ]
        );
    }

    #[test]
    fn every_example_parses_as_its_own_command() {
        for entry in entries() {
            let parsed = parse_line(entry.example);
            let Ok(Some(command)) = parsed else {
                panic!("example of {}: {parsed:?}", entry.name);
            };
            let first_word = entry.example.split(' ').next().unwrap_or("");
            assert_eq!(first_word, entry.name, "{command:?}");
        }
    }

    #[test]
    fn every_usage_starts_with_its_name() {
        for entry in entries() {
            for line in entry.usage.lines() {
                assert!(
                    line.split(' ').next() == Some(entry.name),
                    "{}: {line}",
                    entry.name
                );
            }
            assert!(entry.description.ends_with('.'), "{}", entry.name);
            assert!(
                entry.summary.len() <= WIDTH - SUMMARY_COLUMN && !entry.summary.ends_with('.'),
                "{}",
                entry.name
            );
            assert_eq!(
                entry.description.matches(". ").count(),
                0,
                "{}: one sentence",
                entry.name
            );
        }
    }

    #[test]
    fn access_matches_the_command_model() {
        // A changing command needs the operator, except where the owner may
        // act on their own job; the help must not promise otherwise.
        for entry in entries() {
            let Ok(Some(command)) = parse_line(entry.example) else {
                continue;
            };
            let expected = match (&command, command.is_changing()) {
                (Command::Timeslice(_), _) => Access::AnyoneToShow,
                (Command::Kill { .. } | Command::Suspend(_) | Command::Resume(_), _) => {
                    Access::OperatorOrOwner
                }
                (_, true) => Access::Operator,
                (_, false) => Access::Anyone,
            };
            assert_eq!(entry.access, expected, "{}", entry.name);
        }
    }

    #[test]
    fn list_shows_every_usage_aligned() {
        let text = help(None).unwrap_or_default();
        for entry in entries() {
            for line in entry.usage.lines() {
                assert!(
                    text.contains(&format!("  {line}\n")) || text.contains(&format!("  {line} ")),
                    "{line}"
                );
            }
        }
        assert!(
            text.contains("\n  status            uptime, time slice"),
            "{text}"
        );
        assert!(
            text.contains("\n  help [COMMAND]    list the commands"),
            "{text}"
        );
        assert!(
            text.contains("\n  cluster C limit memory=SIZE|none disk=SIZE|none jobs=N|none\n                    set or remove"),
            "{text}"
        );
        assert!(text.ends_with("their own jobs.\n"), "{text}");
        for line in text.lines() {
            let is_usage = entries()
                .iter()
                .any(|entry| entry.usage.lines().any(|usage| line.trim() == usage));
            assert!(is_usage || line.len() <= WIDTH, "too wide: {line}");
        }
    }

    #[test]
    fn topic_shows_usage_description_access_and_example() {
        assert_eq!(
            help(Some("kill")).as_deref(),
            Ok("usage: kill [-s SIGNAL] ID [ID...]\n\
                \x20      kill [-s SIGNAL] [--user U] [--name N]\n\
                \x20      kill ID SIGNAL\n\
                \n\
                Kills the jobs named by id (every number is a job id), or every unfinished job\n\
                of user U and named N: without a signal, or with TERM, it sends SIGTERM to all\n\
                of a job's processes (letting a stopped job run to handle it) and SIGKILL to\n\
                those left after the kill grace (scored --kill-grace, 5s by default); with KILL\n\
                it kills them at once; a job not started or not admitted yet ends without\n\
                running; any other signal (-s and a number from 1 to 64, or a name such as\n\
                USR1, hup or RTMIN+2, which may also follow the ids) is sent alone to the jobs\n\
                that have processes and they go on, except STOP, CONT and the terminal stop\n\
                signals, which are refused (use suspend and resume); users may kill only their\n\
                own jobs, and a command that names a job it may not kill, or no job, changes\n\
                nothing; the reply says, job by job, what was done.\n\
                \n\
                access: needs root, the operator, or the job's owner\n\
                example: kill -s USR1 42 43\n")
        );
        let queue = help(Some("queue")).unwrap_or_default();
        assert!(queue.starts_with(
            "usage: queue Q enable|disable|activate|deactivate\n       queue Q set mode="
        ));
    }

    #[test]
    fn unknown_topic_is_an_error_naming_it() {
        assert_eq!(
            help(Some("frob")).map_err(|unknown| unknown.to_string()),
            Err("no help for 'frob': it is not a command; help lists the commands".into())
        );
        assert_eq!(usage("frob"), None);
        assert_eq!(usage("move"), Some("move ID Q"));
    }
}
