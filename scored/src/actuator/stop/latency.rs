//! The CPUs' wake-up latency held at zero while a switch waits for its
//! stops, through the kernel's PM QoS request (`/dev/cpu_dma_latency`):
//! an idle CPU then polls for work instead of halting. On a virtual
//! machine a halted vCPU is woken through the host, 70 to 120 µs here,
//! and a switch's confirmation ends with such a wakeup (the keeper's
//! answer, or a rank's stop, reaching scored's CPU, idle since it sent
//! the signals). A program that stops processes itself waits in
//! `waitpid` on a CPU the stopping ranks keep busy; scored, which hears
//! of each stop second-hand, holds the request instead, for as long as
//! the switch's stops are awaited and no longer (the event that sent the
//! signals lets go of it once carried out, confirmed or not), so that
//! idle CPUs poll for well under a millisecond a switch.
//!
//! The request is the kernel's own interface for it (see the kernel's
//! `Documentation/power/pm_qos_interface.rst`): open the device, write a
//! 32-bit value (0: no latency; -1: the default, no constraint), and the
//! request lasts while the descriptor is open. It needs root; without
//! the device, or its permission, switches go on without it.
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

/// The device of the CPU latency request.
const DEVICE: &str = "/dev/cpu_dma_latency";

/// The daemon's CPU latency request, held only during a switch's stops.
#[derive(Debug, Default)]
pub struct LatencyHold {
    /// The open request; `None` where the device cannot be used.
    device: Option<File>,
    /// Whether the request asks for no latency now.
    held: bool,
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
            held: false,
        }
    }

    /// Asks for no wake-up latency: idle CPUs poll from now on.
    pub fn hold(&mut self) {
        if !self.held {
            self.held = self.write(0);
        }
    }

    /// Lets go of it: idle CPUs may halt again. (A request that could not
    /// be changed was dropped with its descriptor, which ends it as well.)
    pub fn release(&mut self) {
        if self.held {
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
        hold.hold();
        assert!(!hold.held);
        hold.release();
        assert!(!hold.held);
    }
}
