//! A keeper's part in a switch's stop: scored's `Stop` awaited rank by
//! rank in the kernel, as a killpg/waitpid program does, answered once
//! every rank has stopped, and what the kernel did not report in time
//! checked through /proc; scored's continues; and the pipes on which
//! scored notes its stops and continues and the keeper answers stops.
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::{Keeper, STOPS, STOP_ALARM, STOP_BLOCK, STOP_CHECK};
use crate::actuator::procfs;
use crate::keeper::{read_serials, Event};
use crate::sys;

impl Keeper {
    /// scored's `Stop`, sent with its SIGSTOPs: every report the
    /// kernel holds is read first, while the job still counts as running
    /// (scored's earlier continues among them), and a rank reported
    /// continued is sent SIGSTOP again (`rank_continued`); then the ranks
    /// not yet stopped are awaited, and a launch creates nothing more and
    /// stops what it made (scored may not know of it yet: the answer comes
    /// after the events that tell it).
    pub(super) fn stop(&mut self, serial: u64) {
        if !self.switched_out {
            self.taking_stop = true;
            self.children_changed();
            self.taking_stop = false;
        }
        self.switch_serial = serial;
        self.switched_out = true;
        if let Some(launch) = &mut self.launch {
            launch.paused = true;
            for pid in self.ranks.keys() {
                let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGSTOP);
                let _ = killpg(Pid::from_raw(*pid), Signal::SIGSTOP);
            }
        }
        self.pending = self
            .ranks
            .iter()
            .filter(|(_, rank)| rank.ended.is_none() && !rank.stopped)
            .map(|(pid, _)| *pid)
            .collect();
        self.stopping = Some(Instant::now() + STOP_CHECK);
        self.answer_stop();
        self.await_stops();
    }

    /// Waits in the kernel for the ranks the `Stop` awaits, one after the
    /// other, as a killpg/waitpid program does: woken only when the rank
    /// waited for stops (or ends), where SIGCHLD would wake the keeper, at
    /// scored's real-time priority, for each rank, taking the CPU from the
    /// very ranks that must run to stop. Each rank costs one call, which
    /// takes its stop at once if it stopped before its turn. The wait ends
    /// after `STOP_BLOCK` (the alarm interrupts it); what is left is
    /// awaited in the loop, with scored's messages and the other events.
    pub(super) fn await_stops(&mut self) {
        if self.stopping.is_none() || self.pending.is_empty() {
            return;
        }
        let deadline = Instant::now() + STOP_BLOCK;
        let pending: Vec<i32> = self.pending.iter().copied().collect();
        // Armed before the first wait, disarmed once the answer is sent.
        if sys::set_alarm(STOP_ALARM).is_err() {
            return;
        }
        'ranks: for pid in pending {
            loop {
                if Instant::now() >= deadline {
                    break 'ranks;
                }
                let Some(pidfd) = self.ranks.get(&pid).and_then(|rank| rank.pidfd.as_ref()) else {
                    continue 'ranks;
                };
                match sys::wait_stop(pidfd) {
                    Ok(Some(true)) => {
                        if let Some(rank) = self.ranks.get_mut(&pid) {
                            rank.stopped = true;
                        }
                        self.pending.remove(&pid);
                        continue 'ranks;
                    }
                    Ok(Some(false)) => {
                        self.rank_ended(pid);
                        continue 'ranks;
                    }
                    // The alarm: the deadline is looked at again.
                    Ok(None) => {}
                    Err(_) => continue 'ranks,
                }
            }
        }
        self.answer_stop();
        let _ = sys::set_alarm(Duration::ZERO);
    }

    /// scored's `Continue`: creating processes goes on, and the ranks it
    /// stopped again after a continue from outside are continued (that
    /// continue may have been scored's, reported before its message).
    pub(super) fn continued(&mut self, serial: u64) {
        // What the pipe holds is told on the link as well.
        self.read_notes();
        self.switch_serial = serial;
        self.switched_out = false;
        self.stopping = None;
        self.pending.clear();
        for pid in std::mem::take(&mut self.restopped) {
            if self
                .ranks
                .get(&pid)
                .is_some_and(|rank| rank.ended.is_none())
            {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGCONT);
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGCONT);
            }
        }
        if let Some(launch) = &mut self.launch {
            launch.paused = false;
        }
    }

    /// Answers the `Stop` once no rank is left to stop, at once: scored
    /// waits for it to continue the next job. On the answers pipe when
    /// there is one and nothing waits to go on the link before it.
    pub(super) fn answer_stop(&mut self) {
        if self.stopping.is_some() && self.pending.is_empty() {
            self.stopping = None;
            let serial = self.switch_serial;
            self.flush();
            let piped = self.link.is_some()
                && self.unsent.is_empty()
                && self.answers.as_ref().is_some_and(|answers| {
                    matches!(nix::unistd::write(answers, &serial.to_ne_bytes()), Ok(8))
                });
            if !piped {
                self.outbox.push(Event::Stopped(serial));
                self.flush();
            }
        }
    }

    /// scored's `Notes`: its notes pipe, and its stops pipe and answers
    /// pipe when it sent them (see `ToKeeper::Notes`).
    pub(super) fn take_pipes(&mut self, fds: Vec<OwnedFd>) {
        self.drop_switch_pipes();
        let mut fds = fds.into_iter();
        self.notes = fds.next();
        if let (Some(stops), Some(answers)) = (fds.next(), fds.next()) {
            if sys::epoll_add(&self.epoll, stops.as_raw_fd(), STOPS).is_ok() {
                self.stops = Some(stops);
                self.answers = Some(answers);
            }
        }
    }

    /// Lets go of the stops pipe and the answers pipe: stops come on the
    /// link again.
    pub(super) fn drop_switch_pipes(&mut self) {
        if let Some(stops) = self.stops.take() {
            let _ = sys::epoll_remove(&self.epoll, stops.as_raw_fd());
        }
        self.answers = None;
    }

    /// The stops pipe is readable: what scored said on its link before
    /// the note is taken first, then the stop.
    pub(super) fn read_stops(&mut self) {
        self.read_scored();
        self.take_stop_notes();
    }

    /// Takes the latest stop noted on the stops pipe, unless a later
    /// continue was told on the link already; a pipe whose writer is gone
    /// is let go.
    pub(super) fn take_stop_notes(&mut self) {
        let Some(stops) = &self.stops else {
            return;
        };
        let (serials, ended) = read_serials(stops.as_fd());
        if ended {
            self.drop_switch_pipes();
        }
        let latest = serials.into_iter().max().unwrap_or(0);
        if latest > self.switch_serial {
            self.stop(latest);
        }
    }

    /// A stop that `waitid` has not confirmed in time: the ranks /proc
    /// shows unable to run are stopped (a vfork parent whose child is
    /// stopped reports its stop only once it runs again); the others are
    /// sent SIGSTOP again.
    pub(super) fn check_stopping(&mut self) {
        let Some(at) = self.stopping else {
            return;
        };
        if Instant::now() < at {
            return;
        }
        let pending: Vec<i32> = self.pending.iter().copied().collect();
        // A rank of a cgroup scored asked to freeze cannot return to user
        // code without freezing, whatever /proc shows (`D` once frozen,
        // whether it took its stop first or not); and its group, which
        // the freezer holds, is not signalled.
        let freezing = self
            .cgroup_procs
            .as_deref()
            .and_then(std::path::Path::parent)
            .is_some_and(crate::actuator::cgroup::freeze_asked);
        for pid in pending {
            let start = self.ranks.get(&pid).map(|rank| rank.start);
            match procfs::read_stat(pid).filter(|stat| Some(stat.start) == start) {
                Some(stat) if !procfs::cannot_run(&stat) && !freezing => {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGSTOP);
                    let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGSTOP);
                    // Its group is continued with it: scored's continue
                    // may reach the rank alone (a job it switches by its
                    // freezer).
                    self.restopped.insert(pid);
                }
                _ => {
                    self.pending.remove(&pid);
                }
            }
        }
        self.stopping = Some(Instant::now() + STOP_CHECK);
        self.answer_stop();
    }

    /// Reads what scored's notes pipe holds; the highest continue serial
    /// noted on it.
    pub(super) fn read_notes(&mut self) -> u64 {
        let Some(notes) = &self.notes else {
            return self.noted;
        };
        let (serials, _) = read_serials(notes.as_fd());
        self.noted = serials.into_iter().fold(self.noted, u64::max);
        self.noted
    }
}
