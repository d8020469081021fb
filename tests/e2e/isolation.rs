//! Issue 13 (findings 5, 6, 8) and issue 11 (item 9): what one local user
//! can do to the daemon and to other users' jobs, and what a job still
//! inherits from root. Tests that need other users skip, with a printed
//! reason, when not run as root.

use scored_tests::*;

/// The `keyring ID` line of a `scored-testprog keyring` run.
fn keyring_of(out: &str) -> Option<String> {
    out.lines()
        .find_map(|line| line.strip_prefix("keyring "))
        .map(str::to_string)
}

/// Issue 13, finding 8: every job gets a session keyring of its own, not
/// scored's (which it would possess, with every key in it) and not another
/// job's. scored inherits the test's session keyring, so the keyring of
/// the same program run here, without scrun, is scored's.
#[test]
fn r13_8_each_job_has_a_session_keyring_of_its_own() {
    let direct = std::process::Command::new(testprog())
        .arg("keyring")
        .output()
        .expect("run testprog");
    let Some(daemons) = keyring_of(&stdout(&direct)) else {
        panic!("testprog printed no keyring: {}", stdout(&direct));
    };
    if daemons == "none" {
        println!("skipped: this kernel has no session keyrings");
        return;
    }
    let daemon = Daemon::builder().hosts(&two_hosts()).start();
    let mut seen = vec![daemons.clone()];
    for _ in 0..2 {
        let output = daemon.run(&[&testprog(), "keyring"]);
        assert_eq!(code(&output), Some(0), "{}", stderr(&output));
        let job = keyring_of(&stdout(&output)).expect("the job printed its keyring");
        assert!(
            !seen.contains(&job),
            "a job's session keyring {job} is scored's ({daemons}) or another job's: {seen:?}"
        );
        seen.push(job);
    }
    let Some(users) = test_users("r13_8_each_job_has_a_session_keyring_of_its_own") else {
        return;
    };
    let output = daemon
        .scrun_as(&users.a, &[&testprog(), "keyring"])
        .output()
        .expect("scrun");
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let job = keyring_of(&stdout(&output)).expect("the job printed its keyring");
    assert!(
        !seen.contains(&job),
        "a plain user's job has keyring {job}, one of {seen:?}"
    );
    // And the kernel agrees on whose it is: the job's /proc/keys shows its
    // session keyring owned by the job's user.
    let output = daemon
        .scrun_as(&users.a, &["sh", "-c", "grep ' _ses:' /proc/keys || true"])
        .output()
        .expect("scrun");
    let listing = stdout(&output);
    let owned: Vec<&str> = listing
        .lines()
        .filter(|line| line.contains("keyring") && line.contains(" _ses:"))
        .collect();
    for line in &owned {
        let uid = line.split_whitespace().nth(5).unwrap_or("");
        assert_eq!(
            uid,
            users.a.uid.to_string(),
            "a plain user's job sees a session keyring of another uid: {line}"
        );
    }
    assert!(
        !owned.is_empty(),
        "the job sees no session keyring:\n{listing}"
    );
}
