//! Names of signals for messages: `SIGSEGV (segmentation fault)`, as a
//! shell reports a process that a signal ended.
//!
//! The numbers are Linux's on its common architectures (x86, Arm, RISC-V);
//! they come from the kernel's wait status on the same machine.
#![forbid(unsafe_code)]

/// Name and description of the standard signals, by number (index 0 unused).
const SIGNALS: [(&str, &str); 32] = [
    ("", ""),
    ("SIGHUP", "hangup"),
    ("SIGINT", "interrupt"),
    ("SIGQUIT", "quit"),
    ("SIGILL", "illegal instruction"),
    ("SIGTRAP", "trace/breakpoint trap"),
    ("SIGABRT", "aborted"),
    ("SIGBUS", "bus error"),
    ("SIGFPE", "floating point exception"),
    ("SIGKILL", "killed"),
    ("SIGUSR1", "user defined signal 1"),
    ("SIGSEGV", "segmentation fault"),
    ("SIGUSR2", "user defined signal 2"),
    ("SIGPIPE", "broken pipe"),
    ("SIGALRM", "alarm clock"),
    ("SIGTERM", "terminated"),
    ("SIGSTKFLT", "stack fault"),
    ("SIGCHLD", "child exited"),
    ("SIGCONT", "continued"),
    ("SIGSTOP", "stopped (signal)"),
    ("SIGTSTP", "stopped"),
    ("SIGTTIN", "stopped (tty input)"),
    ("SIGTTOU", "stopped (tty output)"),
    ("SIGURG", "urgent I/O condition"),
    ("SIGXCPU", "CPU time limit exceeded"),
    ("SIGXFSZ", "file size limit exceeded"),
    ("SIGVTALRM", "virtual timer expired"),
    ("SIGPROF", "profiling timer expired"),
    ("SIGWINCH", "window changed"),
    ("SIGIO", "I/O possible"),
    ("SIGPWR", "power failure"),
    ("SIGSYS", "bad system call"),
];

/// The first real-time signal the C library leaves to programs.
const SIGRTMIN: i32 = 34;
/// The last signal number.
const SIGRTMAX: i32 = 64;

/// `SIGSEGV (segmentation fault)`, `SIGRTMIN+2 (real-time signal 2)`, or
/// `signal N` for a number that names no signal.
pub fn describe(signal: i32) -> String {
    if let Some((name, text)) = usize::try_from(signal)
        .ok()
        .filter(|&idx| idx > 0)
        .and_then(|idx| SIGNALS.get(idx))
    {
        return format!("{name} ({text})");
    }
    if (SIGRTMIN..=SIGRTMAX).contains(&signal) {
        let offset = signal - SIGRTMIN;
        return format!("SIGRTMIN+{offset} (real-time signal {offset})");
    }
    format!("signal {signal}")
}

/// [`describe`] with `, core dumped` inside its parentheses when the
/// process wrote a core file (`SIGSEGV (segmentation fault, core dumped)`),
/// as a shell says `(core dumped)`.
pub fn describe_death(signal: i32, core_dumped: bool) -> String {
    let text = describe(signal);
    match (core_dumped, text.strip_suffix(')')) {
        (false, _) => text,
        (true, Some(open)) => format!("{open}, core dumped)"),
        (true, None) => format!("{text} (core dumped)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_as_a_shell_names_them() {
        assert_eq!(describe(11), "SIGSEGV (segmentation fault)");
        assert_eq!(describe(10), "SIGUSR1 (user defined signal 1)");
        assert_eq!(describe(3), "SIGQUIT (quit)");
        assert_eq!(describe(15), "SIGTERM (terminated)");
        assert_eq!(describe(31), "SIGSYS (bad system call)");
        assert_eq!(describe(36), "SIGRTMIN+2 (real-time signal 2)");
        assert_eq!(describe(0), "signal 0");
        assert_eq!(describe(32), "signal 32");
        assert_eq!(describe(65), "signal 65");
        assert_eq!(describe(-1), "signal -1");
        assert_eq!(
            describe_death(11, true),
            "SIGSEGV (segmentation fault, core dumped)"
        );
        assert_eq!(describe_death(11, false), "SIGSEGV (segmentation fault)");
        assert_eq!(describe_death(99, true), "signal 99 (core dumped)");
    }
}
