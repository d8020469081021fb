//! sc_replay: replays a Standard Workload Format trace through scored's
//! scheduling core with a virtual clock, and reports what the users would
//! have waited (sc_replay(1)); `--generate` writes a synthetic trace instead.
//!
//! This is the shell around the replay (the `scored_replay` library): it
//! reads files (plain or gzip), parses flags, draws the progress bar and
//! writes the outputs; the replay itself is pure.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use scored_core::cluster::{Machine, Topology};
use scored_core::hosts;
use scored_proto::exitcode;
use scored_proto::units::{parse_duration, quote, CpuSet};
use scored_replay::{self as replay, generate, metrics, swf, Setup};

/// Command-line flags of sc_replay.
#[derive(Debug, Parser)]
#[command(
    name = "sc_replay",
    version,
    about = "Replay a Standard Workload Format trace through scored's scheduling core"
)]
struct Flags {
    /// The trace (SWF, or SWF compressed with gzip).
    #[arg(value_name = "TRACE", required_unless_present = "generate")]
    trace: Option<PathBuf>,
    /// Hosts database describing the machine.
    #[arg(long, value_name = "DB", conflicts_with = "procs")]
    hosts: Option<PathBuf>,
    /// A machine of N one-processor hosts (default: the trace's MaxProcs).
    #[arg(long, value_name = "N")]
    procs: Option<u32>,
    /// Console commands setting the policy, as scored.rc.
    #[arg(long, value_name = "RC")]
    rc: Option<PathBuf>,
    /// Gang time slice (default 500ms).
    #[arg(long, value_name = "D")]
    timeslice: Option<String>,
    /// Time a switch takes to stop the leaving jobs (default 0).
    #[arg(long, value_name = "D")]
    switch_cost: Option<String>,
    /// Factor on the times between submissions (below 1: more load).
    #[arg(long, value_name = "F")]
    arrival_scale: Option<f64>,
    /// SWF queue numbers to scored queues, e.g. 1=0,2=1 (default: all to queue 1).
    #[arg(long, value_name = "SWFQ=Q,...")]
    queue_map: Option<String>,
    /// Submit each job as its trace user (field 12), so that share=user
    /// and fairshare tell users apart (default: every job as root).
    #[arg(long)]
    as_users: bool,
    /// Write one CSV row per job to FILE.
    #[arg(long, value_name = "FILE")]
    jobs_csv: Option<PathBuf>,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
    /// Draw utilisation, waiting jobs, slowdowns by job size and by user to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Write a synthetic trace of N jobs (Lublin and Feitelson's model) to
    /// standard output instead of replaying.
    #[arg(long, value_name = "N", conflicts_with_all = ["trace", "hosts", "rc", "json", "jobs_csv", "svg", "queue_map", "arrival_scale", "timeslice", "switch_cost", "as_users"])]
    generate: Option<usize>,
    /// Offered load of the generated trace (default 0.8).
    #[arg(long, value_name = "L", requires = "generate")]
    load: Option<f64>,
    /// Seed of the generated trace (default 1).
    #[arg(long, value_name = "S", requires = "generate")]
    seed: Option<u64>,
}

/// The largest `--arrival-scale`: the latest submission of a trace
/// ([`swf::MAX_SECONDS`]) scaled by it still fits the core's clock.
const MAX_ARRIVAL_SCALE: f64 = 1000.0;

fn main() -> ExitCode {
    let flags = Flags::parse();
    match run(flags) {
        Ok(()) => ExitCode::from(exitcode::OK as u8),
        Err(message) => {
            eprintln!("sc_replay: {message}");
            ExitCode::from(exitcode::FAILURE as u8)
        }
    }
}

fn run(flags: Flags) -> Result<(), String> {
    if let Some(n_jobs) = flags.generate {
        return write_generated(n_jobs, &flags);
    }
    let path = flags
        .trace
        .clone()
        .ok_or_else(|| "no trace given".to_string())?;
    let trace = read_trace(&path)?;
    let topology = match (&flags.hosts, flags.procs) {
        (Some(db), _) => load_hosts(db)?,
        (None, Some(n_procs)) if !(1..=swf::MAX_PROCS).contains(&u64::from(n_procs)) => {
            return Err(format!(
                "--procs {n_procs}: must be from 1 to {}",
                swf::MAX_PROCS
            ))
        }
        (None, Some(n_procs)) => replay::uniform_machine(n_procs, host_memory(&trace)),
        (None, None) => match trace.max_procs.and_then(|n| u32::try_from(n).ok()) {
            Some(n_procs) => replay::uniform_machine(n_procs, host_memory(&trace)),
            None => {
                return Err(format!(
                    "{}: the trace has no MaxProcs header; give --procs N or --hosts DB",
                    path.display()
                ))
            }
        },
    };
    let mut setup = Setup::new(topology);
    if let Some(text) = &flags.timeslice {
        let slice = parse_duration(text).map_err(|error| format!("--timeslice: {error}"))?;
        if slice < Duration::from_millis(1) {
            return Err(format!("--timeslice {}: must be at least 1ms", quote(text)));
        }
        setup.timeslice = slice;
    }
    if let Some(text) = &flags.switch_cost {
        setup.switch_cost =
            parse_duration(text).map_err(|error| format!("--switch-cost: {error}"))?;
    }
    if let Some(scale) = flags.arrival_scale {
        if !(scale.is_finite() && scale > 0.0 && scale <= MAX_ARRIVAL_SCALE) {
            return Err(format!(
                "--arrival-scale {scale}: must be a number above 0 and at most {MAX_ARRIVAL_SCALE}"
            ));
        }
        setup.arrival_scale = scale;
    }
    setup.as_users = flags.as_users;
    if let Some(text) = &flags.queue_map {
        setup.queue_map = parse_queue_map(text)?;
    }
    if let Some(rc) = &flags.rc {
        let text = std::fs::read_to_string(rc)
            .map_err(|error| format!("cannot read {}: {error}", rc.display()))?;
        setup.rc = Some((rc.display().to_string(), text));
    }
    let mut bar = Progress::new();
    let started = Instant::now();
    let outcome = replay::run(&trace, &setup, &mut |done, total| bar.show(done, total))
        .map_err(|error| error.to_string())?;
    bar.clear();
    let elapsed = started.elapsed();
    let report = metrics::report(&outcome);
    if let Some(csv) = &flags.jobs_csv {
        std::fs::write(csv, metrics::jobs_csv(&outcome))
            .map_err(|error| format!("cannot write {}: {error}", csv.display()))?;
    }
    if let Some(svg) = &flags.svg {
        replay::plot::draw(&outcome, svg).map_err(|error| error.to_string())?;
    }
    let mut stdout = std::io::stdout().lock();
    let written = if flags.json {
        writeln!(stdout, "{}", report.to_json())
    } else {
        write!(
            stdout,
            "trace: {} ({} jobs)\nmachine: {} hosts, {} processors\nreplayed in: {:.2}s\n{}",
            path.display(),
            trace.jobs.len(),
            outcome.hosts,
            outcome.slots,
            elapsed.as_secs_f64(),
            report.to_text()
        )
    };
    match written {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not a failure.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(format!("cannot write the report: {error}")),
    }
}

fn write_generated(n_jobs: usize, flags: &Flags) -> Result<(), String> {
    let load = flags.load.unwrap_or(0.8);
    if !(load.is_finite() && load > 0.0) {
        return Err(format!("--load {load}: must be a number above 0"));
    }
    let model = generate::Model {
        jobs: n_jobs,
        procs: match flags.procs {
            Some(n) if (1..=swf::MAX_PROCS).contains(&u64::from(n)) => n,
            Some(n) => return Err(format!("--procs {n}: must be from 1 to {}", swf::MAX_PROCS)),
            None => 128,
        },
        load,
        seed: flags.seed.unwrap_or(1),
    };
    let jobs = generate::generate(&model);
    let text = generate::to_swf(&model, &jobs);
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(format!("cannot write the trace: {error}")),
    }
}

/// Reads and parses a trace, plain or gzip (by its magic number).
fn read_trace(path: &Path) -> Result<swf::Trace, String> {
    let show = path.display();
    let mut file =
        std::fs::File::open(path).map_err(|error| format!("cannot open {show}: {error}"))?;
    let mut magic = [0u8; 2];
    let n_read = file
        .read(&mut magic)
        .map_err(|error| format!("cannot read {show}: {error}"))?;
    let head = std::io::Cursor::new(magic[..n_read].to_vec());
    let reader: Box<dyn Read> = if magic[..n_read] == [0x1f, 0x8b] {
        Box::new(flate2::read::MultiGzDecoder::new(head.chain(file)))
    } else {
        Box::new(head.chain(file))
    };
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let mut parser = swf::Parser::default();
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        // One byte past the longest line, so that a longer one is seen
        // without reading it whole.
        let n_bytes = (&mut reader)
            .take(swf::MAX_LINE_LEN as u64 + 2)
            .read_until(b'\n', &mut buffer)
            .map_err(|error| format!("cannot read {show}: {error}"))?;
        if n_bytes == 0 {
            break;
        }
        let ended = buffer.ends_with(b"\n");
        let line = if ended {
            &buffer[..buffer.len() - 1]
        } else {
            &buffer[..]
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > swf::MAX_LINE_LEN {
            parser.bad_line(format!(
                "the line is longer than {} KiB; nothing more is read",
                swf::MAX_LINE_LEN / 1024
            ));
            break;
        }
        match std::str::from_utf8(line) {
            Ok(text) => parser.line(text),
            Err(_) => parser.bad_line("the line is not valid UTF-8 text"),
        }
    }
    let (trace, errors) = parser.finish();
    if errors.is_empty() {
        return Ok(trace);
    }
    let mut message: Vec<String> = errors
        .first
        .iter()
        .map(|error| format!("{show}:{error}"))
        .collect();
    if errors.count > errors.first.len() {
        message.push(format!(
            "... and {} more",
            errors.count - errors.first.len()
        ));
    }
    message.push(format!(
        "{} malformed line{} in {show}; nothing replayed",
        errors.count,
        if errors.count == 1 { "" } else { "s" }
    ));
    // The first line has no program prefix of its own; main adds it.
    Err(message.join("\nsc_replay: "))
}

/// Memory of each `--procs` host: the largest per-processor memory the
/// trace mentions, so that any one job fits a host, else 1G.
fn host_memory(trace: &swf::Trace) -> u64 {
    trace
        .jobs
        .iter()
        .filter_map(|job| job.memory_kb)
        .map(|kb| (kb * 1024.0).ceil() as u64)
        .max()
        .unwrap_or(1 << 30)
        .max(1)
}

/// A hosts database, resolved as for a machine that has every CPU it
/// names and 1T of memory to share among hosts without `memory=`.
fn load_hosts(path: &Path) -> Result<Topology, String> {
    let machine = Machine {
        online_cpus: CpuSet::from_cpus(0..4096),
        total_memory: 1 << 40,
    };
    hosts::load_topology(path, &mut Files, None, &machine).map_err(|diagnostics| {
        let text: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
        format!(
            "{}\nsc_replay: {} error{} in the hosts database",
            text.join("\n"),
            diagnostics.len(),
            if diagnostics.len() == 1 { "" } else { "s" }
        )
    })
}

/// The hosts database and the files it includes, read as the daemon reads
/// them (its `hostsfile::FsLoader`, which this crate cannot depend on): at
/// most [`hosts::MAX_FILE_SIZE`] bytes of UTF-8 text each.
struct Files;

impl hosts::Loader for Files {
    fn load(&mut self, path: &Path) -> std::io::Result<String> {
        let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let mut bytes = Vec::new();
        std::fs::File::open(path)?
            .take(hosts::MAX_FILE_SIZE + 1)
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > hosts::MAX_FILE_SIZE {
            return Err(invalid(format!(
                "{} is larger than {} MiB",
                path.display(),
                hosts::MAX_FILE_SIZE >> 20
            )));
        }
        String::from_utf8(bytes).map_err(|error| {
            invalid(format!(
                "{} is not UTF-8 text (invalid byte at offset {})",
                path.display(),
                error.utf8_error().valid_up_to()
            ))
        })
    }
}

/// `SWFQ=Q,...`: SWF queue numbers to scored queues.
fn parse_queue_map(text: &str) -> Result<std::collections::BTreeMap<i64, u32>, String> {
    let mut map = std::collections::BTreeMap::new();
    for item in text.split(',') {
        let bad = |why: &str| format!("--queue-map: bad entry {}: {why}", quote(item));
        let (from, to) = item
            .split_once('=')
            .ok_or_else(|| bad("expected SWFQ=Q, such as 1=0"))?;
        let from: i64 = from
            .trim()
            .parse()
            .map_err(|_| bad("the SWF queue is not a whole number"))?;
        let to: u32 = to
            .trim()
            .parse()
            .map_err(|_| bad("the scored queue is not a whole number"))?;
        if map.insert(from, to).is_some() {
            return Err(bad("this SWF queue is mapped twice"));
        }
    }
    Ok(map)
}

/// A progress bar on standard error, drawn only when it is a terminal.
struct Progress {
    enabled: bool,
    last: Option<Instant>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            enabled: std::io::stderr().is_terminal(),
            last: None,
        }
    }

    fn show(&mut self, done: usize, total: usize) {
        if !self.enabled || total == 0 {
            return;
        }
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(now);
        const WIDTH: usize = 40;
        let filled = done.min(total) * WIDTH / total;
        let _ = write!(
            std::io::stderr(),
            "\rreplaying [{}{}] {:>3}% {done}/{total} jobs",
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            done.min(total) * 100 / total
        );
    }

    fn clear(&self) {
        if self.enabled && self.last.is_some() {
            let _ = write!(std::io::stderr(), "\r{}\r", " ".repeat(78));
        }
    }
}
