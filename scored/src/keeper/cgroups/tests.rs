//! A keeper's removal of its job's cgroups, on the machine's cgroup v1
//! freezer hierarchy (skipped, and said, where it is not writable): only
//! the directories noted at the order go, only when empty, and nothing
//! off a cgroup file system.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::JobCgroups;

/// A daemon's directory made for a test in the freezer hierarchy, with
/// everything the test made in it removed at its end.
struct Made {
    daemon: PathBuf,
}

impl Made {
    fn new(test: &str) -> Option<Made> {
        static N: AtomicU32 = AtomicU32::new(0);
        let root = Path::new("/sys/fs/cgroup/freezer");
        let daemon = root.join(format!(
            "scored-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(error) = fs::create_dir(&daemon) {
            eprintln!("{test}: skipped, no writable freezer hierarchy ({error})");
            return None;
        }
        Some(Made { daemon })
    }

    /// Makes `job-N` in it; its join file.
    fn job(&self, job: u64) -> PathBuf {
        let dir = self.daemon.join(format!("job-{job}"));
        fs::create_dir(&dir).expect("make a job's cgroup");
        dir.join("tasks")
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if let Ok(entries) = fs::read_dir(&self.daemon) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    let _ = fs::remove_dir(entry.path());
                }
            }
        }
        let _ = fs::remove_dir(&self.daemon);
    }
}

#[test]
fn the_job_cgroup_goes_and_the_empty_daemon_directory_with_it() {
    let Some(made) = Made::new("the_job_cgroup_goes_and_the_empty_daemon_directory_with_it") else {
        return;
    };
    let join = made.job(7);
    let cgroups = JobCgroups::open(7, &[&join]);
    cgroups.remove(None, false);
    assert!(!join.parent().unwrap().exists(), "the job's cgroup stayed");
    assert!(!made.daemon.exists(), "the empty daemon's directory stayed");
}

#[test]
fn another_jobs_cgroup_keeps_the_daemon_directory() {
    let Some(made) = Made::new("another_jobs_cgroup_keeps_the_daemon_directory") else {
        return;
    };
    let join = made.job(7);
    let other = made.job(8);
    JobCgroups::open(7, &[&join]).remove(None, false);
    assert!(!join.parent().unwrap().exists(), "the job's cgroup stayed");
    assert!(
        other.parent().unwrap().is_dir(),
        "another job's cgroup went"
    );
    assert!(made.daemon.is_dir());
}

#[test]
fn a_live_daemon_keeps_its_directory() {
    let Some(made) = Made::new("a_live_daemon_keeps_its_directory") else {
        return;
    };
    let state = std::env::temp_dir().join(format!("scored-cgroups-state-{}", std::process::id()));
    fs::create_dir_all(&state).expect("a state directory");
    // This process stands for the daemon that owns the state directory.
    crate::instance::claim(&state).expect("claim");
    let join = made.job(7);
    JobCgroups::open(7, &[&join]).remove(Some(&state), false);
    let kept = made.daemon.is_dir();
    let _ = fs::remove_dir_all(&state);
    assert!(!join.parent().unwrap().exists(), "the job's cgroup stayed");
    assert!(kept, "a live daemon's directory was removed");
}

#[test]
fn a_live_daemons_spare_is_kept_and_a_dead_ones_removed() {
    let Some(made) = Made::new("a_live_daemons_spare_is_kept_and_a_dead_ones_removed") else {
        return;
    };
    let state = std::env::temp_dir().join(format!("scored-cgroups-spare-{}", std::process::id()));
    fs::create_dir_all(&state).expect("a state directory");
    crate::instance::claim(&state).expect("claim");
    let join = made.job(7);
    let cgroups = JobCgroups::open(7, &[&join]);
    cgroups.remove(Some(&state), true);
    let kept = join.parent().unwrap().is_dir();
    crate::instance::release(&state);
    cgroups.remove(Some(&state), true);
    let _ = fs::remove_dir_all(&state);
    assert!(kept, "a live daemon's spare cgroup was removed");
    assert!(
        !join.parent().unwrap().exists(),
        "a dead daemon's spare cgroup stayed"
    );
    assert!(!made.daemon.exists(), "the empty daemon's directory stayed");
}

#[test]
fn a_cgroup_renamed_into_the_jobs_place_is_not_removed() {
    let Some(made) = Made::new("a_cgroup_renamed_into_the_jobs_place_is_not_removed") else {
        return;
    };
    let join = made.job(7);
    let cgroups = JobCgroups::open(7, &[&join]);
    let job = join.parent().unwrap().to_path_buf();
    let moved = made.daemon.join("job-moved");
    fs::rename(&job, &moved).expect("rename the job's cgroup");
    fs::create_dir(&job).expect("another cgroup in its place");
    cgroups.remove(None, false);
    assert!(
        job.is_dir(),
        "the cgroup put in the job's place was removed"
    );
    assert!(
        moved.is_dir(),
        "the renamed cgroup was removed by another name"
    );
    assert!(made.daemon.is_dir());
}

#[test]
fn nothing_off_a_cgroup_file_system_is_removed() {
    let dir = std::env::temp_dir().join(format!("scored-cgroups-off-{}", std::process::id()));
    let job = dir.join("scored-00000000/job-7");
    fs::create_dir_all(&job).expect("a tree like a cgroup's");
    JobCgroups::open(7, &[&job.join("tasks")]).remove(None, false);
    let kept = job.is_dir();
    let _ = fs::remove_dir_all(&dir);
    assert!(kept, "a directory off a cgroup file system was removed");
}

#[test]
fn only_the_keepers_own_job_is_held() {
    let Some(made) = Made::new("only_the_keepers_own_job_is_held") else {
        return;
    };
    let join = made.job(7);
    JobCgroups::open(8, &[&join]).remove(None, false);
    assert!(
        join.parent().unwrap().is_dir(),
        "another job's cgroup was removed"
    );
}

#[test]
fn a_daemon_that_is_exiting_owns_nothing() {
    let line = |flags: u64| {
        format!("42 (scored (x) y) R 1 42 42 0 -1 {flags} 100 0 0 0 5 3 0 0 20 0 1 0 777 1000 200")
    };
    assert!(!super::exiting(&line(0x0040_0000)));
    assert!(super::exiting(&line(0x0040_0004)));
    assert!(super::exiting("garbage"));
    let own = fs::read_to_string("/proc/self/stat").expect("stat");
    assert!(!super::exiting(&own), "{own}");
}
