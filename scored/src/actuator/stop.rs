//! Stopping, holding and continuing a job: SIGSTOP to its groups and
//! escaped descendants, the confirmation of every stop (a look at the
//! ranks in /proc right after the signals, else its keeper's one answer
//! for the ranks; /proc for the others; the freezer when a stop is not
//! confirmed in time), the rest of a job switched by its ranks alone
//! frozen once the switch is over (`rest.rs`), and a switched-out job
//! held against SIGCONT from outside it (which its keeper tells from
//! scored's own), a tracer that resumes it, or anything else that lets
//! it use CPU time.
//!
//! Each continue is told to the job's keeper before its signals (on the
//! keeper's notes pipe, then on the link once the switch is over), each
//! stop after them (just before them where only the keeper's answer
//! confirms it), on its stops pipe or its link, and its answer comes on
//! the answers pipe or the link (`keepers/pipes.rs`): the keeper,
//! which alone sees the ranks' stops and continues, thereby knows which
//! continues are scored's (see `keeper/life.rs`).
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use scored_core::core::Input;
use scored_core::ids::JobId;

use super::{
    procfs, sample, sys, Actuator, Member, OsActuator, StopWait, CONFIRM_FALLBACK,
    DRAIN_KILL_EVERY, DRAIN_TIMEOUT, ESCAPE_LIMIT, ESCAPE_TICKS, EXEC_TIMEOUT, FREEZE_AFTER,
    FRESH_DISCOVERY, MEMBER_READS_PER_SAMPLE, POLL_INTERVAL, ROGUE_CONTINUE_LIMIT, STOP_TIMEOUT,
};

mod latency;
mod rest;
pub(super) use latency::LatencyHold;

impl OsActuator {
    pub(super) fn stop_job(&mut self, job: JobId, out: &mut Vec<Input>) {
        // At a slice boundary the job was sampled just before this stop, so
        // its descendants are known; otherwise look at its cgroup again.
        // A job switched by its ranks needs neither: the freeze of its
        // rest holds every other process of its cgroup, listed or not.
        let now = self.clock.now();
        // (While its keeper still creates its ranks, which a stop pauses
        // by their groups' signals, a job is switched as any other.)
        let by_freezer = self
            .jobs
            .get(&job)
            .is_some_and(|procs| procs.hold.by_freezer && procs.launch.is_none());
        let fresh = self
            .jobs
            .get(&job)
            .and_then(|procs| procs.discovered_at)
            .is_some_and(|at| now.duration_since(at) < FRESH_DISCOVERY);
        if !fresh && !by_freezer {
            self.adopt_new_members(job);
        }
        if !by_freezer {
            self.note_stopped_by_job(job);
        }
        // Such a job's ranks alone get SIGSTOP, by pid, and are confirmed
        // stopped as any job's; the rest of its processes are frozen in
        // their own cgroup once the switch is over (`hold_rests`).
        // Otherwise every group is signalled.
        let by_freezer = by_freezer
            && self.cgroups.is_some()
            && self
                .jobs
                .get(&job)
                .is_some_and(|procs| procs.cgroup_procs.is_some());
        // A stop that only its keeper's answer confirms (more ranks than
        // CPUs, or a launch in progress) is told before the signals: the
        // first rank's stop wakes the keeper anyway (SIGCHLD), and told
        // first it takes the message and then waits for each rank in the
        // kernel, woken by no other stop, as a killpg/waitpid program is.
        // A stop /proc can confirm is told after them, once the switch is
        // over (`tell_stops`): woken first, at real-time priority, the
        // keeper would take a CPU from a rank that has to run to stop. A
        // stop it sees before the message counts as any stop of a running
        // job; a continue it finds as it takes the message is undone (see
        // `keeper/life/stopping.rs`).
        let tell_first = self
            .jobs
            .get(&job)
            .is_some_and(|procs| procs.launch.is_some() || procs.children.len() > online_cpus());
        if let Some(procs) = self.jobs.get_mut(&job) {
            procs.hold.switch_serial += 1;
            procs.hold.untold_stop = Some(procs.hold.switch_serial);
        }
        if tell_first {
            self.tell_untold(job);
        }
        if by_freezer {
            self.signal_ranks(job, Signal::SIGSTOP);
        } else {
            self.send(job, Signal::SIGSTOP);
        }
        let freeze = self
            .jobs
            .get(&job)
            .is_some_and(|procs| procs.hold.freeze_on_stop)
            && self.freeze(job);
        let Some(procs) = self.jobs.get_mut(&job) else {
            out.push(Input::Stopped(job));
            return;
        };
        procs.hold.signalled = !by_freezer;
        procs.hold.switched_out = true;
        procs.hold.rogue_continues = 0;
        procs.hold.stopped_cpu = None;
        // A launch in progress: its keeper creates nothing more and stops
        // what it made that scored may not know of yet; the stop waits
        // for its answer, which comes after the news of those.
        let pausing = procs.launch.is_some();
        let pending_children: BTreeSet<i32> = procs.children.clone();
        // Descendants in the job's groups got the group signal, escaped ones
        // theirs through their pidfd; those held, and of the other members
        // of its cgroup those last seen running, are confirmed through
        // /proc (a member stops before it runs user code again anyway).
        // Those of a job switched by its ranks are held by their freeze.
        let pending_extras: BTreeSet<i32> = if by_freezer {
            BTreeSet::new()
        } else {
            pending_members(procs)
        };
        let now = self.clock.now();
        procs.stop_wait = Some(StopWait {
            children: pending_children,
            extras: pending_extras,
            since: now,
            freezing: freeze,
            pausing,
        });
        // Descendants are confirmed through /proc right away when they
        // already stopped; the rest at the next poll.
        self.poll_job(job, self.clock.now(), false, out);
    }

    pub(super) fn continue_job(&mut self, job: JobId) {
        self.thaw(job);
        // The time a rank spent switched out before its exec does not count.
        let deadline = self.clock.now() + EXEC_TIMEOUT;
        for pending in self.execs.values_mut().filter(|pending| pending.job == job) {
            pending.deadline = deadline;
        }
        let mut serial = None;
        let mut ranks_only = false;
        if let Some(procs) = self.jobs.get_mut(&job) {
            ranks_only = procs.hold.by_freezer && !std::mem::take(&mut procs.hold.signalled);
            procs.hold.switched_out = false;
            procs.hold.stopped_cpu = None;
            procs.hold.serial += 1;
            procs.hold.switch_serial += 1;
            serial = Some(procs.hold.switch_serial);
            procs.stop_wait = None;
        }
        // The keeper hears of the continue before any rank can continue (a
        // continue it sees without word of it was someone else's): on its
        // notes pipe, which wakes nobody, and on the link once the switch
        // is over (`tell_continues`); on the link first where it has no
        // pipe, or a stop waits to be told to it.
        if let Some(serial) = serial {
            let untold = self
                .jobs
                .get(&job)
                .is_some_and(|procs| procs.hold.untold_stop.is_some());
            let noted = !untold
                && self
                    .keepers
                    .links
                    .get_mut(&job)
                    .is_some_and(|link| link.note_continue(serial));
            match self.jobs.get_mut(&job) {
                Some(procs) if noted => procs.hold.untold_continue = Some(serial),
                _ => self.tell_keeper(job, crate::keeper::ToKeeper::Continue(serial)),
            }
        }
        // The rest of a job switched by its ranks is thawed once the
        // switch is over (`hold_rests`).
        if ranks_only {
            self.signal_ranks(job, Signal::SIGCONT);
        } else {
            self.send(job, Signal::SIGCONT);
        }
    }

    /// Sends `signal` to each unreaped rank of the job alone, by pid (an
    /// unreaped child's pid is still its own): the switch of a job whose
    /// freezer holds the rest.
    fn signal_ranks(&self, job: JobId, signal: Signal) {
        let Some(procs) = self.jobs.get(&job) else {
            return;
        };
        for &pid in &procs.children {
            if let Err(error) = sys::kill_number(pid, signal as i32) {
                tracing::debug!(job = %job, pid, %error, "kill of a rank failed");
            }
        }
    }

    pub(super) fn signal_job(&mut self, job: JobId, signal: i32) {
        if signal == libc::SIGKILL {
            // A job being killed gets no more processes.
            let launching = self
                .jobs
                .get(&job)
                .is_some_and(|procs| procs.launch.is_some());
            if launching {
                self.tell_keeper(job, crate::keeper::ToKeeper::Kill);
            }
        }
        match signal_from(signal) {
            Some(signal) => self.send(job, signal),
            // One nix has no name for: a real-time one, which a job may trap.
            None => self.deliver(job, signal),
        }
        // The ranks not created yet get it as they are.
        if let Some(launch) = self
            .jobs
            .get_mut(&job)
            .and_then(|procs| procs.launch.as_mut())
        {
            if !launch.signals.contains(&signal) {
                launch.signals.push(signal);
            }
        }
    }

    pub(super) fn wait_for_stops(&mut self, max: Duration, out: &mut Vec<Input>) {
        let deadline = self.clock.now() + max;
        self.look_for_stops(out);
        // Stops left to confirm: until the event is carried out
        // (`settled`), an idle CPU polls, for the confirmation wakes
        // scored's CPU, idle meanwhile.
        if self.pending_stops() > 0 {
            self.latency.hold_for_switch();
        }
        // Only its keeper's answer confirms a stop during a launch.
        self.tell_stops(true);
        // A rank that shares scored's CPU stops only once scored lets go of
        // it: when no more ranks are left to stop than there are CPUs, each
        // can stop at once, and a look after each of a few short waits for
        // the keepers' answers confirms them sooner than those answers. The
        // waits halt no CPU (the latency is held), and leave scored's CPU
        // to a rank that shares it, whatever /proc last said of where the
        // rank runs.
        let mut pause = LOOK_PAUSE;
        let mut waits = 0;
        loop {
            let left: usize = self
                .jobs
                .values()
                .filter_map(|procs| procs.stop_wait.as_ref())
                .map(|wait| wait.children.len())
                .sum();
            if left == 0 || left > online_cpus() {
                break;
            }
            if waits == LOOKS {
                break;
            }
            waits += 1;
            if sys::readable_within(&self.exec_watch, pause).unwrap_or(false) {
                self.collect_keeper_events(out);
            }
            pause *= 2;
            self.look_for_stops(out);
        }
        // Only the stops still awaited are told now; one /proc confirmed
        // is told once the switch is over (`settled`), or before anything
        // else scored tells that keeper, so that the keeper's wakeup costs
        // the switch nothing.
        self.tell_awaited_stops();
        // The ranks' keepers say when they stopped: wait in the kernel for
        // their links (one wakeup for each keeper's batch of stops, as a
        // plain killpg/waitpid program wakes for each child), and look at
        // /proc every so often for descendants other than ranks, which no
        // one reports.
        let mut ready = [0u64; 64];
        while self.pending_stops() > 0 {
            let now = self.clock.now();
            if now >= deadline {
                break;
            }
            // (A job switched by its ranks is looked at too: one that has
            // not stopped soon is frozen.)
            let extras = self.jobs.values().any(|procs| {
                procs.stop_wait.as_ref().is_some_and(|wait| {
                    !wait.extras.is_empty() || procs.hold.by_freezer && !wait.freezing
                })
            });
            let step = if extras {
                POLL_INTERVAL.min(deadline - now)
            } else {
                deadline - now
            };
            match sys::epoll_wait_for(&self.exec_watch, &mut ready, Some(step)) {
                Ok(n) => {
                    for &data in &ready[..n] {
                        self.keeper_ready(data, out);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "waiting for the keepers failed");
                    break;
                }
            }
            if extras {
                // Not `poll`: the state directory's check (due every
                // second) would then fall between a switch's stops and its
                // continues.
                self.poll_waiting_jobs(self.clock.now(), out);
            }
        }
    }

    /// Tells the keepers of the stops still awaited the stops they have
    /// not heard of.
    fn tell_awaited_stops(&mut self) {
        let untold: Vec<(JobId, u64)> = self
            .jobs
            .iter_mut()
            .filter(|(_, procs)| {
                procs
                    .stop_wait
                    .as_ref()
                    .is_some_and(|wait| wait.pausing || !wait.children.is_empty())
            })
            .filter_map(|(job, procs)| Some((*job, procs.hold.untold_stop.take()?)))
            .collect();
        for (job, serial) in untold {
            self.tell_keeper(job, crate::keeper::ToKeeper::Stop(serial));
        }
    }

    /// Tells the keepers on their links the continues they read on their
    /// notes pipes only.
    pub(super) fn tell_continues(&mut self) {
        let untold: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, procs)| procs.hold.untold_continue.is_some())
            .map(|(job, _)| *job)
            .collect();
        for job in untold {
            self.tell_untold(job);
        }
    }

    /// Tells the keepers the stops they have not heard of (of jobs whose
    /// launch is in progress only, if `pausing_only`).
    pub(super) fn tell_stops(&mut self, pausing_only: bool) {
        let untold: Vec<(JobId, u64)> = self
            .jobs
            .iter_mut()
            .filter(|(_, procs)| {
                !pausing_only || procs.stop_wait.as_ref().is_some_and(|wait| wait.pausing)
            })
            .filter_map(|(job, procs)| Some((*job, procs.hold.untold_stop.take()?)))
            .collect();
        for (job, serial) in untold {
            self.tell_keeper(job, crate::keeper::ToKeeper::Stop(serial));
        }
    }

    /// One look at the ranks of each stop of no more ranks than there are
    /// CPUs, right after the switch's signals and again while
    /// `wait_for_stops` waits: a rank that was running on another CPU, or
    /// sleeping, has stopped by now, and /proc says so at the cost of one
    /// read, where its keeper's answer costs two wakeups. A stop of more
    /// ranks waits for its keeper's answer, told at once: some of its
    /// ranks must wait for a CPU to take their stops. A stop whose launch
    /// is in progress waits for that answer too (see
    /// `StopWait::pausing`).
    fn look_for_stops(&mut self, out: &mut Vec<Input>) {
        let jobs: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, procs)| {
                procs.stop_wait.as_ref().is_some_and(|wait| {
                    !wait.pausing
                        && !wait.children.is_empty()
                        && wait.children.len() <= online_cpus()
                })
            })
            .map(|(job, _)| *job)
            .collect();
        for job in jobs {
            let Some(procs) = self.jobs.get_mut(&job) else {
                continue;
            };
            let freezing = procs.hold.frozen;
            let Some(wait) = procs.stop_wait.as_mut() else {
                continue;
            };
            let mut stopped = Vec::new();
            for &pid in &wait.children {
                // An unreaped child of its keeper: the pid is still the
                // rank's. Its status, not its stat, which would wait for
                // a rank in the middle of an exec (see `procfs::read_stat`).
                if procfs::read_status_kept(pid).is_none_or(|stat| held(&stat, freezing)) {
                    stopped.push(pid);
                }
            }
            if stopped.is_empty() {
                continue;
            }
            for pid in stopped {
                wait.children.remove(&pid);
            }
            self.check_stop(job, out);
        }
    }

    /// Signals the process group of every unreaped rank (see
    /// `JobProcs::groups` for why that id is still the rank's), and every
    /// other descendant outside those groups through its pidfd.
    pub(super) fn send(&mut self, job: JobId, signal: Signal) {
        if signal == Signal::SIGKILL {
            // A frozen process acts on no signal, SIGKILL included, until
            // it is thawed; and one that has not acted on it yet (no CPU
            // for it, or in the kernel) would not once frozen, so nothing
            // freezes the job again.
            if let Some(procs) = self.jobs.get_mut(&job) {
                procs.hold.killed = true;
            }
            self.thaw(job);
            self.release_rest(job);
        }
        self.deliver(job, signal as i32);
    }

    /// Sends `signal` to each rank's group, to ranks still before their
    /// exec by pid, and to descendants outside those groups through their
    /// pidfds.
    fn deliver(&self, job: JobId, signal: i32) {
        let Some(procs) = self.jobs.get(&job) else {
            return;
        };
        for &pgid in procs.groups.keys() {
            if let Err(error) = sys::kill_number(-pgid, signal) {
                tracing::debug!(job = %job, pgid, signal, %error, "kill of a group failed");
            }
        }
        // A rank between fork and exec may not lead its session yet, so
        // that its group's signal misses it: it is signalled by pid too
        // (an unreaped child's pid is still its own).
        if !self.execs.is_empty() {
            for pid in procs
                .children
                .iter()
                .filter(|pid| self.execs.contains_key(pid))
            {
                let _ = sys::kill_number(*pid, signal);
            }
        }
        for extra in procs.extras.values() {
            if signal == libc::SIGCONT && extra.stopped_by_job {
                continue;
            }
            if !procs.groups.contains_key(&extra.pgrp) {
                let _ = sys::pidfd_send_signal(&extra.pidfd, signal);
            }
        }
    }

    /// Before a gang stop, looks at every held descendant again: its
    /// process group now (a shell of the job may have moved it into a group
    /// of its own since it was found, out of reach of the ranks' group
    /// signals), and whether it is stopped already. Stopped outside the
    /// ranks' groups means the job stopped it itself (job control in a
    /// shell of the job), and continuing the gang must not undo that; one
    /// found running again loses the mark at the next stop.
    pub(super) fn note_stopped_by_job(&mut self, job: JobId) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        let groups = &procs.groups;
        for (pid, extra) in procs.extras.iter_mut() {
            let stat = procfs::read_stat(*pid).filter(|stat| stat.start == extra.start);
            if let Some(stat) = stat {
                extra.pgrp = stat.pgrp;
            }
            extra.stopped_by_job = !groups.contains_key(&extra.pgrp)
                && stat.is_some_and(|stat| matches!(stat.state, b'T' | b't'));
        }
    }

    pub(super) fn check_stop(&mut self, job: JobId, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        let done = procs.stop_wait.as_ref().is_some_and(|wait| {
            wait.children.is_empty() && wait.extras.is_empty() && !wait.pausing
        });
        if done {
            if let Some(wait) = procs.stop_wait.take() {
                tracing::debug!(job = %job, confirm_us = self.clock.now().duration_since(wait.since).as_micros() as u64, "stop confirmed");
            }
            out.push(Input::Stopped(job));
            if !procs.hold.frozen {
                self.held_checks.push(job);
            }
        }
    }

    /// The checks of confirmed stops that are due (see `held_checks`):
    /// each job still switched out, stopped and not frozen.
    pub(super) fn check_held_stops(&mut self, out: &mut Vec<Input>) {
        for job in std::mem::take(&mut self.held_checks) {
            let due = self.jobs.get(&job).is_some_and(|procs| {
                procs.hold.switched_out && !procs.hold.frozen && procs.stop_wait.is_none()
            });
            if due {
                self.check_held(job, out);
            }
        }
    }

    /// Once a job's stop is confirmed and its switch is over, checks that
    /// the stop holds:
    /// a process with a tracer can be resumed by it without any SIGCONT
    /// (a stop that the tracer sees first and lets go), so a traced job is
    /// held in its frozen cgroup instead. Otherwise it notes the CPU time
    /// of each process, which must not grow until the job is continued
    /// ([`Self::check_switched_out`]).
    fn check_held(&mut self, job: JobId, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get(&job) else {
            return;
        };
        let pids: Vec<i32> = procs
            .children
            .iter()
            .chain(procs.extras.keys())
            .copied()
            .collect();
        let mut cpu = Vec::with_capacity(pids.len());
        let stats = procfs::read_stats(&pids);
        for (pid, stat) in pids.into_iter().zip(stats) {
            let Some(stat) = stat else {
                continue;
            };
            // A traced process never shows a stop as `T`: a stop of its
            // own, or one it had when the tracer attached, is a tracing
            // stop (`t`), which the tracer may end.
            if stat.state == b't' {
                let tracer = procfs::read_tracer(pid).filter(|tracer| *tracer != 0);
                let by = tracer.map_or(String::new(), |tracer| format!(" by process {tracer}"));
                self.escaped(job, pid, &format!("process {pid} is traced{by}"), out);
                return;
            }
            cpu.push((pid, stat.start, stat.own_ticks));
        }
        // The other members of its cgroup that the next sample reads are
        // read now too: that sample tells which of them ran meanwhile.
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        let serial = procs.hold.serial;
        let members = sample::members_in_turn(procs, MEMBER_READS_PER_SAMPLE);
        let stats = procfs::read_stats(&members);
        for (pid, stat) in members.into_iter().zip(stats) {
            let Some(stat) = stat else {
                continue;
            };
            if stat.state == b't' {
                self.escaped(job, pid, &format!("process {pid} is traced"), out);
                return;
            }
            if let Some(member) = procs.members.get_mut(&pid) {
                *member = Member {
                    stat,
                    held: Some(serial),
                };
            }
        }
        procs.hold.stopped_cpu = Some(cpu);
    }

    /// Looks at the CPU time of the processes of switched-out jobs that are
    /// not frozen: a process that used CPU time since its stop was
    /// confirmed got out of it (a tracer that attached later, say), and its
    /// job is held as a traced one.
    pub(super) fn check_switched_out(&mut self, out: &mut Vec<Input>) {
        let jobs: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, procs)| procs.hold.switched_out && !procs.hold.frozen)
            .filter(|(_, procs)| procs.hold.stopped_cpu.is_some())
            .map(|(job, _)| *job)
            .collect();
        for job in jobs {
            let Some(cpu) = self
                .jobs
                .get(&job)
                .and_then(|procs| procs.hold.stopped_cpu.clone())
            else {
                continue;
            };
            let pids: Vec<i32> = cpu.iter().map(|&(pid, _, _)| pid).collect();
            let stats = procfs::read_stats(&pids);
            let ran = cpu
                .iter()
                .zip(stats)
                .find_map(|(&(pid, start, ticks), stat)| {
                    stat.filter(|stat| stat.start == start && stat.own_ticks > ticks + ESCAPE_TICKS)
                        .map(|stat| (pid, stat.own_ticks - ticks))
                });
            if let Some((pid, ticks)) = ran {
                let ms = ticks.saturating_mul(1000) / self.clock_ticks.max(1);
                self.escaped(
                    job,
                    pid,
                    &format!("process {pid} used {ms}ms of CPU time while switched out"),
                    out,
                );
            }
        }
    }

    /// A switched-out job got out of its stop other than by SIGCONT (see
    /// [`Self::check_held`]): it is frozen, now and at every later stop;
    /// without a freezer it is stopped again, and killed after
    /// `ESCAPE_LIMIT` such escapes.
    pub(super) fn escaped(&mut self, job: JobId, pid: i32, what: &str, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        procs.hold.escapes += 1;
        procs.hold.stopped_cpu = None;
        let first = !procs.hold.freeze_on_stop;
        procs.hold.freeze_on_stop = true;
        if first {
            tracing::warn!(job = %job, pid, frozen = procs.cgroup_procs.is_some(), "a switched-out job can get out of its stop ({what}); freezing it (or stopping it again without a cgroup)");
        }
        if self.freeze(job) {
            return;
        }
        self.send(job, Signal::SIGSTOP);
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if procs.hold.escapes >= ESCAPE_LIMIT {
            procs.hold.switched_out = false;
            procs.stop_wait = None;
            out.push(Input::StopFailed {
                job,
                reason: format!(
                    "it got out of {} of its stops ({what}), and no freezer can hold it",
                    procs.hold.escapes
                ),
            });
        }
    }

    /// Freezes the job's cgroup; whether it could.
    pub(super) fn freeze(&mut self, job: JobId) -> bool {
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get_mut(&job)) else {
            return false;
        };
        if procs.cgroup_procs.is_none() || procs.hold.killed {
            return false;
        }
        if procs.hold.frozen {
            return true;
        }
        match cgroups.set_frozen(job, true) {
            Ok(()) => {
                procs.hold.frozen = true;
                true
            }
            Err(error) => {
                tracing::warn!(job = %job, %error, "cannot freeze the job's cgroup");
                false
            }
        }
    }

    /// Thaws the job's cgroup if it is frozen.
    pub(super) fn thaw(&mut self, job: JobId) {
        let (Some(cgroups), Some(procs)) = (&self.cgroups, self.jobs.get_mut(&job)) else {
            return;
        };
        if !procs.hold.frozen {
            return;
        }
        match cgroups.set_frozen(job, false) {
            Ok(()) => procs.hold.frozen = false,
            Err(error) => tracing::error!(job = %job, %error, "cannot thaw the job's cgroup"),
        }
    }

    /// A rank of a switched-out job was continued, by someone other than
    /// scored (its owner can send its processes SIGCONT): the job must not
    /// run on hosts that another job now holds. Its cgroup is frozen,
    /// which no signal undoes, now and at every later stop; without a
    /// cgroup it is stopped again, and killed if this keeps happening.
    pub(super) fn continued_from_outside(&mut self, job: JobId, pid: i32, out: &mut Vec<Input>) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        procs.hold.rogue_continues += 1;
        let first = !procs.hold.freeze_on_stop;
        procs.hold.freeze_on_stop = true;
        if first {
            tracing::warn!(job = %job, pid, frozen = procs.cgroup_procs.is_some(), "a switched-out job was continued from outside; freezing it (or stopping it again without a cgroup)");
        }
        if self.freeze(job) {
            return;
        }
        self.send(job, Signal::SIGSTOP);
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if procs.hold.rogue_continues > ROGUE_CONTINUE_LIMIT {
            procs.hold.switched_out = false;
            procs.stop_wait = None;
            out.push(Input::StopFailed {
                job,
                reason: format!(
                    "its processes were continued from outside {} times while it was switched \
                     out, and no freezer can hold it",
                    procs.hold.rogue_continues
                ),
            });
        }
    }

    /// Polls the jobs with stops or a drain to confirm.
    pub(super) fn poll_waiting_jobs(&mut self, now: Instant, out: &mut Vec<Input>) {
        let jobs: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, procs)| procs.stop_wait.is_some() || procs.drain.is_some())
            .map(|(job, _)| *job)
            .collect();
        for job in jobs {
            self.poll_job(job, now, true, out);
        }
    }

    pub(super) fn poll_job(
        &mut self,
        job: JobId,
        now: Instant,
        fallback: bool,
        out: &mut Vec<Input>,
    ) {
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        let killed = procs.hold.killed;
        if let Some(wait) = procs.stop_wait.as_mut() {
            let extras = &procs.extras;
            let members = &procs.members;
            // A process of a cgroup asked to freeze that sleeps
            // uninterruptibly (frozen, or in a system call) freezes before
            // it can return to user code.
            let freezing = procs.hold.frozen;
            wait.extras.retain(|pid| {
                let start = extras
                    .get(pid)
                    .map(|extra| extra.start)
                    .or_else(|| members.get(pid).map(|member| member.stat.start));
                match (start, procfs::read_stat(*pid)) {
                    (Some(start), Some(stat)) => stat.start == start && !held(&stat, freezing),
                    _ => false,
                }
            });
            let waited = now.duration_since(wait.since);
            if wait.freezing
                && self
                    .cgroups
                    .as_ref()
                    .is_some_and(|cgroups| cgroups.is_frozen(job))
            {
                // Frozen: none of its processes can run until thawed.
                wait.children.clear();
                wait.extras.clear();
            } else if fallback
                && procs.hold.by_freezer
                && !wait.freezing
                && !killed
                && waited >= RANKS_FREEZE_AFTER
                && procs.cgroup_procs.is_some()
                && !wait.children.is_empty()
            {
                // A rank of a job switched by its ranks that has yet to
                // take its stop must wait for a CPU (its job's other
                // processes busy on the same ones): the job's cgroup is
                // frozen, which holds each of its processes without
                // running it (a process marked cannot return to user code
                // without freezing), its rest gathered with it.
                if let Some(cgroups) = &self.cgroups {
                    match cgroups.set_frozen(job, true) {
                        Ok(()) => {
                            tracing::debug!(job = %job, "its ranks wait for a CPU to stop; freezing the job");
                            wait.freezing = true;
                            procs.hold.frozen = true;
                            wait.children.clear();
                        }
                        Err(error) => {
                            tracing::warn!(job = %job, %error, "cannot freeze the job's cgroup")
                        }
                    }
                }
            } else if fallback
                && !wait.freezing
                && !killed
                && waited >= FREEZE_AFTER
                && procs.cgroup_procs.is_some()
                && !(wait.children.is_empty() && wait.extras.is_empty())
            {
                if let Some(cgroups) = &self.cgroups {
                    match cgroups.set_frozen(job, true) {
                        Ok(()) => {
                            tracing::warn!(
                                job = %job,
                                "the job's stop was not confirmed within {}ms (something may be continuing it from outside); freezing it",
                                FREEZE_AFTER.as_millis()
                            );
                            wait.freezing = true;
                            procs.hold.frozen = true;
                            procs.hold.freeze_on_stop = true;
                        }
                        Err(error) => {
                            tracing::warn!(job = %job, %error, "cannot freeze the job's cgroup")
                        }
                    }
                }
            }
            if fallback && waited >= STOP_TIMEOUT {
                let left = wait.children.len() + wait.extras.len();
                if left > 0 {
                    tracing::warn!(job = %job, left, "the job's stop was not confirmed in time; killing it");
                    procs.stop_wait = None;
                    out.push(Input::StopFailed {
                        job,
                        reason: format!(
                            "{left} of its processes did not stop within {}s of being switched \
                             out (something kept continuing them, or they could not stop)",
                            STOP_TIMEOUT.as_secs()
                        ),
                    });
                    return;
                }
            }
        }
        let Some(procs) = self.jobs.get_mut(&job) else {
            return;
        };
        if let Some(wait) = procs.stop_wait.as_mut() {
            if fallback && now.duration_since(wait.since) >= CONFIRM_FALLBACK {
                // wait4 should have reported these; trust /proc if it says
                // stopped, or if the child can only stop later (a vfork()
                // parent whose child is stopped: it never reports a stop
                // until its job is continued, and waiting for it stalled
                // every switch of its hosts).
                let freezing = procs.hold.frozen;
                wait.children.retain(|pid| {
                    procfs::read_stat(*pid).is_none_or(|stat| !held(&stat, freezing))
                });
            }
        }
        if let Some(drain) = procs.drain.as_mut() {
            drain.pids.retain(|(pid, start)| {
                procfs::read_stat(*pid).is_some_and(|stat| stat.start == *start && !stat.is_dead())
            });
            let mut left = drain.pids.len();
            if let (true, Some(cgroups)) = (drain.in_cgroup, &self.cgroups) {
                left += if now.duration_since(drain.killed) >= DRAIN_KILL_EVERY {
                    drain.killed = now;
                    cgroups.kill_job(job)
                } else {
                    cgroups.pids(job).len()
                };
            }
            let timed_out = now.duration_since(drain.since) >= DRAIN_TIMEOUT;
            if left == 0 || timed_out {
                if timed_out {
                    tracing::warn!(job = %job, left, "processes of a finished job would not die");
                }
                procs.drain = None;
                procs.extras.clear();
                procs.members.clear();
                Self::gone(job, procs, &self.state, out);
                return;
            }
        }
        self.check_stop(job, out);
    }
}

/// The processes of a stopping job that are confirmed stopped through
/// /proc: those held through a pidfd, and of the other members of its
/// cgroup those last seen running (at most `MEMBER_READS_PER_SAMPLE`).
fn pending_members(procs: &super::JobProcs) -> BTreeSet<i32> {
    procs
        .extras
        .keys()
        .copied()
        .chain(
            procs
                .members
                .iter()
                .filter(|(_, member)| member.stat.state == b'R')
                .map(|(pid, _)| *pid)
                .take(MEMBER_READS_PER_SAMPLE),
        )
        .collect()
}

/// Whether a process read from /proc cannot run user code: it is
/// stopped (`procfs::cannot_run`), or it sleeps uninterruptibly in a
/// cgroup asked to freeze (`freezing`), frozen or on its way to it.
fn held(stat: &procfs::Stat, freezing: bool) -> bool {
    procfs::cannot_run(stat) || freezing && stat.state == b'D'
}

/// How long scored first waits for the ranks of a stop to take it before
/// it looks at them again (`wait_for_stops`), and how many such looks it
/// takes, each wait twice the last: a rank that shares scored's CPU needs
/// some 30 to 40 µs of it to take its SIGSTOP, and a wait that ends
/// sooner takes the CPU back from it.
const LOOK_PAUSE: Duration = Duration::from_micros(40);
const LOOKS: u32 = 4;

/// How long the ranks of a job switched by its ranks may take to stop
/// before the job is frozen (see `poll_job`): a sleeping rank on a CPU of
/// its own stops in microseconds.
const RANKS_FREEZE_AFTER: Duration = Duration::from_millis(1);

/// The CPUs scored may run on.
fn online_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

fn signal_from(signal: i32) -> Option<Signal> {
    Signal::try_from(signal).ok()
}

#[cfg(test)]
mod tests;
