//! The CPUs' wake-up latency held at zero while a switch waits for its
//! stops, and while a launch creates its processes, through the kernel's
//! PM QoS request (`/dev/cpu_dma_latency`): an idle CPU then polls for
//! work instead of halting (through the cpuidle driver, which honours it;
//! where none is registered, as on some virtual machines, an idle CPU
//! halts whatever the request). On a virtual machine a halted vCPU is
//! woken through the host, 40 to 120 µs, and a switch's confirmation ends
//! with such a wakeup (the keeper's answer, or a rank's stop, reaching
//! scored's CPU, idle since it sent the signals). A program that stops
//! processes itself waits in `waitpid` on a CPU the stopping ranks keep
//! busy; scored, which hears of each stop second-hand, holds the request
//! instead, for as long as the switch's stops are awaited and no longer
//! (the event that sent the signals lets go of it once carried out,
//! confirmed or not), so that idle CPUs poll for well under a millisecond
//! a switch.
//!
//! A launch is a chain of such wakeups (scored, the job's keeper, the
//! rank between its clone and its exec, scored again), each on a CPU
//! that may have gone idle meanwhile. A submission holds the request from
//! its arrival; the event lets go of it unless a launch is then creating
//! processes, which keeps it until no launch is (every rank exec'd, or
//! the launch failed or was killed) or until [`LAUNCH_HOLD`] after the
//! last launch began, whichever comes first: a launch its user stops, or
//! whose exec waits for a file system, never keeps idle CPUs polling.
//!
//! The request is the kernel's own interface for it (see the kernel's
//! `Documentation/power/pm_qos_interface.rst`): open the device, write a
//! 32-bit value (0: no latency; -1: the default, no constraint), and the
//! request lasts while the descriptor is open. It needs root; without
//! the device, or its permission, switches and launches go on without it.
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::time::{Duration, Instant};

/// The device of the CPU latency request.
const DEVICE: &str = "/dev/cpu_dma_latency";

/// The longest a launch holds the request: a launch of a few ranks has
/// created them well within it (2 to 10 ms here, 16 ranks included).
pub const LAUNCH_HOLD: Duration = Duration::from_millis(20);

/// The daemon's CPU latency request, held only during a switch's stops
/// and while launches create their processes, for at most [`LAUNCH_HOLD`].
#[derive(Debug, Default)]
pub struct LatencyHold {
    /// The open request; `None` where the device cannot be used.
    device: Option<File>,
    /// Whether the request asks for no latency now.
    held: bool,
    /// A switch's stops are awaited.
    switch: bool,
    /// Until when launches keep it held, while one is in progress.
    launch_until: Option<Instant>,
}

impl LatencyHold {
    /// Opens the daemon's request, at no constraint (the kernel adds it at
    /// the default when the device is opened).
    pub fn open() -> LatencyHold {
        let device = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(DEVICE)
            .ok()
            .filter(|file| {
                file.metadata()
                    .is_ok_and(|meta| meta.file_type().is_char_device())
            });
        if device.is_none() {
            tracing::debug!(
                "no CPU latency request ({DEVICE}): idle CPUs may halt during switches"
            );
        }
        LatencyHold {
            device,
            ..LatencyHold::default()
        }
    }

    /// Holds it while a switch's stops are awaited.
    pub fn hold_for_switch(&mut self) {
        self.switch = true;
        self.apply();
    }

    /// The switch's stops are over.
    pub fn end_switch(&mut self) {
        self.switch = false;
        self.apply();
    }

    /// Holds it for a launch beginning at `now`: until `LAUNCH_HOLD` from
    /// now at the latest.
    pub fn hold_for_launch(&mut self, now: Instant) {
        let until = now + LAUNCH_HOLD;
        self.launch_until = Some(self.launch_until.map_or(until, |old| old.max(until)));
        self.apply();
    }

    /// No launch needs it any more, or their time is up.
    pub fn end_launches(&mut self) {
        self.launch_until = None;
        self.apply();
    }

    /// When the launches' hold ends, if they hold it.
    pub fn launch_deadline(&self) -> Option<Instant> {
        self.launch_until
    }

    /// Whether anything wants the request held.
    fn wanted(&self) -> bool {
        self.switch || self.launch_until.is_some()
    }

    /// Asks for no wake-up latency while anything wants it (idle CPUs
    /// poll), and lets go of it once nothing does (they may halt again).
    /// A request that could not be changed was dropped with its
    /// descriptor, which ends it as well.
    fn apply(&mut self) {
        if self.wanted() && !self.held {
            self.held = self.write(0);
        } else if !self.wanted() && self.held {
            self.write(-1);
            self.held = false;
        }
    }

    /// Writes `value` as the request; whether it was taken. One that is
    /// not is dropped: closing the descriptor removes the request.
    fn write(&mut self, value: i32) -> bool {
        let Some(device) = &mut self.device else {
            return false;
        };
        match device.write(&value.to_ne_bytes()) {
            Ok(4) => true,
            result => {
                tracing::warn!(
                    ?result,
                    "the CPU latency request could not be changed; it is dropped"
                );
                self.device = None;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_device_holding_changes_nothing() {
        let mut hold = LatencyHold::default();
        hold.hold_for_switch();
        assert!(!hold.held);
        hold.end_switch();
        assert!(!hold.held);
    }

    #[test]
    fn a_launch_holds_it_for_a_bounded_time_past_the_switch() {
        let mut hold = LatencyHold::default();
        let start = Instant::now();
        hold.hold_for_launch(start);
        hold.hold_for_switch();
        hold.end_switch();
        assert!(hold.wanted(), "the switch's end let go of a launch's hold");
        assert_eq!(hold.launch_deadline(), Some(start + LAUNCH_HOLD));
        // A later launch pushes the deadline back; an earlier one does not.
        hold.hold_for_launch(start + Duration::from_millis(5));
        hold.hold_for_launch(start);
        assert_eq!(
            hold.launch_deadline(),
            Some(start + Duration::from_millis(5) + LAUNCH_HOLD)
        );
        hold.end_launches();
        assert!(!hold.wanted());
        assert_eq!(hold.launch_deadline(), None);
    }
}
