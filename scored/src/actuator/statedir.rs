//! The state directory and its `jobs` directory, held open for the life of
//! the daemon, and everything done inside them: creating, handing over and
//! removing jobs' scratch directories, and measuring their size.
//!
//! Users own their scratch directories, so whatever is inside one may be
//! swapped for a symbolic link at any moment. Nothing here ever resolves a
//! path through a directory a user can write: every step is relative to a
//! handle opened with `O_NOFOLLOW` (`openat`, `mkdirat`, `unlinkat`,
//! `fstatat` with `AT_SYMLINK_NOFOLLOW`), and ownership and modes are set on
//! a handle (`fchown`, `fchmod`) after checking that it is the directory we
//! made. A scratch tree is removed, and measured, by walking those handles,
//! never by path.
//!
//! A finished job's scratch directory that is empty once taken back (made
//! scored's, mode 0700, so that nothing more can be made in it) is kept as
//! `jobs/.spare-K` for the next job of the same user, which renames it to
//! its own: making and removing a directory cost an array element far more
//! than two renames. It never goes to another user, who could otherwise
//! watch it through a descriptor its last owner kept.
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::dir::{Dir, OwningIter};
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fchown, unlinkat, Gid, Uid, UnlinkatFlags};

use scored_core::ids::JobId;

/// How deep the size walk goes; deeper directories are not opened (each
/// level holds a descriptor while it is walked).
pub const MAX_WALK_DEPTH: usize = 64;
/// What each entry of a scratch tree counts at least towards the job's disk
/// use (a block): directories, empty files, links and the rest cost an
/// inode and a directory entry, and a tree of many of them costs the
/// daemon time to remove, so the disk limit caps their number too.
pub const ENTRY_BYTES: u64 = 4096;
/// How deep the removal walk holds descriptors; a deeper directory is moved
/// up to the top of the tree being removed and removed from there.
const MAX_REMOVE_DEPTH: usize = 64;
/// Where finished jobs' scratch trees wait for their removal, in the state
/// directory: the daemon's own, mode 0700, so that no user reaches a tree
/// by its path once it is there.
pub const REMOVING: &str = "removing";
/// How many empty scratch directories of finished jobs are kept for later
/// jobs, as `jobs/.spare-K` (K below this).
const SPARES: usize = 8;
/// The passes a removal makes over a tree that keeps being refilled (by a
/// process outside the job holding a directory of it open) before it is
/// left for the next start of the daemon.
const MAX_REMOVE_PASSES: u32 = 100;

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Opens the directory `name` in `parent` without following a symbolic link.
fn open_dir_at(
    parent: BorrowedFd<'_>,
    name: &(impl nix::NixPath + ?Sized),
) -> nix::Result<OwnedFd> {
    openat(parent, name, DIR_FLAGS, Mode::empty())
}

/// Explains an open that failed, naming the path. (With `O_DIRECTORY`, a
/// symbolic link fails as "not a directory": look again to say which.)
/// Why the state directory or its `jobs` directory cannot be used.
#[derive(Debug)]
pub enum StateDirError {
    /// A directory could not be created.
    Create {
        /// The directory that could not be made.
        path: PathBuf,
        /// It is the state directory itself (not `jobs`).
        state_dir: bool,
        /// What the kernel said.
        source: io::Error,
    },
    /// The path is a symbolic link.
    SymbolicLink(PathBuf),
    /// The path is not a directory.
    NotDirectory(PathBuf),
    /// The directory could not be opened.
    Open {
        /// The directory that could not be opened.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The open directory could not be inspected.
    Inspect {
        /// The directory that could not be inspected.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// It belongs to another user than the daemon's or root.
    Owner {
        /// The directory of another owner.
        path: PathBuf,
        /// The uid that owns it.
        uid: u32,
    },
    /// Other users may write it.
    Writable {
        /// The directory others may write.
        path: PathBuf,
        /// Its permission bits, as `ls` would show them.
        mode: u32,
    },
    /// It has the sticky bit where that is refused.
    Sticky {
        /// The sticky directory.
        path: PathBuf,
        /// Its permission bits, as `ls` would show them.
        mode: u32,
    },
}

impl std::fmt::Display for StateDirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateDirError::Create {
                path,
                state_dir: true,
                source,
            } => write!(
                f,
                "cannot create the state directory {}: {source}",
                path.display()
            ),
            StateDirError::Create { path, source, .. } => {
                write!(f, "cannot create {}: {source}", path.display())
            }
            StateDirError::SymbolicLink(path) => {
                write!(f, "refusing {}: it is a symbolic link", path.display())
            }
            StateDirError::NotDirectory(path) => {
                write!(f, "refusing {}: it is not a directory", path.display())
            }
            StateDirError::Open { path, source } => {
                write!(f, "cannot open {}: {source}", path.display())
            }
            StateDirError::Inspect { path, source } => {
                write!(f, "cannot inspect {}: {source}", path.display())
            }
            StateDirError::Owner { path, uid } => {
                write!(f, "refusing {}: it belongs to uid {uid}", path.display())
            }
            StateDirError::Writable { path, mode } => write!(
                f,
                "refusing {}: it is writable by other users (mode {mode:o})",
                path.display()
            ),
            StateDirError::Sticky { path, mode } => write!(
                f,
                "refusing {}: it has the sticky bit (mode {mode:o}), a directory shared with other users",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StateDirError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StateDirError::Create { source, .. }
            | StateDirError::Open { source, .. }
            | StateDirError::Inspect { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn open_error(path: &Path, errno: Errno) -> StateDirError {
    let is_link =
        || std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink());
    match errno {
        Errno::ELOOP => StateDirError::SymbolicLink(path.to_path_buf()),
        Errno::ENOTDIR if is_link() => StateDirError::SymbolicLink(path.to_path_buf()),
        Errno::ENOTDIR => StateDirError::NotDirectory(path.to_path_buf()),
        other => StateDirError::Open {
            path: path.to_path_buf(),
            source: io::Error::from(other),
        },
    }
}

/// Checks that only `uid` (or root) can change the entries of an open
/// directory: it belongs to one of them and nobody else may write it,
/// unless `sticky_ok` and it has the sticky bit (as /tmp).
fn check_handle(
    fd: BorrowedFd<'_>,
    path: &Path,
    uid: u32,
    sticky_ok: bool,
) -> Result<FileStat, StateDirError> {
    let stat = fstat(fd).map_err(|errno| StateDirError::Inspect {
        path: path.to_path_buf(),
        source: io::Error::from(errno),
    })?;
    if stat.st_uid != uid && stat.st_uid != 0 {
        return Err(StateDirError::Owner {
            path: path.to_path_buf(),
            uid: stat.st_uid,
        });
    }
    let mode = stat.st_mode & 0o7777;
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !(sticky_ok && sticky) {
        return Err(StateDirError::Writable {
            path: path.to_path_buf(),
            mode,
        });
    }
    if sticky && !sticky_ok {
        return Err(StateDirError::Sticky {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(stat)
}

fn same_file(a: &FileStat, b: &FileStat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// The state directory and its `jobs` directory, open.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    uid: u32,
    state: OwnedFd,
    jobs: OwnedFd,
    /// The spare scratch directories: slot K (`jobs/.spare-K`) and the
    /// user whose job had it last.
    spares: RefCell<Vec<(usize, u32)>>,
}

/// The name of spare slot `slot` in `jobs`.
fn spare_name(slot: usize) -> String {
    format!(".spare-{slot}")
}

impl StateDir {
    /// Creates (where missing) and opens the state directory and its `jobs`
    /// directory, and checks them: both must belong to the daemon's user or
    /// root and be writable by nobody else. A root daemon also refuses a
    /// sticky state directory (one shared with other users, as under
    /// /tmp); another user's daemon accepts one, since its `jobs` directory
    /// is checked on its own.
    pub fn open(path: &Path, uid: u32) -> Result<StateDir, StateDirError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(if uid == 0 { 0o755 } else { 0o700 })
            .create(path)
            .map_err(|source| StateDirError::Create {
                path: path.to_path_buf(),
                state_dir: true,
                source,
            })?;
        let state = nix::fcntl::open(path, DIR_FLAGS, Mode::empty())
            .map_err(|errno| open_error(path, errno))?;
        check_handle(state.as_fd(), path, uid, uid != 0)?;
        let jobs_path = path.join("jobs");
        match mkdirat(state.as_fd(), "jobs", Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(errno) => {
                return Err(StateDirError::Create {
                    path: jobs_path,
                    state_dir: false,
                    source: io::Error::from(errno),
                })
            }
        }
        let jobs =
            open_dir_at(state.as_fd(), "jobs").map_err(|errno| open_error(&jobs_path, errno))?;
        // Scratch directories are created, and handed to users, in here.
        check_handle(jobs.as_fd(), &jobs_path, uid, false)?;
        // The keepers' sockets: only the daemon's user may enter, so that
        // nobody else can reach a keeper or put a socket in its place.
        let keepers_path = path.join(crate::keeper::SOCKETS);
        match mkdirat(
            state.as_fd(),
            crate::keeper::SOCKETS,
            Mode::from_bits_truncate(0o700),
        ) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(errno) => {
                return Err(StateDirError::Create {
                    path: keepers_path,
                    state_dir: false,
                    source: io::Error::from(errno),
                })
            }
        }
        let keepers = open_dir_at(state.as_fd(), crate::keeper::SOCKETS)
            .map_err(|errno| open_error(&keepers_path, errno))?;
        let stat = check_handle(keepers.as_fd(), &keepers_path, uid, false)?;
        if stat.st_uid == uid && stat.st_mode & 0o077 != 0 {
            fchmod(keepers.as_fd(), Mode::from_bits_truncate(0o700)).map_err(|errno| {
                StateDirError::Inspect {
                    path: keepers_path.clone(),
                    source: io::Error::from(errno),
                }
            })?;
        }
        // Spares an earlier daemon kept are not known to this one.
        for slot in 0..SPARES {
            let _ = unlinkat(
                jobs.as_fd(),
                spare_name(slot).as_str(),
                UnlinkatFlags::RemoveDir,
            );
        }
        Ok(StateDir {
            path: path.to_path_buf(),
            uid,
            state,
            jobs,
            spares: RefCell::new(Vec::new()),
        })
    }

    /// The state directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that the open directories are still the ones at their paths,
    /// and opens (creating what is missing, with the same checks) what was
    /// removed or replaced while the daemon ran; says whether it did. The
    /// error names the path.
    pub fn ensure(&mut self) -> Result<bool, StateDirError> {
        let state_now = std::fs::symlink_metadata(&self.path).ok();
        let state_held = fstat(self.state.as_fd()).ok();
        let state_ok = match (&state_now, &state_held) {
            (Some(now), Some(held)) => now.dev() == held.st_dev && now.ino() == held.st_ino,
            _ => false,
        };
        let jobs_ok = state_ok
            && match (
                fstatat(
                    self.state.as_fd(),
                    "jobs",
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                ),
                fstat(self.jobs.as_fd()),
            ) {
                (Ok(now), Ok(held)) => same_file(&now, &held),
                _ => false,
            };
        if jobs_ok {
            return Ok(false);
        }
        *self = StateDir::open(&self.path, self.uid)?;
        Ok(true)
    }

    /// The directory of the keepers' sockets.
    pub fn keepers_path(&self) -> PathBuf {
        self.path.join(crate::keeper::SOCKETS)
    }

    /// The path of job `job`'s scratch directory.
    pub fn scratch_path(&self, job: JobId) -> PathBuf {
        self.path.join("jobs").join(job.to_string())
    }

    /// Creates job `job`'s scratch directory, mode 0700, owned by `owner`
    /// (uid, gid) when given, and returns its path. A leftover of an
    /// earlier daemon with the same job id is removed first.
    pub fn create_scratch(&self, job: JobId, owner: Option<(u32, u32)>) -> io::Result<PathBuf> {
        let name = job.to_string();
        let mode = Mode::from_bits_truncate(0o700);
        let user = owner.map_or(self.uid, |(uid, _)| uid);
        let made = if self.take_spare(user, &name) {
            Ok(())
        } else {
            mkdirat(self.jobs.as_fd(), name.as_str(), mode)
        };
        match made {
            Ok(()) => {}
            Err(Errno::EEXIST) => {
                remove_tree_at(self.jobs.as_fd(), OsStr::new(&name), self.uid)?;
                mkdirat(self.jobs.as_fd(), name.as_str(), mode)?;
            }
            Err(errno) => return Err(errno.into()),
        }
        let scratch = open_dir_at(self.jobs.as_fd(), name.as_str())?;
        // Only we can write `jobs`, so this is the directory just made; the
        // check keeps it so should that ever stop being true.
        let stat = fstat(scratch.as_fd())?;
        if stat.st_uid != self.uid {
            return Err(io::Error::other(format!(
                "{} belongs to uid {}, not to scored",
                self.scratch_path(job).display(),
                stat.st_uid
            )));
        }
        fchmod(scratch.as_fd(), mode)?;
        if let Some((uid, gid)) = owner {
            fchown(
                scratch.as_fd(),
                Some(Uid::from_raw(uid)),
                Some(Gid::from_raw(gid)),
            )?;
        }
        Ok(self.scratch_path(job))
    }

    /// Renames a spare scratch directory of `user`'s, if there is one, to
    /// `name`; whether it did. One that cannot be is removed.
    fn take_spare(&self, user: u32, name: &str) -> bool {
        let mut spares = self.spares.borrow_mut();
        let Some(at) = spares.iter().position(|(_, owner)| *owner == user) else {
            return false;
        };
        let (slot, _) = spares.swap_remove(at);
        let spare = spare_name(slot);
        let renamed = nix::fcntl::renameat2(
            self.jobs.as_fd(),
            spare.as_str(),
            self.jobs.as_fd(),
            name,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        );
        if renamed.is_err() {
            let _ = unlinkat(self.jobs.as_fd(), spare.as_str(), UnlinkatFlags::RemoveDir);
        }
        renamed.is_ok()
    }

    /// Keeps job `job`'s scratch directory, `user`'s, as a spare if there
    /// is room and it is empty once taken back; whether it did. Only
    /// scored may write `jobs`, so the entry is the directory scored made;
    /// taken back (scored's, mode 0700), nobody else can make anything in
    /// it, so one found empty then stays empty.
    fn keep_spare(&self, job: &str, user: u32) -> bool {
        let mut spares = self.spares.borrow_mut();
        let Some(slot) = (0..SPARES).find(|slot| spares.iter().all(|(kept, _)| kept != slot))
        else {
            return false;
        };
        let Ok(dir) = open_dir_at(self.jobs.as_fd(), job) else {
            return false;
        };
        if take_dir(dir.as_fd(), self.uid).is_err() || !is_empty(dir) {
            return false;
        }
        let renamed = nix::fcntl::renameat2(
            self.jobs.as_fd(),
            job,
            self.jobs.as_fd(),
            spare_name(slot).as_str(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        );
        if renamed.is_err() {
            return false;
        }
        spares.push((slot, user));
        true
    }

    /// Opens (creating it if missing) the directory where trees wait for
    /// their removal, checked as the state directory is.
    fn removing_dir(&self) -> io::Result<OwnedFd> {
        match mkdirat(
            self.state.as_fd(),
            REMOVING,
            Mode::from_bits_truncate(0o700),
        ) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
        let dir = open_dir_at(self.state.as_fd(), REMOVING)?;
        let stat = fstat(dir.as_fd())?;
        if stat.st_uid != self.uid || stat.st_mode & 0o077 != 0 {
            return Err(io::Error::other(format!(
                "{} is not scored's own private directory",
                self.path.join(REMOVING).display()
            )));
        }
        Ok(dir)
    }

    /// Takes job `job`'s scratch tree away from its user, first thing: it
    /// is renamed into `STATE_DIR/removing` (which only scored may enter)
    /// and its top given to scored, mode 0700, so that nothing more can be
    /// made in it by path, and the removal that follows, in slices, works
    /// on what scored holds. `None` when the job has no tree, or an empty
    /// one, kept for the next job of user `keep_for` (whose it was: the
    /// owner [`StateDir::create_scratch`] gave it, or scored's user) or
    /// removed at once.
    pub fn take_scratch(&self, job: JobId, keep_for: Option<u32>) -> io::Result<Option<Removal>> {
        let name = job.to_string();
        if keep_for.is_some_and(|user| self.keep_spare(&name, user)) {
            return Ok(None);
        }
        // An empty tree (most jobs leave nothing) goes at once: only
        // scored may write `jobs`, so the entry is the directory scored
        // made, and one that is empty holds nothing to take.
        match unlinkat(self.jobs.as_fd(), name.as_str(), UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => return Ok(None),
            Err(_) => {}
        }
        let removing = self.removing_dir()?;
        let mut attempt = 0u32;
        let target = loop {
            let target = if attempt == 0 {
                name.clone()
            } else {
                format!("{name}.{attempt}")
            };
            match nix::fcntl::renameat2(
                self.jobs.as_fd(),
                name.as_str(),
                removing.as_fd(),
                target.as_str(),
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => break target,
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::EEXIST) if attempt < 1000 => attempt += 1,
                Err(errno) => return Err(errno.into()),
            }
        };
        let removal = Removal::new(removing, target, self.uid)?;
        if let Some(top) = &removal.top {
            // Only scored can write `jobs`, so the tree is a directory, ours
            // to take: its top becomes the daemon's.
            take_dir(top.as_fd(), self.uid)?;
        }
        Ok(Some(removal))
    }

    /// The removals a daemon left unfinished in `STATE_DIR/removing` (it
    /// restarted in place, or gave up on a tree that kept being refilled).
    pub fn unfinished_removals(&self) -> Vec<Removal> {
        let Ok(removing) = open_dir_at(self.state.as_fd(), REMOVING) else {
            return Vec::new();
        };
        let Ok(dup) = removing.try_clone() else {
            return Vec::new();
        };
        let Ok(dir) = Dir::from_fd(dup) else {
            return Vec::new();
        };
        let names: Vec<String> = dir
            .into_iter()
            .flatten()
            .filter(|entry| !is_dot(entry.file_name()))
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names
            .into_iter()
            .filter_map(|name| {
                let parent = removing.try_clone().ok()?;
                Removal::new(parent, name, self.uid).ok()
            })
            .collect()
    }

    /// Opens job `job`'s scratch directory for a size walk.
    pub fn open_scratch(&self, job: JobId) -> io::Result<OwnedFd> {
        Ok(open_dir_at(self.jobs.as_fd(), job.to_string().as_str())?)
    }
}

/// One directory being read, with a second descriptor of it for the `*at`
/// calls on its entries.
struct OpenDir {
    entries: OwningIter,
    fd: OwnedFd,
}

impl OpenDir {
    fn new(fd: OwnedFd) -> io::Result<OpenDir> {
        let dup = fd.try_clone()?;
        Ok(OpenDir {
            entries: Dir::from_fd(fd)?.into_iter(),
            fd: dup,
        })
    }
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

/// Removes `name` in `parent` and, if it is a directory, everything below
/// it, at once: a [`Removal`] run to its end, so walking with handles and
/// never following a symbolic link. Each directory is made `uid`'s as the
/// walk enters it.
pub fn remove_tree_at(parent: BorrowedFd<'_>, name: &OsStr, uid: u32) -> io::Result<()> {
    let parent = parent.try_clone_to_owned()?;
    Removal::new(parent, name.to_string_lossy().into_owned(), uid)?.finish()
}

/// The removal of one tree, a slice at a time: each call of [`Removal::step`]
/// removes at most a given number of entries and returns, so that a tree of
/// a million files never holds the loop. It walks
/// handles and never follows a link; a directory that is not empty when its
/// walk ends (something was moved into it meanwhile) is walked again in the
/// next pass, rather than failing.
pub struct Removal {
    parent: OwnedFd,
    name: String,
    /// The tree's top, `None` for a file (removed at the first step).
    top: Option<OwnedFd>,
    stack: Vec<OpenDir>,
    /// Names of directories to remove once their walk ends, per level.
    names: Vec<std::ffi::CString>,
    moved: u64,
    /// The pass under way found work that needs another one.
    again: bool,
    passes: u32,
    /// The daemon's uid: each directory is made its own (mode 0700) as the
    /// walk enters it, so that a process outside the job that holds one
    /// open (its working directory) can no longer add to it.
    uid: u32,
    /// Entries removed so far.
    pub removed: u64,
    /// A directory of the tree is large (see [`Removal::is_large`]).
    large_dir: bool,
}

/// A tree with more entries than this is removed by a child process
/// rather than in the event loop's slices (see [`Removal::is_large`]).
pub const LARGE_TREE_ENTRIES: u64 = 4096;
/// A directory whose own size (its entry blocks, which the file system
/// keeps after its entries go) exceeds this makes its tree large: reading
/// it once emptied, or removing it, is one system call that can take most
/// of a second on ext4.
const LARGE_DIR_BYTES: i64 = 1 << 20;

fn is_large_dir(dir: BorrowedFd<'_>) -> bool {
    fstat(dir).is_ok_and(|stat| stat.st_size > LARGE_DIR_BYTES)
}

impl std::fmt::Debug for Removal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Removal")
            .field("name", &self.name)
            .field("depth", &self.stack.len())
            .field("passes", &self.passes)
            .field("removed", &self.removed)
            .finish()
    }
}

impl Removal {
    /// The removal of `name` in `parent`.
    fn new(parent: OwnedFd, name: String, uid: u32) -> io::Result<Removal> {
        let top = match open_dir_at(parent.as_fd(), name.as_str()) {
            Ok(fd) => Some(fd),
            Err(Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT) => None,
            Err(errno) => return Err(errno.into()),
        };
        let large_dir = top.as_ref().is_some_and(|top| is_large_dir(top.as_fd()));
        Ok(Removal {
            large_dir,
            parent,
            name,
            top,
            stack: Vec::new(),
            names: Vec::new(),
            moved: 0,
            again: false,
            passes: 0,
            uid,
            removed: 0,
        })
    }

    /// The directory the tree is in, its name there and the daemon's uid:
    /// what a process of its own needs to remove the rest
    /// ([`remove_inherited`]).
    pub fn whereabouts(&self) -> (std::os::fd::RawFd, &str, u32) {
        use std::os::fd::AsRawFd;
        (self.parent.as_raw_fd(), &self.name, self.uid)
    }

    /// The tree's name in its parent, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the rest of the removal should go to a child process: the
    /// tree has had more than [`LARGE_TREE_ENTRIES`] entries, or holds a
    /// directory large enough that one system call on it could hold the
    /// loop. Small trees, nearly every job's, are removed in the loop.
    pub fn is_large(&self) -> bool {
        self.large_dir || self.removed > LARGE_TREE_ENTRIES
    }

    /// Removes the whole tree, for the child process that takes a large
    /// one: `Ok(())` once it is gone.
    pub fn finish(&mut self) -> io::Result<()> {
        while !self.step(usize::MAX)? {}
        Ok(())
    }

    /// Removes at most `budget` entries; `Ok(true)` once the tree is gone.
    pub fn step(&mut self, budget: usize) -> io::Result<bool> {
        let Some(top) = &self.top else {
            return match unlinkat(
                self.parent.as_fd(),
                self.name.as_str(),
                UnlinkatFlags::NoRemoveDir,
            ) {
                Ok(()) | Err(Errno::ENOENT) => Ok(true),
                Err(errno) => Err(errno.into()),
            };
        };
        let mut spent = 0usize;
        loop {
            if self.stack.is_empty() {
                if self.passes > 0 && !self.again {
                    match unlinkat(
                        self.parent.as_fd(),
                        self.name.as_str(),
                        UnlinkatFlags::RemoveDir,
                    ) {
                        Ok(()) | Err(Errno::ENOENT) => return Ok(true),
                        Err(Errno::ENOTEMPTY | Errno::EEXIST) => {}
                        Err(errno) => return Err(errno.into()),
                    }
                }
                if self.passes >= MAX_REMOVE_PASSES {
                    return Err(io::Error::other(format!(
                        "still refilled after {MAX_REMOVE_PASSES} passes; left for the next start"
                    )));
                }
                // A new open of the top each pass, so that its reading
                // starts over and sees what was moved into it.
                self.stack
                    .push(OpenDir::new(open_dir_at(top.as_fd(), ".")?)?);
                self.names.clear();
                self.again = false;
                self.passes += 1;
            }
            if spent >= budget {
                return Ok(false);
            }
            let depth = self.stack.len();
            let current = self.stack.last_mut().expect("not empty");
            let Some(entry) = current.entries.next() else {
                self.stack.pop();
                if let (Some(dir_name), Some(up)) = (self.names.pop(), self.stack.last()) {
                    spent += 1;
                    match unlinkat(up.fd.as_fd(), dir_name.as_c_str(), UnlinkatFlags::RemoveDir) {
                        Ok(()) => self.removed += 1,
                        Err(Errno::ENOENT) => {}
                        // Something was moved into it meanwhile.
                        Err(Errno::ENOTEMPTY | Errno::EEXIST) => self.again = true,
                        Err(errno) => return Err(errno.into()),
                    }
                }
                continue;
            };
            spent += 1;
            let entry = entry?;
            let entry_name = entry.file_name();
            if is_dot(entry_name) {
                continue;
            }
            match unlinkat(current.fd.as_fd(), entry_name, UnlinkatFlags::NoRemoveDir) {
                Ok(()) => {
                    self.removed += 1;
                    continue;
                }
                Err(Errno::ENOENT) => continue,
                Err(Errno::EISDIR) => {}
                Err(errno) => return Err(errno.into()),
            }
            if depth >= MAX_REMOVE_DEPTH {
                self.again = true;
                loop {
                    let new_name = format!(".scored-deep-{}", self.moved);
                    self.moved += 1;
                    match nix::fcntl::renameat2(
                        current.fd.as_fd(),
                        entry_name,
                        top.as_fd(),
                        new_name.as_str(),
                        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
                    ) {
                        Ok(()) | Err(Errno::ENOENT) => break,
                        Err(Errno::EEXIST) => continue,
                        Err(errno) => return Err(errno.into()),
                    }
                }
                continue;
            }
            match open_dir_at(current.fd.as_fd(), entry_name) {
                Ok(fd) => {
                    take_dir(fd.as_fd(), self.uid)?;
                    if is_large_dir(fd.as_fd()) {
                        self.large_dir = true;
                        // Handed to the child before a read of it.
                        spent = budget;
                    }
                    let name = entry_name.to_owned();
                    self.stack.push(OpenDir::new(fd)?);
                    self.names.push(name);
                }
                Err(Errno::ENOENT) => {}
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    match unlinkat(current.fd.as_fd(), entry_name, UnlinkatFlags::NoRemoveDir) {
                        Ok(()) => self.removed += 1,
                        Err(Errno::ENOENT) => {}
                        Err(errno) => return Err(errno.into()),
                    }
                }
                Err(errno) => return Err(errno.into()),
            }
        }
    }
}

/// Whether directory `dir` holds nothing but `.` and `..`.
fn is_empty(dir: OwnedFd) -> bool {
    Dir::from_fd(dir).is_ok_and(|dir| {
        dir.into_iter()
            .all(|entry| entry.is_ok_and(|entry| is_dot(entry.file_name())))
    })
}

/// Makes the directory `dir` the daemon's own, mode 0700: nobody else may
/// add to it any more, even through a handle held open.
fn take_dir(dir: BorrowedFd<'_>, uid: u32) -> io::Result<()> {
    fchown(dir, Some(Uid::from_raw(uid)), None)?;
    fchmod(dir, Mode::from_bits_truncate(0o700))?;
    Ok(())
}

/// A size walk of one scratch tree that can stop after a number of
/// entries and resume there at the next sample, so that a tree of a
/// million files costs the daemon a bounded amount of work per sample.
/// It never follows a symbolic link: a link counts its own size only.
/// Every entry counts at least [`ENTRY_BYTES`].
#[derive(Default)]
pub struct DiskWalk {
    stack: Vec<OpenDir>,
    /// Bytes counted so far in the walk under way.
    partial: u64,
    /// The total of the last complete walk.
    total: u64,
}

impl std::fmt::Debug for DiskWalk {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DiskWalk")
            .field("depth", &self.stack.len())
            .field("partial", &self.partial)
            .field("total", &self.total)
            .finish()
    }
}

impl DiskWalk {
    /// Walks on for at most `budget` entries, opening the tree with `open`
    /// when a new walk starts, and returns the size to report: the larger
    /// of the last complete walk's total and what this walk has counted so
    /// far (a lower bound of the tree's size now). `used` grows by the
    /// entries examined.
    pub fn advance(
        &mut self,
        open: impl FnOnce() -> io::Result<OwnedFd>,
        budget: usize,
        used: &mut usize,
    ) -> u64 {
        if self.stack.is_empty() {
            match open().and_then(OpenDir::new) {
                Ok(dir) => {
                    self.stack.push(dir);
                    self.partial = 0;
                }
                Err(_) => {
                    // Gone (the job removed it, or it was never made).
                    self.total = 0;
                    return 0;
                }
            }
        }
        let mut spent = 0usize;
        while spent < budget {
            let depth = self.stack.len();
            let Some(current) = self.stack.last_mut() else {
                break;
            };
            let Some(entry) = current.entries.next() else {
                self.stack.pop();
                if self.stack.is_empty() {
                    self.total = self.partial;
                    break;
                }
                continue;
            };
            spent += 1;
            let Ok(entry) = entry else {
                self.stack.pop();
                continue;
            };
            let entry_name = entry.file_name();
            if is_dot(entry_name) {
                continue;
            }
            let Ok(stat) = fstatat(
                current.fd.as_fd(),
                entry_name,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) else {
                continue;
            };
            let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
            let mut bytes = ENTRY_BYTES;
            if kind == SFlag::S_IFDIR {
                if depth < MAX_WALK_DEPTH {
                    if let Ok(dir) = open_dir_at(current.fd.as_fd(), entry_name)
                        .map_err(io::Error::from)
                        .and_then(OpenDir::new)
                    {
                        self.stack.push(dir);
                    }
                }
            } else if kind == SFlag::S_IFREG || kind == SFlag::S_IFLNK {
                bytes = bytes.max(stat.st_size.max(0) as u64);
            }
            self.partial = self.partial.saturating_add(bytes);
        }
        *used += spent;
        self.total.max(self.partial)
    }

    /// The size to report without walking further.
    pub fn last(&self) -> u64 {
        self.total.max(self.partial)
    }
}

#[cfg(test)]
mod tests;

/// The remover of a large scratch tree (`spawn::spawn_remover`), started
/// as this binary named [`REMOVER_NAME`] with the tree's directory as
/// descriptor 3 and its name and the daemon's uid as arguments: removes
/// the tree at the lowest normal priority and returns the exit status, 0
/// once it is gone, 1 if the removal failed (the tree then stays for the
/// next start).
pub fn remove_inherited() -> i32 {
    // Started from /proc/self/exe, whose name the kernel took as its own.
    let _ = nix::sys::prctl::set_name(REMOVER_NAME);
    let mut args = std::env::args_os().skip(1);
    let (Some(name), Some(uid)) = (args.next(), args.next()) else {
        return 1;
    };
    let (Some(name), Some(uid)) = (
        name.to_str().map(str::to_string),
        uid.to_str().and_then(|uid| uid.parse::<u32>().ok()),
    ) else {
        return 1;
    };
    let _ = super::sys::set_nice(19);
    let Ok(parent) = super::sys::adopt_descriptor(3) else {
        return 1;
    };
    match Removal::new(parent, name, uid).and_then(|mut removal| removal.finish()) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// The remover's command name (`argv[0]`), which tells the binary to be a
/// remover, and `ps` to show it apart from the daemon.
pub const REMOVER_NAME: &std::ffi::CStr = c"scored-remover";

/// Whether this process was started as a remover (see [`remove_inherited`]).
pub fn invoked_as_remover() -> bool {
    std::env::args_os()
        .next()
        .is_some_and(|arg0| arg0.as_encoded_bytes() == REMOVER_NAME.to_bytes())
}
