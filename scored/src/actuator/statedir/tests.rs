//! The scratch directories: removal in slices that follows no link and
//! survives what is moved into the tree, and the size walk.

use super::*;

/// A fresh directory under the system's temporary directory.
fn scratch_root(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("scored-statedir-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).expect("mkdir");
    path
}

fn open_path(path: &Path) -> OwnedFd {
    nix::fcntl::open(path, DIR_FLAGS, Mode::empty()).expect("open")
}

#[test]
fn removal_follows_no_link_and_survives_deep_nesting() {
    let root = scratch_root("remove");
    let victim = root.join("victim");
    std::fs::create_dir(&victim).expect("mkdir");
    std::fs::write(victim.join("keep"), "x").expect("write");
    let tree = root.join("tree");
    let mut dir = tree.clone();
    for level in 0..(3 * MAX_REMOVE_DEPTH) {
        dir = dir.join(format!("d{level}"));
    }
    std::fs::create_dir_all(&dir).expect("deep tree");
    std::os::unix::fs::symlink(&victim, dir.join("link")).expect("symlink");
    std::os::unix::fs::symlink(&victim, tree.join("link")).expect("symlink");
    std::fs::write(dir.join("file"), "y").expect("write");
    let parent = open_path(&root);
    let uid = nix::unistd::geteuid().as_raw();
    remove_tree_at(parent.as_fd(), OsStr::new("tree"), uid).expect("remove");
    assert!(!tree.exists());
    assert!(victim.join("keep").exists());
    // Missing, or a plain file: both fine.
    remove_tree_at(parent.as_fd(), OsStr::new("tree"), uid).expect("remove nothing");
    std::fs::remove_dir_all(&root).expect("clean up");
}

#[test]
fn the_size_walk_resumes_and_counts_a_link_only_by_itself() {
    let root = scratch_root("walk");
    for idx in 0..50 {
        std::fs::write(root.join(format!("f{idx}")), [0u8; 100]).expect("write");
    }
    std::fs::create_dir(root.join("sub")).expect("mkdir");
    std::fs::write(root.join("sub/big"), vec![0u8; 10_000]).expect("write");
    std::os::unix::fs::symlink("/", root.join("sub/root")).expect("symlink");
    std::os::unix::fs::symlink("/usr", root.join("usr")).expect("symlink");
    // Every entry counts at least a block: 50 small files, the
    // directory, its big file and two links.
    let expected = 50 * ENTRY_BYTES + ENTRY_BYTES + 10_000 + 2 * ENTRY_BYTES;
    let mut walk = DiskWalk::default();
    let mut used = 0;
    let mut rounds = 0;
    let mut reported = Vec::new();
    // Ten entries a step: several steps per walk, each a lower bound.
    while walk.total == 0 {
        reported.push(walk.advance(|| Ok(open_path(&root)), 10, &mut used));
        rounds += 1;
        assert!(rounds < 100, "the walk never ends");
    }
    assert!(rounds > 3, "{rounds}");
    assert!(
        reported.iter().all(|size| *size <= expected),
        "{reported:?}"
    );
    assert_eq!(walk.last(), expected);
    assert!(used <= rounds * 10);
    // A new walk starts after a complete one; meanwhile the last total stands.
    assert_eq!(
        walk.advance(|| Ok(open_path(&root)), 1, &mut used),
        expected
    );
    std::fs::remove_dir_all(&root).expect("clean up");
}

/// A removal in slices removes at most its budget of entries per step,
/// and finishes even when directories are moved into the tree between
/// its steps (which made a one-shot removal fail with "Directory not
/// empty").
#[test]
fn a_removal_in_slices_survives_what_is_moved_into_the_tree() {
    let root = scratch_root("slices");
    let tree = root.join("tree");
    for dir in 0..20 {
        let sub = tree.join(format!("d{dir}/e"));
        std::fs::create_dir_all(&sub).expect("mkdir");
        for file in 0..50 {
            std::fs::write(sub.join(format!("f{file}")), b"").expect("write");
        }
    }
    let outside = root.join("outside");
    let parent = open_path(&root);
    let uid = nix::unistd::geteuid().as_raw();
    let mut removal = Removal::new(parent, "tree".into(), uid).expect("open");
    let mut steps = 0;
    let mut refilled = 0;
    while !removal.step(16).expect("a step") {
        steps += 1;
        assert!(steps < 10_000, "the removal never ends");
        // Keep moving prepared directories into the tree.
        if refilled < 10 && steps % 5 == 0 {
            std::fs::create_dir_all(outside.join("x/y")).expect("mkdir");
            std::fs::write(outside.join("x/y/z"), b"").expect("write");
            let into = (0..20)
                .map(|dir| tree.join(format!("d{dir}/e")))
                .find(|dir| dir.exists());
            if let Some(into) = into {
                if std::fs::rename(outside.join("x"), into.join(format!("m{refilled}"))).is_ok() {
                    refilled += 1;
                }
            }
        }
    }
    assert!(!tree.exists(), "the tree is gone");
    assert!(refilled > 0, "nothing was moved in");
    assert!(steps > 1_000 / 16, "{steps} steps for over 1,000 entries");
    assert!(removal.removed >= 20 * 52, "{}", removal.removed);
    std::fs::remove_dir_all(&root).expect("clean up");
}

#[test]
fn a_tree_of_many_entries_is_large_and_finished_in_one_call() {
    let root = scratch_root("large");
    let tree = root.join("tree");
    let files = LARGE_TREE_ENTRIES as usize + 100;
    std::fs::create_dir_all(tree.join("w")).expect("mkdir");
    for file in 0..files {
        std::fs::write(tree.join(format!("w/f{file}")), b"").expect("write");
    }
    let uid = nix::unistd::geteuid().as_raw();
    let mut removal = Removal::new(open_path(&root), "tree".into(), uid).expect("open");
    assert!(!removal.is_large(), "nothing is known of the tree yet");
    while !removal.is_large() {
        assert!(
            !removal.step(64).expect("a step"),
            "removed before it was large"
        );
    }
    assert!(tree.exists());
    removal.finish().expect("the rest");
    assert!(!tree.exists(), "the tree is gone");
    assert!(removal.removed as usize > files, "{}", removal.removed);
    std::fs::remove_dir_all(&root).expect("clean up");
}

#[test]
fn an_empty_scratch_tree_goes_at_once_and_a_full_one_is_taken_away() {
    let root = scratch_root("take");
    let uid = nix::unistd::geteuid().as_raw();
    let state = StateDir::open(&root, uid).expect("open the state directory");
    let (empty, full) = (JobId(1), JobId(2));
    let empty_path = state.create_scratch(empty, None).expect("scratch");
    let full_path = state.create_scratch(full, None).expect("scratch");
    std::fs::write(full_path.join("left"), "x").expect("write");
    assert!(state.take_scratch(empty, None).expect("take").is_none());
    assert!(!empty_path.exists());
    let mut removal = state
        .take_scratch(full, Some(uid))
        .expect("take")
        .expect("a tree to remove");
    assert!(!full_path.exists());
    removal.finish().expect("remove");
    assert!(state.unfinished_removals().is_empty());
    std::fs::remove_dir_all(&root).expect("clean up");
}

/// An empty scratch directory is kept for its user's next job, taken back
/// meanwhile (scored's, mode 0700); never for another user's job, nor
/// once it holds anything.
#[test]
fn an_empty_scratch_directory_goes_to_its_users_next_job_only() {
    use std::os::unix::fs::MetadataExt;
    let root = scratch_root("spare");
    let uid = nix::unistd::geteuid().as_raw();
    let state = StateDir::open(&root, uid).expect("open the state directory");
    // As root, the jobs are another user's, as a root daemon's are.
    let (user, other) = if uid == 0 { (4242, 4343) } else { (uid, uid) };
    let owner = |user: u32| (uid == 0).then_some((user, user));
    let first = state
        .create_scratch(JobId(1), owner(user))
        .expect("scratch");
    let inode = std::fs::metadata(&first).expect("stat").ino();
    assert!(state
        .take_scratch(JobId(1), Some(user))
        .expect("take")
        .is_none());
    assert!(!first.exists());
    let spare = std::fs::metadata(root.join("jobs/.spare-0")).expect("the spare");
    assert_eq!((spare.uid(), spare.mode() & 0o7777), (uid, 0o700));
    if uid == 0 {
        let theirs = state
            .create_scratch(JobId(2), owner(other))
            .expect("scratch");
        assert_ne!(std::fs::metadata(&theirs).expect("stat").ino(), inode);
    }
    let next = state
        .create_scratch(JobId(3), owner(user))
        .expect("scratch");
    let meta = std::fs::metadata(&next).expect("stat");
    assert_eq!(meta.ino(), inode, "the spare was not used");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (user, 0o700));
    assert!(!root.join("jobs/.spare-0").exists());
    // One that holds something is taken away, not kept.
    std::fs::write(next.join("left"), "x").expect("write");
    let mut removal = state
        .take_scratch(JobId(3), Some(user))
        .expect("take")
        .expect("a tree to remove");
    removal.finish().expect("remove");
    assert!(!root.join("jobs/.spare-0").exists());
    // A new daemon does not know the spares of the one before.
    let _ = state
        .create_scratch(JobId(4), owner(user))
        .expect("scratch");
    assert!(state
        .take_scratch(JobId(4), Some(user))
        .expect("take")
        .is_none());
    assert!(root.join("jobs/.spare-0").exists());
    drop(state);
    let _state = StateDir::open(&root, uid).expect("open again");
    assert!(!root.join("jobs/.spare-0").exists());
    std::fs::remove_dir_all(&root).expect("clean up");
}
