//! Reads of a process's /proc files that may wait on the process, done by
//! a thread of their own and given up on after a deadline.
//!
//! Every file whose read checks ptrace access (`stat`, `environ`, `wchan`,
//! `exe`, `io`, `stack`, `syscall`, `maps`, ...) waits while its process
//! holds its exec lock: for a process in the middle of an execve, its
//! close of its close-on-exec descriptors included. Closing a file of a
//! FUSE server that never answers the flush makes that wait last for as
//! long as the server likes, and any user may mount FUSE. `status`,
//! `cgroup`, `comm`, `schedstat` and the directory listings never wait so
//! (see ARCHITECTURE.md), and are read directly.
//!
//! A read is handed to the reader thread; the caller waits for it at most
//! [`DEADLINE`]. A read that outlives it is left to its thread, which ends
//! once the read does, and the next read gets a new thread; the process's
//! files are not read again meanwhile, and at most [`MOST_WAITING`] reads
//! wait at once (beyond that, every read is given up at once).
//!
//! The threads only open, read and close files of /proc, with the
//! close-on-exec flag: none of them touches descriptors 0 to 2, takes a
//! lock a child of a fork could need, or holds anything of a user's.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How long a read may take before it is given up on. Reads that do not
/// wait on their process take microseconds; the threads share the
/// daemon's real-time priority.
pub const DEADLINE: Duration = Duration::from_millis(20);

/// How many given-up reads may wait at once, each holding a thread.
pub const MOST_WAITING: usize = 64;

/// The name of the reader threads (`/proc/self/task/TID/comm`).
pub const THREAD_NAME: &str = "scored procfs";

type Task = Box<dyn FnOnce() + Send>;

/// The reader thread's queue and the processes whose reads wait.
struct Reader {
    queue: Option<Sender<Task>>,
    waiting: Vec<i32>,
}

/// Held by each caller for its whole call, so that a read is never
/// queued behind another caller's that waits (the loop is one caller;
/// tests are many).
static CALLS: Mutex<()> = Mutex::new(());

static READER: Mutex<Reader> = Mutex::new(Reader {
    queue: None,
    waiting: Vec::new(),
});

fn lock_reader() -> std::sync::MutexGuard<'static, Reader> {
    READER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What became of one read.
enum Slot<T> {
    Pending,
    Done(T),
    GivenUp,
}

/// Runs `read`, a read of process `pid`'s /proc files, on the reader
/// thread: its result, or `None` when it did not end within [`DEADLINE`],
/// when an earlier read of `pid`'s files still waits, or when
/// [`MOST_WAITING`] reads wait.
pub fn within_deadline<T: Send + 'static>(
    pid: i32,
    read: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let _call = CALLS.lock().unwrap_or_else(PoisonError::into_inner);
    let slot = Arc::new((Mutex::new(Slot::Pending), Condvar::new()));
    {
        let reader = lock_reader();
        if reader.waiting.contains(&pid) || reader.waiting.len() >= MOST_WAITING {
            return None;
        }
    }
    let theirs = Arc::clone(&slot);
    let task: Task = Box::new(move || {
        let value = read();
        let (lock, ready) = &*theirs;
        let mut slot = lock.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*slot, Slot::GivenUp) {
            drop(slot);
            lock_reader().waiting.retain(|waiting| *waiting != pid);
        } else {
            *slot = Slot::Done(value);
            ready.notify_one();
        }
    });
    if !hand_over(task) {
        return None;
    }
    let (lock, ready) = &*slot;
    let guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
    let (guard, _) = ready
        .wait_timeout_while(guard, DEADLINE, |slot| matches!(slot, Slot::Pending))
        .unwrap_or_else(PoisonError::into_inner);
    drop(guard);
    // The reader's lock before the slot's, as the thread takes them (it
    // lets go of the slot's first), so that a read ending now either
    // gives its value or finds itself given up and `pid` listed.
    let mut reader = lock_reader();
    let mut guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
    match std::mem::replace(&mut *guard, Slot::GivenUp) {
        Slot::Done(value) => Some(value),
        _ => {
            reader.waiting.push(pid);
            // The thread is busy for as long as the read waits.
            reader.queue = None;
            None
        }
    }
}

/// The reads of one [`each_within_deadline`] so far.
struct Batch<T> {
    done: Vec<T>,
    given_up: bool,
}

/// Runs `read` on each of `pids` in turn on the reader thread, in one
/// hand-over and one wakeup of the caller (each costs tens of
/// microseconds, a read a few): the results in order, `None` for the read
/// under way when a whole [`DEADLINE`] passed with no read of the batch
/// ending (so it waited at least that long, and at most twice that), for
/// a pid whose earlier read still waits, and for every pid once
/// [`MOST_WAITING`] reads wait. The reads after one given up on go on in
/// a new thread.
pub fn each_within_deadline<T: Send + 'static>(pids: &[i32], read: fn(i32) -> T) -> Vec<Option<T>> {
    let _call = CALLS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut out: Vec<Option<T>> = Vec::with_capacity(pids.len());
    let mut rest = pids;
    while !rest.is_empty() {
        let batch: Vec<i32> = {
            let reader = lock_reader();
            if reader.waiting.len() >= MOST_WAITING {
                out.extend(rest.iter().map(|_| None));
                return out;
            }
            rest.iter()
                .take_while(|pid| !reader.waiting.contains(pid))
                .copied()
                .collect()
        };
        if batch.is_empty() {
            out.push(None);
            rest = &rest[1..];
            continue;
        }
        rest = &rest[batch.len()..];
        let n = batch.len();
        let slot = Arc::new((
            Mutex::new(Batch {
                done: Vec::with_capacity(n),
                given_up: false,
            }),
            Condvar::new(),
        ));
        let theirs = Arc::clone(&slot);
        let task: Task = Box::new(move || {
            let (lock, ready) = &*theirs;
            for pid in batch {
                let value = read(pid);
                let mut slot = lock.lock().unwrap_or_else(PoisonError::into_inner);
                if slot.given_up {
                    drop(slot);
                    lock_reader().waiting.retain(|waiting| *waiting != pid);
                    return;
                }
                slot.done.push(value);
            }
            // The caller is woken once, for the whole batch; it looks at
            // the reads done so far each time its wait runs out.
            ready.notify_one();
        });
        if !hand_over(task) {
            out.extend((0..n + rest.len()).map(|_| None));
            return out;
        }
        let (lock, ready) = &*slot;
        let mut guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let seen = guard.done.len();
            if seen == n {
                break;
            }
            let (next, _) = ready
                .wait_timeout_while(guard, DEADLINE, |batch| batch.done.len() < n)
                .unwrap_or_else(PoisonError::into_inner);
            guard = next;
            if guard.done.len() == seen {
                break;
            }
        }
        drop(guard);
        // The reader's lock before the slot's, as in `within_deadline`.
        let mut reader = lock_reader();
        let mut guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let read = guard.done.len();
        out.extend(guard.done.drain(..).map(Some));
        if read < n {
            guard.given_up = true;
            let stuck = pids[out.len()];
            reader.waiting.push(stuck);
            reader.queue = None;
            out.push(None);
            // The reads after the one given up on are asked again.
            let after = out.len();
            rest = &pids[after..];
        }
    }
    out
}

/// Queues `task` for the reader thread, starting one if there is none
/// (or it ended); whether it was queued.
fn hand_over(task: Task) -> bool {
    let mut reader = lock_reader();
    let queue = match reader.queue.take() {
        Some(queue) => queue,
        None => match start() {
            Some(queue) => queue,
            None => return false,
        },
    };
    let queue = match queue.send(task) {
        Ok(()) => queue,
        Err(returned) => match start() {
            Some(queue) if queue.send(returned.0).is_ok() => queue,
            _ => return false,
        },
    };
    reader.queue = Some(queue);
    true
}

/// Starts a reader thread, which runs tasks until its queue is dropped.
fn start() -> Option<Sender<Task>> {
    let (queue, tasks) = channel::<Task>();
    std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .stack_size(128 * 1024)
        .spawn(move || {
            for task in tasks {
                task();
            }
        })
        .ok()?;
    Some(queue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    #[test]
    fn a_batch_goes_on_past_a_read_that_waits() {
        static RELEASE: Mutex<Option<std::sync::mpsc::Receiver<()>>> = Mutex::new(None);
        fn read(pid: i32) -> i32 {
            if pid == i32::MAX - 20 {
                let wait = RELEASE.lock().unwrap().take();
                if let Some(wait) = wait {
                    let _ = wait.recv();
                }
            }
            pid
        }
        let (release, wait) = sync_channel::<()>(0);
        *RELEASE.lock().unwrap() = Some(wait);
        let pids = [i32::MAX - 21, i32::MAX - 20, i32::MAX - 19, i32::MAX - 18];
        let got = each_within_deadline(&pids, read);
        assert_eq!(got, vec![Some(pids[0]), None, Some(pids[2]), Some(pids[3])]);
        // The waiting pid is passed over, the others read.
        assert_eq!(each_within_deadline(&pids, read), got);
        release.send(()).expect("the waiting read");
        let served = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(2));
            each_within_deadline(&pids, read)
                .iter()
                .all(Option::is_some)
        });
        assert!(served, "the pid was not read again once its read ended");
    }

    /// The calling thread's voluntary context switches so far.
    fn own_switches() -> u64 {
        std::fs::read_to_string("/proc/thread-self/status")
            .expect("own status")
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|value| value.trim().parse().ok())
            .expect("voluntary_ctxt_switches")
    }

    #[test]
    fn a_batch_wakes_its_caller_once_not_once_a_read() {
        fn read(pid: i32) -> i32 {
            // Long enough that a caller woken for each read sleeps again
            // before the next one ends.
            std::thread::sleep(Duration::from_micros(300));
            pid
        }
        let pids: Vec<i32> = (0..40).map(|n| i32::MAX - 100 - n).collect();
        let before = own_switches();
        let got = each_within_deadline(&pids, read);
        let switches = own_switches() - before;
        assert_eq!(got, pids.iter().map(|pid| Some(*pid)).collect::<Vec<_>>());
        assert!(
            switches < 10,
            "a batch of {} reads put its caller to sleep {switches} times",
            pids.len()
        );
    }

    #[test]
    fn a_read_that_waits_is_given_up_and_the_next_reads_are_served() {
        // A pid no process has: the reads are closures, not files.
        let stuck = i32::MAX - 7;
        let (release, wait) = sync_channel::<()>(0);
        let started = std::time::Instant::now();
        assert_eq!(
            within_deadline(stuck, move || {
                let _ = wait.recv();
                1
            }),
            None
        );
        assert!(started.elapsed() < DEADLINE * 50);
        // The same process's files are not read while its read waits.
        assert_eq!(within_deadline(stuck, || 2), None);
        // Another process's are, by a new thread.
        assert_eq!(within_deadline(i32::MAX - 8, || 3), Some(3));
        release.send(()).expect("the waiting read");
        let served = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(2));
            within_deadline(stuck, || 4) == Some(4)
        });
        assert!(
            served,
            "the process's files were not read again once its read ended"
        );
    }
}
