//! Completion and hint tests: one line in, the offered words out, against a
//! fake daemon that records which lookups it was asked for.

use std::cell::RefCell;

use super::*;

/// A daemon with queues 0-2, clusters 0 (`x86`) and 1 (`arm`), jobs 7 and 12.
#[derive(Default)]
struct FakeLive {
    asked: RefCell<Vec<&'static str>>,
}

impl Live for FakeLive {
    fn queues(&self) -> Vec<String> {
        self.asked.borrow_mut().push("queues");
        owned(&["0", "1", "2"])
    }
    fn clusters(&self) -> Vec<String> {
        self.asked.borrow_mut().push("clusters");
        owned(&["0", "x86", "1", "arm"])
    }
    fn jobs(&self) -> Vec<String> {
        self.asked.borrow_mut().push("jobs");
        owned(&["7", "12"])
    }
    fn users(&self) -> Vec<String> {
        self.asked.borrow_mut().push("users");
        owned(&["alice", "bob"])
    }
    fn names(&self) -> Vec<String> {
        self.asked.borrow_mut().push("names");
        owned(&["sweep"])
    }
}

/// Completes `line` with the cursor at its end and compares the words offered.
#[track_caller]
fn check(line: &str, expected: &[&str]) {
    let live = FakeLive::default();
    let completion = complete(line, line.len(), &live);
    assert_eq!(
        completion.candidates, expected,
        "\n--- line ---\n{line:?}\n--- asked the daemon for ---\n{:?}\n",
        live.asked
    );
}

/// Completes `line` and returns which lookups the daemon was asked for.
fn asked(line: &str) -> Vec<&'static str> {
    let live = FakeLive::default();
    complete(line, line.len(), &live);
    live.asked.into_inner()
}

#[track_caller]
fn check_hint(line: &str, expected: Option<&str>) {
    assert_eq!(
        hint(line, line.len()).map(|hint| hint.display),
        expected.map(str::to_string),
        "\n--- line ---\n{line:?}\n"
    );
}

#[test]
fn first_word_is_a_command_or_builtin() {
    check(
        "",
        &[
            "cluster",
            "clusters",
            "exit",
            "help",
            "history",
            "hosts",
            "job",
            "jobs",
            "kill",
            "move",
            "queue",
            "queues",
            "quit",
            "restart",
            "resume",
            "shutdown",
            "status",
            "suspend",
            "timeslice",
        ],
    );
    check("q", &["queue", "queues", "quit"]);
    check("sta", &["status"]);
    check("  sta", &["status"]);
    check("e", &["exit"]);
    check("nosuch", &[]);
}

#[test]
fn help_takes_command_names_only() {
    check("help ", &help_names());
    check("help qu", &["queue", "queues"]);
    check("help ex", &[]);
    check("help queue ", &[]);
}

fn help_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = help::command_names().collect();
    names.sort_unstable();
    names
}

#[test]
fn queue_number_then_action_then_settings() {
    check("queue ", &["0", "1", "2"]);
    check("queue 1", &["1"]);
    check(
        "queue 1 ",
        &["enable", "disable", "activate", "deactivate", "set"],
    );
    check("queue 1 s", &["set"]);
    check("queue 1 d", &["disable", "deactivate"]);
    check(
        "queue 1 set ",
        &[
            "mode=",
            "cputime=",
            "residency=",
            "memory=",
            "disk=",
            "group=",
            "backfill=",
            "mpl=",
            "share=",
            "fairshare=",
        ],
    );
    check("queue 1 set m", &["mode=", "memory=", "mpl="]);
    check("queue 1 set mp", &["mpl="]);
    check("queue 1 set b", &["backfill="]);
    check("queue 1 set backfill=", &["backfill=on", "backfill=off"]);
    check("queue 1 set mpl=", &[]);
    check("queue 1 set share=", &["share=user", "share=job"]);
    check("queue 1 set s", &["share="]);
    check("queue 1 set mode=", &["mode=gang", "mode=exclusive"]);
    check("queue 1 set mode=e", &["mode=exclusive"]);
    check(
        "queue 1 set mode=gang ",
        &[
            "cputime=",
            "residency=",
            "memory=",
            "disk=",
            "group=",
            "backfill=",
            "mpl=",
            "share=",
            "fairshare=",
        ],
    );
    check("queue 1 set mode=gang memory=50% m", &["mpl="]);
    check("queue 1 set mode=gang memory=50% mpl=2 m", &[]);
    check("queue 1 set cputime=1", &[]);
    check("queue 1 enable ", &[]);
}

#[test]
fn cluster_ref_then_limit_then_settings() {
    check("cluster ", &["0", "x86", "1", "arm"]);
    check("cluster a", &["arm"]);
    check("cluster x86 ", &["limit"]);
    check("cluster 0 l", &["limit"]);
    check("cluster 0 limit ", &["memory=", "disk=", "jobs="]);
    check("cluster 0 limit jobs=4 ", &["memory=", "disk="]);
    check("cluster 0 limit jobs=4 d", &["disk="]);
}

#[test]
fn job_commands_take_live_job_ids() {
    for command in ["job", "suspend", "resume", "move"] {
        check(&format!("{command} "), &["7", "12"]);
        check(&format!("{command} 1"), &["12"]);
    }
    check("kill 1", &["12"]);
    check("job 7 ", &[]);
    check("suspend 7 ", &[]);
}

#[test]
fn move_then_queue_number() {
    check("move 7 ", &["0", "1", "2"]);
    check("move 7 2", &["2"]);
    check("move 7 2 ", &[]);
}

#[test]
fn kill_then_more_jobs_signal_names_or_options() {
    check("kill ", &["7", "12", "-s", "--user", "--name"]);
    check(
        "kill 7 ",
        &[
            "7", "12", "TERM", "KILL", "INT", "HUP", "USR1", "USR2", "QUIT", "RTMIN", "-s",
        ],
    );
    check("kill 7 U", &["USR1", "USR2"]);
    check("kill 7 12 -", &["-s"]);
    check(
        "kill -s ",
        &[
            "TERM", "KILL", "INT", "HUP", "USR1", "USR2", "QUIT", "RTMIN",
        ],
    );
    check("kill -s USR1 ", &["7", "12", "--user", "--name"]);
    check("kill --user ", &["alice", "bob"]);
    check("kill --name ", &["sweep"]);
    check("kill --name sweep ", &["-s", "--user"]);
}

#[test]
fn keywords_of_jobs_and_shutdown() {
    check("jobs ", &["all", "--user", "--name", "--state"]);
    check("jobs a", &["all"]);
    check("jobs all ", &["--user", "--name", "--state"]);
    check("jobs --state w", &["waiting"]);
    check("jobs all --user ", &["alice", "bob"]);
    check("jobs --name sweep --", &["--user", "--state"]);
    check("shutdown ", &["now"]);
    check("shutdown n", &["now"]);
}

#[test]
fn commands_without_arguments_offer_nothing() {
    for line in [
        "status ",
        "hosts ",
        "clusters ",
        "queues ",
        "timeslice ",
        "quit ",
    ] {
        check(line, &[]);
    }
}

#[test]
fn comments_end_completion() {
    check("# ", &[]);
    check("#", &[]);
    check("jobs # ", &[]);
    check("queue #1 ", &[]);
}

#[test]
fn tabs_separate_words_like_blanks() {
    check("queue\t1\ts", &["set"]);
}

#[test]
fn only_contexts_with_live_values_ask_the_daemon() {
    assert_eq!(asked(""), Vec::<&str>::new());
    assert_eq!(asked("queue 1 "), Vec::<&str>::new());
    assert_eq!(asked("queue 1 set mode="), Vec::<&str>::new());
    assert_eq!(asked("kill -s "), Vec::<&str>::new());
    assert_eq!(asked("kill --user "), ["users"]);
    assert_eq!(asked("queue "), ["queues"]);
    assert_eq!(asked("cluster "), ["clusters"]);
    assert_eq!(asked("kill "), ["jobs"]);
    assert_eq!(asked("move 7 "), ["queues"]);
}

#[test]
fn a_failed_lookup_offers_nothing() {
    let completion = complete("job ", 4, &NoLive);
    assert_eq!(completion.candidates, Vec::<String>::new());
}

#[test]
fn completion_replaces_the_word_at_the_cursor() {
    let live = FakeLive::default();
    assert_eq!(
        complete("queue 1 s", 9, &live),
        Completion {
            start: 8,
            candidates: vec!["set".to_string()]
        }
    );
    // The cursor in the middle of the line completes the word before it.
    assert_eq!(
        complete("kill 1 TERM", 6, &live),
        Completion {
            start: 5,
            candidates: vec!["12".to_string()]
        }
    );
    // A cursor that is not on a character boundary offers nothing.
    assert_eq!(complete("jé", 2, &live).candidates, Vec::<String>::new());
}

#[test]
fn replacements_add_a_blank_except_after_equals() {
    assert_eq!(replacement("status"), "status ");
    assert_eq!(replacement("12"), "12 ");
    assert_eq!(replacement("mode="), "mode=");
    assert_eq!(replacement("mode=gang"), "mode=gang ");
}

#[test]
fn hints_finish_a_unique_word() {
    check_hint("sta", Some("tus"));
    check_hint("queue 1 s", Some("et"));
    check_hint("queue 1 set mode=e", Some("xclusive"));
    check_hint("q", None);
    check_hint("nosuch", None);
    let finished = hint("sta", 3).expect("a hint for sta");
    assert_eq!(finished.completion.as_deref(), Some("tus"));
}

#[test]
fn hints_show_the_rest_of_the_usage() {
    check_hint("kill", Some(" [-s SIGNAL] ID [ID...]"));
    check_hint("job", Some(" ID"));
    check_hint("status", None);
    check_hint(
        "queue ",
        Some("Q enable|disable|activate|deactivate|set ..."),
    );
    check_hint(
        "queue 1 ",
        Some("enable|disable|activate|deactivate|set ..."),
    );
    check_hint("queue 1 enable ", None);
    check_hint(
        "queue 1 set ",
        Some(
            "mode=gang|exclusive cputime=DUR|none residency=DUR|none memory=PCT%|none \
             disk=PCT%|none group=NAME|GID|none backfill=on|off mpl=N|none share=user|job fairshare=DUR|none",
        ),
    );
    check_hint(
        "queue 1 set mode=gang memory=50% ",
        Some(
            "cputime=DUR|none residency=DUR|none disk=PCT%|none group=NAME|GID|none \
             backfill=on|off mpl=N|none share=user|job fairshare=DUR|none",
        ),
    );
    check_hint(
        "cluster x86 limit jobs=4 ",
        Some("memory=SIZE|none disk=SIZE|none"),
    );
    check_hint("kill 7 ", Some("SIGNAL"));
    check_hint("jobs ", Some("[all] [--user U] [--name N] [--state S]"));
    check_hint("help ", Some("[COMMAND]"));
    check_hint("kill 7 TERM ", None);
    check_hint("queue 1 bogus ", None);
    check_hint("status extra ", None);
    let usage = hint("queue ", 6).expect("a hint for queue");
    assert_eq!(usage.completion, None);
}

#[test]
fn hints_only_at_the_end_of_the_line() {
    assert_eq!(hint("status", 3), None);
    check_hint("", None);
    check_hint("   ", None);
}

#[test]
fn column_takes_numbers_and_strings() {
    let listing = serde_json::json!([
        {"cluster": 0, "name": "x86"},
        {"cluster": 1, "name": "arm"},
        {"cluster": null, "name": ["odd"]},
    ]);
    assert_eq!(column(&listing, "cluster"), ["0", "1"]);
    assert_eq!(column(&listing, "name"), ["x86", "arm"]);
    assert_eq!(column(&listing, "missing"), Vec::<String>::new());
    assert_eq!(
        column(&serde_json::json!({"error": "x"}), "id"),
        Vec::<String>::new()
    );
}
