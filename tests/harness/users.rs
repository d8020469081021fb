//! Other users for the tests of rights and isolation: created once, when
//! the tests run as root, in a group of their own.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::is_root;

/// A local user made for the tests.
#[derive(Debug, Clone)]
pub struct TestUser {
    /// Its login name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// The users and group of the tests that need several users: `a` belongs
/// to `group` as a supplementary group, `b` does not.
#[derive(Debug, Clone)]
pub struct TestUsers {
    /// User `scored-test-a`, in the group.
    pub a: TestUser,
    /// User `scored-test-b`, not in the group.
    pub b: TestUser,
    /// Group `scored-test-g`: its gid.
    pub group: u32,
}

/// The name of the group only user `a` is in.
pub const TEST_GROUP: &str = "scored-test-g";

/// Runs an administration command, retrying while another process holds
/// the lock of the user database (parallel test binaries may add users too).
fn admin(program: &str, args: &[&str]) {
    let mut last = String::new();
    for _ in 0..50 {
        let output = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
        if output.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&output.stderr).into_owned();
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{program} {args:?} failed: {last}");
}

fn lookup_user(name: &str) -> Option<TestUser> {
    let user = nix::unistd::User::from_name(name).ok().flatten()?;
    Some(TestUser {
        name: name.to_string(),
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    })
}

fn supplementary_groups(name: &str) -> Vec<u32> {
    let output = Command::new("id")
        .args(["-G", name])
        .output()
        .expect("run id");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|gid| gid.parse().ok())
        .collect()
}

/// Creates (once, idempotently) the test users and group. `None`, with a
/// printed reason, when the tests do not run as root.
pub fn test_users(test: &str) -> Option<TestUsers> {
    if !is_root() {
        println!("skipped: {test} needs root (to create users and run their jobs)");
        return None;
    }
    static USERS: OnceLock<TestUsers> = OnceLock::new();
    let users = USERS.get_or_init(|| {
        if nix::unistd::Group::from_name(TEST_GROUP)
            .ok()
            .flatten()
            .is_none()
        {
            admin("groupadd", &["-f", TEST_GROUP]);
        }
        let group = nix::unistd::Group::from_name(TEST_GROUP)
            .ok()
            .flatten()
            .expect("the test group exists")
            .gid
            .as_raw();
        for (name, in_group) in [("scored-test-a", true), ("scored-test-b", false)] {
            if lookup_user(name).is_none() {
                let mut args = vec!["-M", "-U", "-s", "/usr/sbin/nologin"];
                if in_group {
                    args.extend(["-G", TEST_GROUP]);
                }
                args.push(name);
                admin("useradd", &args);
            }
            // A user left by an earlier run may have other groups: fix them.
            let member = supplementary_groups(name).contains(&group);
            if in_group && !member {
                admin("usermod", &["-a", "-G", TEST_GROUP, name]);
            } else if !in_group && member {
                admin("gpasswd", &["-d", name, TEST_GROUP]);
            }
        }
        TestUsers {
            a: lookup_user("scored-test-a").expect("user a exists"),
            b: lookup_user("scored-test-b").expect("user b exists"),
            group,
        }
    });
    Some(users.clone())
}

/// `program args` run as `user` with the user's primary and supplementary
/// groups (util-linux `setpriv --init-groups`).
pub fn command_as(user: &TestUser, program: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    crate::without_stray_descriptors(&mut command);
    command
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .arg("--init-groups")
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::null());
    command
}
