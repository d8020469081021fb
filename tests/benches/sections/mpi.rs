//! What gang scheduling is for: two MPI jobs of `cores` busy-polling
//! ranks each (a tight allreduce loop and a ping-pong, built with MPICH
//! and with OpenMPI, and Debian's NetPIPE on OpenMPI). Each round runs,
//! setting by setting, one job alone and then two at once (the other way
//! round in odd rounds), so that the machine's drift falls on both: under
//! the kernel (the MPI's own launcher twice, pinned alike) and under
//! scored at 100 and 10 ms slices; each pair against twice the one alone
//! of its round, medians and ranges over the rounds; the kernel unpinned
//! in the first rounds. Every job must exit 0 and print what its program
//! prints on success. Then the launch cost of PMI and PMIx: `scrun
//! -nodes=2 true` with and without them.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sections::launch::time_command;
use crate::{ms, online_cpus, pinned_hosts, quick, row, scaled, Row};
use scored_tests::*;

/// The loop: `loop allreduce|pingpong N` prints `... X us each` from rank 0.
const LOOP: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    int rank, i, n = atoi(argv[2]), pingpong = strcmp(argv[1], "pingpong") == 0;
    double t0, t, x = 1.0, y = 0.0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (i = 0; i < n; i++) {
        if (!pingpong) {
            MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        } else if (rank == 0) {
            MPI_Send(&x, 1, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&y, 1, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(&y, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&x, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD);
        }
    }
    t = MPI_Wtime() - t0;
    if (rank == 0)
        printf("%.3f us each\n", t / n * 1e6);
    MPI_Finalize();
    return 0;
}
"#;

/// An MPI: its compiler and its own launcher.
struct Mpi {
    name: &'static str,
    compiler: &'static str,
}

const MPIS: [Mpi; 2] = [
    Mpi {
        name: "MPICH",
        compiler: "mpicc.mpich",
    },
    Mpi {
        name: "OpenMPI",
        compiler: "mpicc.openmpi",
    },
];

impl Mpi {
    /// Compiles the loop into `dir`, or `None` without this MPI.
    fn compile(&self, dir: &Path) -> Option<PathBuf> {
        Command::new(self.compiler).arg("--version").output().ok()?;
        let src = dir.join("loop.c");
        std::fs::write(&src, LOOP).expect("write loop.c");
        let exe = dir.join(format!("mpi_loop_{}", self.name));
        let status = Command::new(self.compiler)
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("mpicc");
        status.success().then_some(exe)
    }

    /// The MPI's own launcher for `ranks` ranks of `argv`, rank i on
    /// core i when `pinned` (as scored pins rank i to host i's CPU: the
    /// two cases differ only in who decides when each rank runs).
    fn launcher(&self, argv: &[String], ranks: usize, pinned: bool) -> Command {
        let n = ranks.to_string();
        let mut command = match self.name {
            "MPICH" => {
                let mut command = Command::new("mpiexec.mpich");
                if pinned {
                    command.args(["-bind-to", "core"]);
                }
                command.args(["-n", &n]);
                command
            }
            _ => {
                let mut command = Command::new("mpirun.openmpi");
                command
                    .args(["--allow-run-as-root", "--oversubscribe", "--bind-to"])
                    .arg(if pinned { "core" } else { "none" })
                    .args(["-n", &n]);
                command
            }
        };
        command.args(argv);
        command
    }
}

/// What a workload's program prints when it succeeds.
#[derive(Clone, Copy)]
enum Program {
    /// The loop: one line, `X us each`, from rank 0.
    Loop,
    /// NetPIPE: a line per message size on standard error, 1 B to 4 KiB.
    NetPipe,
}

impl Program {
    /// The time per message a job printed, in µs (NetPIPE's at 1 B), or
    /// why its output is not what the program prints on success.
    fn per_message(self, output: &Output) -> Result<f64, String> {
        match self {
            Program::Loop => {
                let stdout = String::from_utf8_lossy(&output.stdout);
                let lines: Vec<&str> = stdout.lines().collect();
                let [line] = lines.as_slice() else {
                    return Err(format!("{} lines on standard output, not one", lines.len()));
                };
                line.strip_suffix(" us each")
                    .and_then(|value| value.parse::<f64>().ok())
                    .filter(|us| us.is_finite() && *us > 0.0)
                    .ok_or_else(|| format!("{line:?} is not `X us each`"))
            }
            Program::NetPipe => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let sizes: Vec<(u64, f64)> = stderr.lines().filter_map(netpipe_line).collect();
                let rising = sizes.windows(2).all(|pair| pair[0].0 < pair[1].0);
                match (sizes.first(), sizes.last()) {
                    (Some(&(1, us)), Some(&(4096, _))) if rising => Ok(us),
                    _ => Err(format!("NetPIPE's sizes are not 1 to 4096 B: {sizes:?}")),
                }
            }
        }
    }
}

/// The size and the one-way time of a line of NetPIPE's main loop,
/// `  0:       1 bytes  20000 times -->     17.07 Mbps in       0.45 usec`.
fn netpipe_line(line: &str) -> Option<(u64, f64)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [_, bytes, "bytes", _, "times", "-->", _, "Mbps", "in", usec, "usec"] => {
            Some((bytes.parse().ok()?, usec.parse().ok()?))
        }
        _ => None,
    }
}

/// The environment entry each process of a run inherits, to find them all.
const RUN_TAG: &str = "SCORED_BENCH_MPI_RUN";

/// `roots` and their descendants, by the kernel's lists of children: a
/// scan of every process's environment would wait on any process of the
/// machine caught in an exec.
fn descendants(roots: &[i32]) -> Vec<i32> {
    let mut found = Vec::new();
    let mut queue = roots.to_vec();
    while let Some(pid) = queue.pop() {
        if found.contains(&pid) {
            continue;
        }
        found.push(pid);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.filter_map(Result::ok) {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            queue.extend(
                children
                    .split_whitespace()
                    .filter_map(|child| child.parse::<i32>().ok()),
            );
        }
    }
    found
}

/// The processes under `roots` carrying `RUN_TAG=tag`, zombies left out.
fn run_processes(tag: &str, roots: &[i32]) -> Vec<i32> {
    let entry = format!("{RUN_TAG}={tag}");
    descendants(roots)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&b| b == 0)
                    .any(|var| var == entry.as_bytes())
            }) && alive(*pid)
        })
        .collect()
}

/// How jobs run at once ended.
#[derive(Clone, Copy)]
struct Ended {
    /// From the first start to the last end.
    seconds: f64,
    /// The largest time per message they printed, µs.
    us: f64,
}

/// Runs `commands` at once; how they ended, or `None` if they did not all
/// end within `cap` (then every process of the run is killed). Panics,
/// with the job's status and output, when a job exits other than 0 or
/// prints other than what `program` prints on success, and when a
/// process of the run outlives it under its launcher or under `daemons`.
fn run_together(
    commands: Vec<Command>,
    program: Program,
    cap: Duration,
    daemons: &[i32],
) -> Option<Ended> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let tag = format!(
        "{}.{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    let (sender, receiver) = std::sync::mpsc::channel();
    let start = Instant::now();
    let mut waiters = Vec::new();
    let mut roots = daemons.to_vec();
    for mut command in commands {
        let line = format!("{command:?}");
        command
            .env(RUN_TAG, &tag)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {line}: {err}"));
        roots.push(child.id() as i32);
        let sender = sender.clone();
        waiters.push(std::thread::spawn(move || {
            // Both pipes to their ends, then the exit status.
            let output = child.wait_with_output().expect("wait for a job");
            let _ = sender.send(Instant::now());
            (line, output)
        }));
    }
    drop(sender);
    let deadline = start + cap;
    let mut last = start;
    let mut n_ended = 0;
    while n_ended < waiters.len() {
        match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(end) => {
                last = last.max(end);
                n_ended += 1;
            }
            Err(_) => break,
        }
    }
    let stopped = n_ended < waiters.len();
    if stopped {
        // The launchers, their daemons and the ranks, wherever they hang.
        wait_until(Duration::from_secs(10), || {
            // The whole tree at once, before orphans leave it.
            let pids = run_processes(&tag, &roots);
            for pid in &pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            pids.is_empty()
        });
    }
    let outputs: Vec<(String, Output)> = waiters
        .into_iter()
        .map(|waiter| waiter.join().expect("a job's waiter"))
        .collect();
    // Nothing may spin on beside the next run.
    assert!(
        wait_until(Duration::from_secs(10), || run_processes(&tag, &roots)
            .is_empty()),
        "processes of {:?} outlived them: {:?}",
        outputs.iter().map(|(line, _)| line).collect::<Vec<_>>(),
        run_processes(&tag, &roots)
    );
    if stopped {
        return None;
    }
    let mut us: f64 = 0.0;
    for (line, output) in &outputs {
        let per_message = if output.status.success() {
            program.per_message(output)
        } else {
            Err(output.status.to_string())
        };
        match per_message {
            Ok(value) => us = us.max(value),
            Err(why) => panic!(
                "{line}: {why}\n--- standard output\n{}--- standard error\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }
    Some(Ended {
        seconds: (last - start).as_secs_f64(),
        us,
    })
}

/// The time the CPUs were stolen by the hypervisor, and all CPU time, in
/// ticks (`/proc/stat`).
fn steal_and_total() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .find_map(|line| line.strip_prefix("cpu "))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // user nice system idle iowait irq softirq steal guest guest_nice; the
    // guest times are counted in user and nice already.
    let total = ticks.iter().take(8).sum();
    (ticks.get(7).copied().unwrap_or(0), total)
}

pub(crate) fn mpi(rows: &mut Vec<Row>) {
    let sandbox = Sandbox::new();
    // One daemon per slice length, two hosts of one CPU each, for the
    // whole section.
    let daemons: Vec<Daemon> = ["100ms", "10ms"]
        .iter()
        .map(|slice| {
            Daemon::builder()
                .log("scored=info")
                .hosts(&pinned_hosts())
                .timeslice(slice)
                .start()
        })
        .collect();
    let (steal_before, total_before) = steal_and_total();
    for mpi in &MPIS {
        match mpi.compile(&sandbox.path) {
            Some(exe) => gang(mpi, &exe, &daemons, rows),
            None => {
                eprintln!("  skipped: {} is not installed", mpi.compiler);
                rows.push(row(
                    &format!("{} under gang scheduling", mpi.name),
                    format!("not measured: no {}", mpi.compiler),
                    "-".into(),
                    "-".into(),
                    "-",
                ));
            }
        }
    }
    let (steal_after, total_after) = steal_and_total();
    rows.push(row(
        "CPU time stolen by the hypervisor during the MPI runs",
        format!(
            "{:.1} %",
            100.0 * (steal_after - steal_before) as f64
                / (total_after - total_before).max(1) as f64
        ),
        "-".into(),
        "-".into(),
        "for the record",
    ));
    drop(daemons);
    launch_cost(rows);
}

/// The median, least and largest of `values` (infinite for runs stopped).
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    let median = crate::median(&mut sorted);
    (median, sorted[0], sorted[sorted.len() - 1])
}

/// `1.00× (0.98–1.03)`; runs stopped count as infinite, and as more than
/// the least of `bounds` (their caps against their baselines).
fn ratio_text(ratios: &[f64], bounds: &[f64]) -> String {
    let (median, least, largest) = spread(ratios);
    let bound = bounds.iter().copied().fold(f64::INFINITY, f64::min);
    let n_stopped = bounds.len();
    if median.is_infinite() {
        format!("> {bound:.1}× ({n_stopped} of {} stopped)", ratios.len())
    } else if largest.is_infinite() {
        format!("{median:.2}× ({least:.2} to > {bound:.1}, {n_stopped} stopped)")
    } else {
        format!("{median:.2}× ({least:.2}–{largest:.2})")
    }
}

/// `0.70 s (0.68–0.73), 0.97 µs per message` over the runs that ended.
fn time_text(ended: &[Ended]) -> String {
    let seconds: Vec<f64> = ended.iter().map(|run| run.seconds).collect();
    let us: Vec<f64> = ended.iter().map(|run| run.us).collect();
    if seconds.is_empty() {
        return "stopped".into();
    }
    let (median, least, largest) = spread(&seconds);
    format!(
        "{median:.2} s ({least:.2}–{largest:.2}), {:.2} µs per message",
        spread(&us).0
    )
}

/// The gang table of one MPI, under `daemons` at 100 and 10 ms slices.
fn gang(mpi: &Mpi, exe: &Path, daemons: &[Daemon], rows: &mut Vec<Row>) {
    let cores = online_cpus().len().max(1);
    let ranks = cores.min(2);
    // Where the ranks of scored's jobs live.
    let under: Vec<i32> = daemons.iter().map(|daemon| daemon.pid() as i32).collect();
    let nodes = format!("-nodes={ranks}");
    let exe = exe.to_str().expect("UTF-8 path").to_string();
    let mut workloads = Vec::new();
    for kind in ["allreduce", "pingpong"] {
        let iterations = scaled(600_000, 200_000);
        workloads.push((
            format!("{kind} ({ranks} ranks, {iterations} iterations)"),
            vec![exe.clone(), kind.to_string(), iterations.to_string()],
            Program::Loop,
        ));
    }
    // Debian's NetPIPE on OpenMPI (netpipe-openmpi): ping-pongs of 1 B
    // to 4 KiB, a fixed number of each, results to /dev/null.
    if mpi.name == "OpenMPI" && Command::new("NPopenmpi").arg("-v").output().is_ok() {
        let repeats = scaled(2_000, 500).to_string();
        workloads.push((
            format!("NetPIPE ({ranks} ranks, 1 B to 4 KiB, {repeats} each; per message: its one-way time at 1 B)"),
            [
                "NPopenmpi",
                "-l",
                "1",
                "-u",
                "4096",
                "-p",
                "0",
                "-n",
                &repeats,
                "-o",
                "/dev/null",
            ]
            .map(String::from)
            .to_vec(),
            Program::NetPipe,
        ));
    }
    for (kind, argv, program) in &workloads {
        let program = *program;
        let scrun = |daemon: &Daemon| {
            let mut args = vec![nodes.as_str()];
            args.extend(argv.iter().map(String::as_str));
            daemon.scrun(&args)
        };
        let launcher = |pinned| mpi.launcher(argv, ranks, pinned);
        // Each setting starts one job; the kernel's first.
        let mut settings: Vec<(String, Box<dyn Fn() -> Command + '_>)> = vec![(
            "under the kernel, pinned alike (its launcher, rank i on core i)".into(),
            Box::new(|| launcher(true)),
        )];
        for (daemon, slice) in daemons.iter().zip(["100 ms", "10 ms"]) {
            settings.push((
                format!("under scored, {slice} slices"),
                Box::new(move || scrun(daemon)),
            ));
        }
        // A job alone that does not end within this is a failure.
        let alone_cap = Duration::from_secs(scaled(60, 30));
        // Unmeasured: the first start of each setting reads in the programs
        // and libraries; it gives the pairs' first cap.
        let mut latest: Vec<f64> = settings
            .iter()
            .map(|(name, start)| {
                run_together(vec![start()], program, alone_cap, &under)
                    .unwrap_or_else(|| panic!("{kind}: one job {name} ran past {alone_cap:?}"))
                    .seconds
            })
            .collect();
        // Pairs are stopped at 10 times twice one alone (the kernel may
        // take minutes), the kernel's unpinned at 5 (busy-polling ranks
        // sharing CPUs unpinned may take tens of times longer, and waiting
        // for them would be most of the section's time); a ratio stopped is
        // infinite.
        const BOUND: f64 = 10.0;
        const UNPINNED_BOUND: f64 = 5.0;
        let n_settings = settings.len();
        let mut alone: Vec<Vec<Ended>> = vec![Vec::new(); n_settings];
        let mut pairs: Vec<Vec<Ended>> = vec![Vec::new(); n_settings];
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); n_settings];
        let mut bounds: Vec<Vec<f64>> = vec![Vec::new(); n_settings + 1];
        let mut against_kernel: Vec<Vec<f64>> = vec![Vec::new(); n_settings];
        let mut unpinned: Vec<Ended> = Vec::new();
        let mut unpinned_ratios = Vec::new();
        let (rounds, unpinned_rounds) = (scaled(5, 2), scaled(2, 1));
        for round in 0..rounds {
            let mut said = format!("  {kind}, round {}, alone/two:", round + 1);
            for (idx, (name, start)) in settings.iter().enumerate() {
                let one = || {
                    run_together(vec![start()], program, alone_cap, &under)
                        .unwrap_or_else(|| panic!("{kind}: one job {name} ran past {alone_cap:?}"))
                };
                let two = |alone_seconds: f64| {
                    let cap = Duration::from_secs_f64(2.0 * BOUND * alone_seconds);
                    (
                        cap,
                        run_together(vec![start(), start()], program, cap, &under),
                    )
                };
                // Alone first in even rounds, the pair first in odd ones.
                let (single, (cap, pair)) = if round % 2 == 0 {
                    let single = one();
                    (single, two(single.seconds))
                } else {
                    let pair = two(latest[idx]);
                    (one(), pair)
                };
                latest[idx] = single.seconds;
                let ratio = match pair {
                    Some(pair) => {
                        pairs[idx].push(pair);
                        pair.seconds / (2.0 * single.seconds)
                    }
                    // Gang must end what it runs: only the kernel may be stopped.
                    None if idx > 0 => panic!("{kind}: two jobs {name} ran past {cap:?}"),
                    None => {
                        bounds[idx].push(cap.as_secs_f64() / (2.0 * single.seconds));
                        f64::INFINITY
                    }
                };
                said += &format!(
                    " {:.2}/{:.2} s",
                    single.seconds,
                    ratio * 2.0 * single.seconds
                );
                ratios[idx].push(ratio);
                alone[idx].push(single);
                against_kernel[idx].push(single.seconds / alone[0][alone[idx].len() - 1].seconds);
            }
            if round < unpinned_rounds {
                let single = latest[0];
                let cap = Duration::from_secs_f64(2.0 * UNPINNED_BOUND * single);
                let pair =
                    run_together(vec![launcher(false), launcher(false)], program, cap, &under);
                if pair.is_none() {
                    bounds[n_settings].push(UNPINNED_BOUND);
                }
                unpinned_ratios
                    .push(pair.map_or(f64::INFINITY, |pair| pair.seconds / (2.0 * single)));
                unpinned.extend(pair);
                said += &format!(
                    ", unpinned {:.2} s",
                    pair.map_or(f64::INFINITY, |pair| pair.seconds)
                );
            }
            eprintln!("{said}");
        }
        let title = |what: &str| format!("{} {kind}: {what}", mpi.name);
        let kernel = &settings[0].0;
        rows.push(row(
            &title(&format!("one job alone {kernel}")),
            time_text(&alone[0]),
            "-".into(),
            "-".into(),
            "the baseline",
        ));
        rows.push(row(
            &title("two jobs under the kernel, pinned alike"),
            time_text(&pairs[0]),
            "twice one alone under the kernel, same round".into(),
            ratio_text(&ratios[0], &bounds[0]),
            "for comparison",
        ));
        rows.push(row(
            &title(&format!(
                "two jobs under the kernel, unpinned (the first {unpinned_rounds} rounds)"
            )),
            time_text(&unpinned),
            "twice one alone under the kernel, same round".into(),
            ratio_text(&unpinned_ratios, &bounds[n_settings]),
            "for comparison",
        ));
        for (idx, (name, _)) in settings.iter().enumerate().skip(1) {
            rows.push(row(
                &title(&format!("one job alone {name}")),
                time_text(&alone[idx]),
                "one alone under the kernel, same round".into(),
                ratio_text(&against_kernel[idx], &[]),
                "1.00×",
            ));
            rows.push(row(
                &title(&format!("two jobs {name}")),
                time_text(&pairs[idx]),
                format!("twice one alone {name}, same round"),
                ratio_text(&ratios[idx], &bounds[idx]),
                if idx == 1 {
                    "within 1.05×"
                } else {
                    "within 1.1×"
                },
            ));
        }
    }
}

/// The launch cost of PMI and of PMIx, for a program that never uses them.
fn launch_cost(rows: &mut Vec<Row>) {
    let daemon = Daemon::builder()
        .log("scored=info")
        .hosts(&pinned_hosts())
        .start();
    let rounds = scaled(40, 10);
    let mut pmi = Vec::new();
    let mut auto = Vec::new();
    let mut without = Vec::new();
    // Interleaved, so that the machine's other load falls on all alike.
    for _ in 0..if quick() { 2 } else { 4 } {
        pmi.push(time_command(
            || daemon.run(&["-nodes=2,mpi=pmi2", "true"]).status.success(),
            rounds,
        ));
        auto.push(time_command(
            || daemon.run(&["-nodes=2", "true"]).status.success(),
            rounds,
        ));
        without.push(time_command(
            || daemon.run(&["-nodes=2,mpi=none", "true"]).status.success(),
            rounds,
        ));
    }
    let pmi = crate::median(&mut pmi);
    let auto = crate::median(&mut auto);
    let without = crate::median(&mut without);
    rows.push(row(
        "launch `scrun -nodes=2 true` with PMI-2 (`-mpi=pmi2`)",
        ms(pmi),
        format!("{} (-mpi=none)", ms(without)),
        format!("{:+.3} ms", (pmi - without) * 1e3),
        "nothing measurable",
    ));
    rows.push(row(
        "launch `scrun -nodes=2 true` with PMI and PMIx (default)",
        ms(auto),
        format!("{} (-mpi=none)", ms(without)),
        format!("{:+.3} ms", (auto - without) * 1e3),
        "the PMIx server's start",
    ));
}
