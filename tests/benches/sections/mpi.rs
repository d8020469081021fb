//! What gang scheduling is for: two MPI jobs of `cores` busy-polling
//! ranks each (a tight allreduce loop and a ping-pong, built with MPICH
//! and with OpenMPI, and Debian's NetPIPE on OpenMPI), one alone, both at once under the kernel (the MPI's
//! own launcher twice, oversubscribed), and both under scored at 500, 100
//! and 10 ms slices; the time until both finish against twice one alone,
//! and the time per message. Then the launch cost of PMI and PMIx:
//! `scrun -nodes=2 true` with and without them.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

/// Runs `commands` at once; the time until all end and the largest
/// per-message time they printed, or `None` if they did not end within
/// `cap` (then they are killed).
fn run_together(commands: Vec<Command>, cap: Duration) -> Option<(f64, f64)> {
    let start = Instant::now();
    let mut children: Vec<Child> = commands
        .into_iter()
        .map(|mut command| {
            command
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut done = vec![false; children.len()];
    while !done.iter().all(|d| *d) {
        if start.elapsed() > cap {
            for child in &mut children {
                // The whole group: mpiexec and its ranks.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
            }
            return None;
        }
        for (child, done) in children.iter_mut().zip(done.iter_mut()) {
            if !*done && child.try_wait().expect("try_wait").is_some() {
                *done = true;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut per_message: f64 = 0.0;
    for child in &mut children {
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut out);
        }
        // NetPIPE prints its own lines: no time per message.
        let us: f64 = out
            .split_whitespace()
            .next()
            .and_then(|value| value.parse().ok())
            .unwrap_or(f64::NAN);
        per_message = per_message.max(us);
    }
    Some((elapsed, per_message))
}

pub(crate) fn mpi(rows: &mut Vec<Row>) {
    let sandbox = Sandbox::new();
    for mpi in &MPIS {
        match mpi.compile(&sandbox.path) {
            Some(exe) => gang(mpi, &exe, rows),
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
    launch_cost(rows);
}

/// The gang table of one MPI.
fn gang(mpi: &Mpi, exe: &Path, rows: &mut Vec<Row>) {
    let cores = online_cpus().len().max(1);
    let ranks = cores.min(2);
    // One daemon per slice length, two hosts of one CPU each.
    let slices = ["500ms", "100ms", "10ms"];
    let daemons: Vec<Daemon> = slices
        .iter()
        .map(|slice| {
            Daemon::builder()
                .log("scored=info")
                .hosts(&pinned_hosts())
                .timeslice(slice)
                .start()
        })
        .collect();
    let nodes = format!("-nodes={ranks}");
    let exe = exe.to_str().expect("UTF-8 path").to_string();
    let mut workloads = Vec::new();
    for kind in ["allreduce", "pingpong"] {
        let iterations = scaled(600_000, 200_000);
        workloads.push((
            format!("{kind} ({ranks} ranks, {iterations} iterations)"),
            vec![exe.clone(), kind.to_string(), iterations.to_string()],
        ));
    }
    // Debian's NetPIPE on OpenMPI (netpipe-openmpi): ping-pongs of 1 B
    // to 4 KiB, a fixed number of each, results to /dev/null.
    if mpi.name == "OpenMPI" && Command::new("NPopenmpi").arg("-v").output().is_ok() {
        let repeats = scaled(20_000, 5_000).to_string();
        workloads.push((
            format!("NetPIPE ({ranks} ranks, 1 B to 4 KiB, {repeats} each)"),
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
        ));
    }
    for (kind, argv) in &workloads {
        let scrun = |daemon: &Daemon| {
            let mut args = vec![nodes.as_str()];
            args.extend(argv.iter().map(String::as_str));
            let mut command = daemon.scrun(&args);
            command.stdin(Stdio::null());
            command
        };
        let launcher = |pinned| mpi.launcher(argv, ranks, pinned);
        // Each configuration once per round, the rounds interleaved, so
        // that the machine's other load falls on all alike; medians.
        let names = [
            "one job alone under the kernel (its launcher, rank i on core i)",
            "two jobs under the kernel, pinned alike (its launcher twice)",
            "two jobs under the kernel, unpinned (its launcher twice)",
            "one job alone under scored",
            "two jobs under scored, 500 ms slices",
            "two jobs under scored, 100 ms slices",
            "two jobs under scored, 10 ms slices",
        ];
        let mut times: Vec<Vec<Option<(f64, f64)>>> = vec![Vec::new(); names.len()];
        let mut cap = Duration::from_secs(scaled(60, 20));
        for _ in 0..scaled(3, 1) {
            let alone = run_together(vec![launcher(true)], cap);
            if let Some((seconds, _)) = alone {
                // The kernel may take minutes: stopped at 10 times the ideal.
                cap = Duration::from_secs_f64((20.0 * seconds).max(10.0));
            }
            times[0].push(alone);
            times[1].push(run_together(vec![launcher(true), launcher(true)], cap));
            times[2].push(run_together(vec![launcher(false), launcher(false)], cap));
            times[3].push(run_together(vec![scrun(&daemons[1])], cap));
            for (idx, daemon) in daemons.iter().enumerate() {
                times[4 + idx].push(run_together(vec![scrun(daemon), scrun(daemon)], cap));
            }
        }
        let med = |samples: &[Option<(f64, f64)>]| -> Option<(f64, f64)> {
            if samples.iter().any(Option::is_none) {
                return None;
            }
            let mut seconds: Vec<f64> = samples.iter().flatten().map(|s| s.0).collect();
            // NaN where the program printed no time per message.
            let mut us: Vec<f64> = samples.iter().flatten().map(|s| s.1).collect();
            let us = if us.iter().any(|us| us.is_nan()) {
                f64::NAN
            } else {
                crate::median(&mut us)
            };
            Some((crate::median(&mut seconds), us))
        };
        let alone = med(&times[0]).expect("one job alone ends").0;
        let ideal = 2.0 * alone;
        for (idx, name) in names.iter().enumerate() {
            let single = idx == 0 || idx == 3;
            let base = if single { alone } else { ideal };
            let (value, ratio) = match med(&times[idx]) {
                Some((seconds, us)) if us.is_nan() => {
                    (format!("{seconds:.2} s"), format!("{:.2}×", seconds / base))
                }
                Some((seconds, us)) => (
                    format!("{seconds:.2} s, {us:.2} µs per message"),
                    format!("{:.2}×", seconds / base),
                ),
                None => (
                    format!("> {:.0} s (stopped)", cap.as_secs_f64()),
                    format!("> {:.1}×", cap.as_secs_f64() / base),
                ),
            };
            let target = match idx {
                5 => "within 1.05×",
                6 => "within 1.1×",
                _ => "for comparison",
            };
            rows.push(row(
                &format!("{} {kind}: {name}", mpi.name),
                value,
                if single {
                    format!("{alone:.2} s (one alone under the kernel)")
                } else {
                    format!("{ideal:.2} s (twice one alone)")
                },
                ratio,
                target,
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
