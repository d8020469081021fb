//! The pipes beside a keeper's link (see `ToKeeper::Notes`): scored's
//! continues noted before their signals, its stops, and the keeper's
//! answers to them, each a serial of 8 bytes. Both sides write on a pipe
//! only once nothing waits to go on the link before it, and read the
//! link before the pipe (scored as the kernel lists them ready, see
//! `keeper_ready`), so that what is said keeps its order.
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::OFlag;

use scored_core::core::Input;
use scored_core::ids::JobId;

use super::{sys, Carried, Link, OsActuator};
use crate::keeper::{self, Event, ToKeeper};

/// The bit that marks a keeper's answers pipe in the watched set (the
/// rest is its job), beside its link (the job alone).
const ANSWERS: u64 = 1 << 63;

impl Link {
    /// Gives the keeper of `job` its pipes (see `ToKeeper::Notes`) as far
    /// as its protocol reads them, the answers pipe watched in `watch`.
    pub(in crate::actuator) fn open_notes(&mut self, protocol: u32, watch: &OwnedFd, job: JobId) {
        if protocol < keeper::NOTES_PROTOCOL || self.notes.is_some() {
            return;
        }
        let flags = OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let Ok((notes_read, notes)) = nix::unistd::pipe2(flags) else {
            return;
        };
        let mut carried = vec![Carried::Own(notes_read)];
        let mut switch_pipes = None;
        if protocol >= keeper::SWITCH_PIPES_PROTOCOL {
            if let (Ok((stops_read, stops)), Ok((answers, answers_write))) =
                (nix::unistd::pipe2(flags), nix::unistd::pipe2(flags))
            {
                if sys::epoll_add(watch, answers.as_raw_fd(), job.0 | ANSWERS).is_ok() {
                    carried.push(Carried::Own(stops_read));
                    carried.push(Carried::Own(answers_write));
                    switch_pipes = Some((stops, answers));
                }
            }
        }
        if self.send(ToKeeper::Notes, carried).is_ok() {
            self.notes = Some(notes);
            if let Some((stops, answers)) = switch_pipes {
                self.stops = Some(stops);
                self.answers = Some(answers);
            }
        } else if let Some((_, answers)) = switch_pipes {
            let _ = sys::epoll_remove(watch, answers.as_raw_fd());
        }
    }

    /// Notes scored's continue `serial` on the keeper's notes pipe, which
    /// wakes nobody; whether it could (else it is told on the link).
    pub(in crate::actuator) fn note_continue(&mut self, serial: u64) -> bool {
        let Some(notes) = &self.notes else {
            return false;
        };
        self.unsent.is_empty() && matches!(nix::unistd::write(notes, &serial.to_ne_bytes()), Ok(8))
    }

    /// Notes scored's stop `serial` on the keeper's stops pipe; whether
    /// it could (else it is told on the link).
    pub(super) fn note_stop(&mut self, serial: u64) -> bool {
        let Some(stops) = &self.stops else {
            return false;
        };
        self.unsent.is_empty() && matches!(nix::unistd::write(stops, &serial.to_ne_bytes()), Ok(8))
    }

    /// Takes the link and its answers pipe out of the watched set.
    pub(in crate::actuator) fn unwatch(&self, watch: &OwnedFd) {
        let _ = sys::epoll_remove(watch, self.socket.as_raw_fd());
        if let Some(answers) = &self.answers {
            let _ = sys::epoll_remove(watch, answers.as_raw_fd());
        }
    }
}

impl OsActuator {
    /// Reads what the watched set says is ready: a keeper's link, or its
    /// answers pipe (after its link).
    ///
    /// An answer is taken without a look at the link first: the keeper
    /// writes it only once what it said before is in the link, whose
    /// readiness then comes first in the watched set's ready list (the
    /// kernel lists each descriptor as it becomes ready and keeps that
    /// order), so the link was read already, earlier in the same list or
    /// in an earlier one, each read taking all it holds.
    pub(in crate::actuator) fn keeper_ready(&mut self, data: u64, out: &mut Vec<Input>) {
        let job = JobId(data & !ANSWERS);
        if data & ANSWERS != 0 {
            self.read_answers(job, out);
        } else {
            self.read_link(job, out);
        }
    }

    /// Takes the answers `job`'s keeper wrote on its pipe, as the same
    /// answers on its link; a pipe whose writer is gone is let go (stops
    /// are then told on the link).
    fn read_answers(&mut self, job: JobId, out: &mut Vec<Input>) {
        let Some(link) = self.keepers.links.get_mut(&job) else {
            return;
        };
        let Some(answers) = &link.answers else {
            return;
        };
        let (serials, ended) = keeper::read_serials(answers.as_fd());
        if ended {
            if let Some(answers) = link.answers.take() {
                let _ = sys::epoll_remove(&self.exec_watch, answers.as_raw_fd());
            }
            link.stops = None;
        }
        for serial in serials {
            self.keeper_event(job, Event::Stopped(serial), out);
        }
    }
}
