//! Completion and hints for the interactive shell: which words fit at the
//! cursor, given the words typed before it.
//!
//! Pure: the module never talks to the daemon itself. Values only the daemon
//! knows (queue numbers, clusters, job ids) come through the [`Live`] trait,
//! which the shell implements with console requests and tests implement
//! with fixed lists. Command words, keywords and usages come from the help
//! table (`scored_proto::command::help`), the one list of commands.
#![forbid(unsafe_code)]

use scored_proto::command::help;

/// Values that only the daemon knows, asked for at completion time. A
/// lookup that fails gives an empty list: completion then offers nothing.
pub trait Live {
    /// Queue numbers, as typed.
    fn queues(&self) -> Vec<String>;
    /// Cluster indices and names.
    fn clusters(&self) -> Vec<String>;
    /// Ids of the admitted jobs.
    fn jobs(&self) -> Vec<String>;
    /// The users of the jobs listed, for `--user`.
    fn users(&self) -> Vec<String> {
        Vec::new()
    }
    /// The names of the jobs listed, for `--name`.
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A [`Live`] that knows nothing, for hints, which must never wait for the
/// daemon while the operator types.
pub struct NoLive;

impl Live for NoLive {
    fn queues(&self) -> Vec<String> {
        Vec::new()
    }
    fn clusters(&self) -> Vec<String> {
        Vec::new()
    }
    fn jobs(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The shell's own commands, which never reach the daemon.
pub const BUILTINS: &[&str] = &["exit", "quit"];

const QUEUE_ACTIONS: &[&str] = &["enable", "disable", "activate", "deactivate", "set"];
/// The signals `kill` offers: those that end a job, and those a job is
/// usually told something with (`kill` accepts every other name and number
/// but the ones that stop or continue it).
const KILL_SIGNALS: &[&str] = &[
    "TERM", "KILL", "INT", "HUP", "USR1", "USR2", "QUIT", "RTMIN",
];
/// Commands whose first argument is a job id.
const JOB_COMMANDS: &[&str] = &["job", "suspend", "resume", "move"];
/// `jobs`'s words, each given once.
const JOBS_WORDS: &[&str] = &["all", "--user", "--name", "--state"];

/// What fits at the cursor: the byte offset where the word being completed
/// starts, and the words that may replace it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Where the replaced word starts in the line.
    pub start: usize,
    /// Whole words, each starting with what is already typed.
    pub candidates: Vec<String>,
}

/// Completes the word that ends at `pos` (a byte offset into `line`).
pub fn complete(line: &str, pos: usize, live: &dyn Live) -> Completion {
    let Some(before) = line.get(..pos) else {
        return Completion {
            start: pos.min(line.len()),
            candidates: Vec::new(),
        };
    };
    let start = before.rfind(is_blank).map_or(0, |idx| idx + 1);
    let word = &before[start..];
    let prior: Vec<&str> = before[..start]
        .split(is_blank)
        .filter(|word| !word.is_empty())
        .collect();
    // A word starting with '#' ends the line: nothing after it is a command.
    if word.starts_with('#') || prior.iter().any(|word| word.starts_with('#')) {
        return Completion {
            start,
            candidates: Vec::new(),
        };
    }
    let mut candidates: Vec<String> = Vec::new();
    for candidate in pool(&prior, word, live) {
        if candidate.starts_with(word) && !candidates.contains(&candidate) {
            candidates.push(candidate);
        }
    }
    Completion { start, candidates }
}

/// The text that replaces the word: a finished word gets a blank after it
/// so the next one can be typed at once; `key=` waits for its value.
pub fn replacement(candidate: &str) -> String {
    if candidate.ends_with('=') {
        candidate.to_string()
    } else {
        format!("{candidate} ")
    }
}

/// Every word that may stand where `word` is, before filtering by prefix.
/// Only the contexts that need them ask the daemon.
fn pool(prior: &[&str], word: &str, live: &dyn Live) -> Vec<String> {
    match prior {
        [] => {
            let mut names: Vec<&str> = help::command_names()
                .chain(BUILTINS.iter().copied())
                .collect();
            names.sort_unstable();
            owned(&names)
        }
        ["help"] => {
            let mut names: Vec<&str> = help::command_names().collect();
            names.sort_unstable();
            owned(&names)
        }
        ["queue"] => live.queues(),
        ["queue", _] => owned(QUEUE_ACTIONS),
        ["queue", _, "set", given @ ..] => settings("queue", "set", word, given),
        ["cluster"] => live.clusters(),
        ["cluster", _] => owned(&["limit"]),
        ["cluster", _, "limit", given @ ..] => settings("cluster", "limit", word, given),
        [command] if JOB_COMMANDS.contains(command) => live.jobs(),
        ["move", _] => live.queues(),
        ["kill", .., "-s"] => owned(KILL_SIGNALS),
        [_, .., "--user"] if matches!(prior[0], "kill" | "jobs") => live.users(),
        [_, .., "--name"] if matches!(prior[0], "kill" | "jobs") => live.names(),
        ["jobs", .., "--state"] => owned(&job_states()),
        ["kill", given @ ..] => kill_words(given, word, live),
        ["jobs", given @ ..] => owned(
            &JOBS_WORDS
                .iter()
                .copied()
                .filter(|flag| !given.contains(flag))
                .collect::<Vec<_>>(),
        ),
        ["history", .., "--user" | "--since"] => Vec::new(),
        ["history", given @ ..] => owned(
            &["--user", "--since"]
                .into_iter()
                .filter(|flag| !given.contains(flag))
                .collect::<Vec<_>>(),
        ),
        ["shutdown"] => owned(&["now"]),
        _ => Vec::new(),
    }
}

/// The job states `jobs --state` takes.
fn job_states() -> Vec<&'static str> {
    scored_proto::command::JOB_STATES.to_vec()
}

/// What may follow `kill` and the words given: job ids and the options
/// not given yet; after ids, more ids or a signal's name, unless `-s`
/// gave one; after `--user` or `--name`, the other one and `-s`.
fn kill_words(given: &[&str], word: &str, live: &dyn Live) -> Vec<String> {
    let has = |flag: &str| given.contains(&flag);
    let by_filter = has("--user") || has("--name");
    let ids = given
        .iter()
        .any(|given| !given.is_empty() && given.bytes().all(|byte| byte.is_ascii_digit()));
    let mut words = Vec::new();
    if !by_filter {
        words.extend(live.jobs());
        if ids && !has("-s") && !word.starts_with('-') {
            words.extend(owned(KILL_SIGNALS));
        }
    }
    for flag in ["-s", "--user", "--name"] {
        let allowed = match flag {
            "-s" => true,
            _ => !ids,
        };
        if allowed && !has(flag) {
            words.push(flag.to_string());
        }
    }
    words
}

/// The settings of the form `NAME X KEYWORD key=... ...` of a command's
/// usage, the one list of them: `key=` for each key not given yet or,
/// once `key=` is typed, `key=value` for each value of a key whose values
/// are all words (`mode=gang|exclusive`, `backfill=on|off`).
fn settings(name: &str, keyword: &str, word: &str, given: &[&str]) -> Vec<String> {
    let keys: Vec<&str> = help::usage(name)
        .into_iter()
        .flat_map(str::lines)
        .map(|form| form.split_whitespace().collect::<Vec<_>>())
        .filter(|words| words.get(2) == Some(&keyword))
        .flat_map(|words| words.into_iter().skip(3))
        .filter(|usage| usage.contains('='))
        .collect();
    if let Some((key, _)) = word.split_once('=') {
        let values = keys
            .iter()
            .filter_map(|usage| usage.strip_prefix(key)?.strip_prefix('='))
            .flat_map(|values| values.split('|'))
            .collect::<Vec<_>>();
        if values.iter().all(|value| is_keyword(value)) {
            return values
                .iter()
                .map(|value| format!("{key}={value}"))
                .collect();
        }
        return Vec::new();
    }
    keys.iter()
        .filter_map(|usage| usage.split_once('=').map(|(key, _)| key))
        .filter(|key| {
            !given
                .iter()
                .any(|setting| setting.split('=').next() == Some(*key))
        })
        .map(|key| format!("{key}="))
        .collect()
}

/// A value spelled as it is typed (`gang`, `on`), not a placeholder
/// (`DUR`, `PCT%`, `N`).
fn is_keyword(value: &str) -> bool {
    !value.is_empty() && value.chars().all(|ch| ch.is_ascii_lowercase())
}

fn owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| word.to_string()).collect()
}

fn is_blank(ch: char) -> bool {
    ch == ' ' || ch == '\t'
}

/// A hint shown after the cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    /// What is shown.
    pub display: String,
    /// What the right arrow inserts, when the hint is the rest of a word.
    pub completion: Option<String>,
}

/// The hint for a line with the cursor at `pos`: the rest of the word when
/// only one command word or keyword fits, else the rest of the command's
/// usage (`queue 1 ` hints `enable|disable|activate|deactivate`). Hints never
/// ask the daemon, because they are computed at every key press.
pub fn hint(line: &str, pos: usize) -> Option<Hint> {
    if pos != line.len() || line.trim().is_empty() {
        return None;
    }
    let completion = complete(line, pos, &NoLive);
    let word = &line[completion.start..];
    let prior: Vec<&str> = line[..completion.start]
        .split(is_blank)
        .filter(|word| !word.is_empty())
        .collect();
    if word.is_empty() {
        return usage_rest(&prior).map(|rest| Hint {
            display: rest,
            completion: None,
        });
    }
    if let [only] = completion.candidates.as_slice() {
        if only.len() > word.len() {
            let rest = only[word.len()..].to_string();
            return Some(Hint {
                display: rest.clone(),
                completion: Some(rest),
            });
        }
    }
    // A whole command word just typed: show what it takes.
    if prior.is_empty() && help::entry(word).is_some() {
        return usage_rest(&[word]).map(|rest| Hint {
            display: format!(" {rest}"),
            completion: None,
        });
    }
    None
}

/// The usage words that follow the words typed so far, from every form of
/// the command's usage that fits them: where forms part, their next words
/// are shown as alternatives (`queue 1 ` hints
/// `enable|disable|activate|deactivate|set ...`). Settings (`key=...`) may
/// come in any order, so the ones already given are left out.
fn usage_rest(typed: &[&str]) -> Option<String> {
    let (name, args) = typed.split_first()?;
    let usage = help::usage(name)?;
    let rests: Vec<Vec<&str>> = usage
        .lines()
        .filter_map(|form| {
            let words: Vec<&str> = form.split_whitespace().skip(1).collect();
            form_rest(&words, args)
        })
        .collect();
    let first = rests.first()?;
    let common = (0..first.len())
        .take_while(|&idx| rests.iter().all(|rest| rest.get(idx) == first.get(idx)))
        .count();
    let mut shown: Vec<String> = first[..common]
        .iter()
        .map(|word| word.to_string())
        .collect();
    let parting: Vec<&str> = rests
        .iter()
        .filter_map(|rest| rest.get(common).copied())
        .collect();
    if parting.iter().any(|word| !word.split('|').all(is_keyword)) {
        // Forms that part at placeholders or options (`kill ID` beside
        // `kill [-s SIGNAL]`) are not alternatives of one word: the first
        // form, the command's main one, is shown.
        return (!first.is_empty()).then(|| first.join(" "));
    }
    let mut alternatives: Vec<&str> = Vec::new();
    for word in parting {
        for alternative in word.split('|') {
            if !alternatives.contains(&alternative) {
                alternatives.push(alternative);
            }
        }
    }
    if !alternatives.is_empty() {
        shown.push(alternatives.join("|"));
        if rests.iter().any(|rest| rest.len() > common + 1) {
            shown.push("...".to_string());
        }
    }
    (!shown.is_empty()).then(|| shown.join(" "))
}

fn form_rest<'u>(words: &[&'u str], typed: &[&str]) -> Option<Vec<&'u str>> {
    for (idx, typed_word) in typed.iter().enumerate() {
        let usage_word = words.get(idx)?;
        if usage_word.contains('=') {
            let given: Vec<&str> = typed[idx..]
                .iter()
                .filter_map(|setting| setting.split('=').next())
                .collect();
            return Some(
                words[idx..]
                    .iter()
                    .filter(|usage| {
                        usage
                            .split('=')
                            .next()
                            .is_none_or(|key| !given.contains(&key))
                    })
                    .copied()
                    .collect(),
            );
        }
        if !fits(usage_word, typed_word) {
            return None;
        }
    }
    Some(words.get(typed.len()..).unwrap_or_default().to_vec())
}

/// Whether a typed word fits a usage word: any word fits a placeholder in
/// capitals (`Q`, `ID`, `[SIGNAL]`), and a keyword fits its alternatives.
fn fits(usage_word: &str, typed: &str) -> bool {
    let bare = usage_word.trim_matches(['[', ']']);
    if !bare.is_empty() && bare.chars().all(|ch| ch.is_ascii_uppercase()) {
        return true;
    }
    bare.split('|').any(|alternative| alternative == typed)
}

/// The values of one key in a JSON listing (an array of objects), as words:
/// numbers and strings are kept, anything else is skipped. Anything but an
/// array gives nothing.
pub fn column(listing: &serde_json::Value, key: &str) -> Vec<String> {
    let Some(rows) = listing.as_array() else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|row| match row.get(key)? {
            serde_json::Value::Number(number) => Some(number.to_string()),
            serde_json::Value::String(text) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
