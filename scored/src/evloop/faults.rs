//! Fault injection for the end-to-end tests: panics asked for through
//! `SCORED_TEST_PANIC_ON`, `SCORED_NO_CHECKPOINT`, which turns the
//! checkpoint off so that the benchmark can measure what it costs, and
//! `SCORED_TEST_MAX_JOB_PROCESSES`, a lower limit of processes a job may
//! have, so that a test can reach it.
//!
//! Only with the `fault-injection` feature, which the test harness builds
//! the daemon with and a release build does not enable: without it every
//! hook is an empty function the compiler removes, and the binary carries
//! no trace of them.

#[cfg(feature = "fault-injection")]
pub(super) use hooks::*;
#[cfg(not(feature = "fault-injection"))]
pub(super) use off::*;

/// The most processes a job may have: `default`, or in a build with
/// fault injection the value of `SCORED_TEST_MAX_JOB_PROCESSES` when set
/// (read once).
pub(crate) fn max_job_processes(default: usize) -> usize {
    #[cfg(feature = "fault-injection")]
    {
        static SET: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
        if let Some(limit) = *SET.get_or_init(|| {
            std::env::var("SCORED_TEST_MAX_JOB_PROCESSES")
                .ok()?
                .parse()
                .ok()
        }) {
            return limit;
        }
    }
    default
}

#[cfg(feature = "fault-injection")]
mod hooks {
    use std::path::PathBuf;

    use scored_core::core::Input;

    /// `SCORED_NO_CHECKPOINT=1` (read once): keep no checkpoint, so that a
    /// panic restarts from the state at the panic. It exists so that the
    /// benchmark can measure what the checkpoint costs, in the same run.
    pub(in crate::evloop) fn checkpoints_off() -> bool {
        static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OFF.get_or_init(|| {
            std::env::var_os("SCORED_NO_CHECKPOINT").is_some_and(|value| value == "1")
        })
    }

    /// The test-only way to make scored panic, from the environment variable
    /// `SCORED_TEST_PANIC_ON` that only the end-to-end tests set (read once):
    /// `LINE` panics when the console line is received, `after:LINE` once the
    /// core has applied it and its actions were carried out (before the
    /// reply), `mid-switch:FILE` in a switch that stops several jobs, after
    /// the first was stopped and before the next is, and `after-exit:FILE`
    /// once a rank's exit has been reaped and before the core hears of it;
    /// the last two when FILE exists (it is removed first, so that each panic
    /// is asked for by creating it).
    #[derive(Debug)]
    pub(in crate::evloop) enum PanicHook {
        On(String),
        After(String),
        MidSwitch(PathBuf),
        AfterExit(PathBuf),
    }

    pub(in crate::evloop) fn panic_hook() -> Option<&'static PanicHook> {
        static HOOK: std::sync::OnceLock<Option<PanicHook>> = std::sync::OnceLock::new();
        HOOK.get_or_init(|| {
            let value = std::env::var("SCORED_TEST_PANIC_ON").ok()?;
            Some(if let Some(line) = value.strip_prefix("after:") {
                PanicHook::After(line.to_string())
            } else if let Some(file) = value.strip_prefix("mid-switch:") {
                PanicHook::MidSwitch(PathBuf::from(file))
            } else if let Some(file) = value.strip_prefix("after-exit:") {
                PanicHook::AfterExit(PathBuf::from(file))
            } else {
                PanicHook::On(value)
            })
        })
        .as_ref()
    }

    /// Panics if the hook asks for it on receiving `line`.
    pub(in crate::evloop) fn panic_on_line(line: &str) {
        if let Some(PanicHook::On(trigger)) = panic_hook() {
            if trigger == line {
                panic!("injected panic on the console line {line:?} (SCORED_TEST_PANIC_ON)");
            }
        }
    }

    /// Whether the hook asks for a panic once `line` has been applied.
    pub(in crate::evloop) fn panics_after_line(line: &str) -> bool {
        matches!(panic_hook(), Some(PanicHook::After(trigger)) if trigger == line)
    }

    /// Panics if the hook asks for it once `line` has been applied.
    pub(in crate::evloop) fn panic_after_line(line: &str) {
        if let Some(PanicHook::After(trigger)) = panic_hook() {
            if trigger == line {
                panic!(
                    "injected panic after applying the console line {line:?} (SCORED_TEST_PANIC_ON)"
                );
            }
        }
    }

    /// Panics if the hook asks for it in the middle of a switch.
    pub(in crate::evloop) fn panic_mid_switch() {
        if let Some(PanicHook::MidSwitch(file)) = panic_hook() {
            if std::fs::remove_file(file).is_ok() {
                panic!("injected panic in the middle of a switch (SCORED_TEST_PANIC_ON)");
            }
        }
    }

    /// Panics if the hook asks for it once a rank's exit is among `inputs`.
    pub(in crate::evloop) fn panic_after_exit(inputs: &[Input]) {
        if let Some(PanicHook::AfterExit(file)) = panic_hook() {
            let exited = inputs
                .iter()
                .any(|input| matches!(input, Input::RankExited { .. }));
            if exited && std::fs::remove_file(file).is_ok() {
                panic!("injected panic after reaping a rank (SCORED_TEST_PANIC_ON)");
            }
        }
    }
}

/// The hooks of a daemon built without the feature: nothing happens.
#[cfg(not(feature = "fault-injection"))]
mod off {
    use scored_core::core::Input;

    /// The checkpoint is always kept.
    #[inline(always)]
    pub(in crate::evloop) fn checkpoints_off() -> bool {
        false
    }

    #[inline(always)]
    pub(in crate::evloop) fn panic_on_line(_line: &str) {}

    #[inline(always)]
    pub(in crate::evloop) fn panics_after_line(_line: &str) -> bool {
        false
    }

    #[inline(always)]
    pub(in crate::evloop) fn panic_after_line(_line: &str) {}

    #[inline(always)]
    pub(in crate::evloop) fn panic_mid_switch() {}

    #[inline(always)]
    pub(in crate::evloop) fn panic_after_exit(_inputs: &[Input]) {}
}
