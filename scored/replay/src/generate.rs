//! A parallel workload generator after Lublin and Feitelson, "The workload
//! on parallel supercomputers: modeling the characteristics of rigid jobs"
//! (JPDC 63(11), 2003), writing SWF; deterministic by seed, with the
//! offered load set by scaling the arrival times.
//!
//! The parameters are the model's published ones, as its authors' C
//! implementation (`lublin99.c`, Parallel Workloads Archive) sets them for
//! the whole workload; they were written down from that source as we know
//! it, not re-fitted:
//!
//! - size: a job is serial with probability 0.244; a parallel job's log2
//!   size is two-stage uniform, on [0.8, m − 2.5] with probability 0.86
//!   and on [m − 2.5, m] otherwise (m = log2 of the machine's processors),
//!   and is rounded to a power of two with probability 0.576;
//! - run time: ln(run time) is hyper-gamma, Gamma(4.2, 0.94) with
//!   probability p = −0.0054 · size + 0.78 (clamped to [0, 1]) and
//!   Gamma(312, 0.03) otherwise;
//! - arrivals: ln(inter-arrival time) is Gamma(10.23, 0.4871) in the peak
//!   hours, and the daily cycle weighs the arrival rate of each half hour
//!   of the day by the Gamma(8.1737, 3.9631) density at its number counted
//!   from midnight (our reading of the model's cycle parameters: it puts
//!   the peak at about 14:00; the rate never falls below a tenth of the
//!   mean, so nights keep a trickle of arrivals).
//!
//! The model has no user estimates; the requested time written here is
//! the run time rounded up to the next of the round values users pick
//! (1, 5, 10, 15, 30 minutes; 1, 2, 4, 8, 12, 18, 24, 36, 48 hours), a
//! choice of ours. The offered load Σ size · run / (processors · span) is
//! set by scaling all arrival times by one factor.
#![forbid(unsafe_code)]

use std::fmt::Write as _;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Number of jobs.
    pub jobs: usize,
    /// Processors of the machine.
    pub procs: u32,
    /// Offered load (0 < load).
    pub load: f64,
    /// Seed of the generator.
    pub seed: u64,
}

const SERIAL_PROB: f64 = 0.244;
const POW2_PROB: f64 = 0.576;
const ULOW: f64 = 0.8;
const UMED_BELOW_UHI: f64 = 2.5;
const UPROB: f64 = 0.86;
const A1: f64 = 4.2;
const B1: f64 = 0.94;
const A2: f64 = 312.0;
const B2: f64 = 0.03;
const PA: f64 = -0.0054;
const PB: f64 = 0.78;
const AARR: f64 = 10.23;
const BARR: f64 = 0.4871;
const ANUM: f64 = 8.1737;
const BNUM: f64 = 3.9631;

const ROUND_ESTIMATES: [u64; 14] = [
    60, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 43200, 64800, 86400, 129600, 172800,
];

/// A small, fast, well-mixed generator (SplitMix64), so that a seed gives
/// the same workload on every machine and version of Rust.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform on (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// Gamma(shape, scale), by Marsaglia and Tsang's method.
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if shape < 1.0 {
            let boost = self.uniform().powf(1.0 / shape);
            return self.gamma(shape + 1.0, scale) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.uniform();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * scale;
            }
        }
    }
}

/// One generated job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenJob {
    /// Submit time, seconds.
    pub submit: f64,
    /// Processors.
    pub size: u32,
    /// Run time, whole seconds (at least 1).
    pub run: u64,
    /// Requested time, seconds.
    pub requested: u64,
}

fn size(rng: &mut Rng, procs: u32) -> u32 {
    if procs <= 1 || rng.uniform() < SERIAL_PROB {
        return 1;
    }
    let uhi = f64::from(procs).log2();
    let umed = (uhi - UMED_BELOW_UHI).max(ULOW);
    let (low, high) = if rng.uniform() < UPROB {
        (ULOW, umed)
    } else {
        (umed, uhi)
    };
    let mut log_size = low + (high - low) * rng.uniform();
    if rng.uniform() < POW2_PROB {
        log_size = log_size.round();
    }
    (2f64.powf(log_size).round() as u32).clamp(2, procs)
}

fn run_time(rng: &mut Rng, size: u32) -> u64 {
    let first = (PA * f64::from(size) + PB).clamp(0.0, 1.0);
    let log_run = if rng.uniform() < first {
        rng.gamma(A1, B1)
    } else {
        rng.gamma(A2, B2)
    };
    (log_run.exp().round() as u64).max(1)
}

/// The relative arrival rate of each half hour of the day (mean 1).
fn daily_cycle() -> [f64; 48] {
    let density = |x: f64| x.powf(ANUM - 1.0) * (-x / BNUM).exp();
    let mut weights = [0.0; 48];
    for (slot, weight) in weights.iter_mut().enumerate() {
        *weight = density(slot as f64 + 0.5);
    }
    let mean = weights.iter().sum::<f64>() / 48.0;
    // The night keeps a trickle of arrivals: no half hour below a tenth
    // of the mean rate.
    for weight in &mut weights {
        *weight = (*weight / mean).max(0.1);
    }
    let mean = weights.iter().sum::<f64>() / 48.0;
    weights.map(|weight| weight / mean)
}

/// Real time (seconds) at which `operational` seconds of mean-rate time
/// have passed, when the rate of half hour `s` of each day is `cycle[s]`.
fn warp(operational: f64, cycle: &[f64; 48]) -> f64 {
    const SLOT: f64 = 1800.0;
    let day_length: f64 = cycle.iter().map(|rate| rate * SLOT).sum();
    let days = (operational / day_length).floor();
    let mut left = operational - days * day_length;
    let mut real = days * 86_400.0;
    for rate in cycle {
        let slot_length = rate * SLOT;
        if left < slot_length {
            return real + left / rate;
        }
        left -= slot_length;
        real += SLOT;
    }
    real
}

/// Generates the jobs of `model`, in submit order.
pub fn generate(model: &Model) -> Vec<GenJob> {
    let mut rng = Rng::new(model.seed);
    let cycle = daily_cycle();
    let mut gaps = Vec::with_capacity(model.jobs);
    let mut jobs = Vec::with_capacity(model.jobs);
    for _ in 0..model.jobs {
        gaps.push(rng.gamma(AARR, BARR).exp());
        let size = size(&mut rng, model.procs);
        let run = run_time(&mut rng, size);
        let requested = ROUND_ESTIMATES
            .iter()
            .copied()
            .find(|round| *round >= run)
            .unwrap_or(run);
        jobs.push(GenJob {
            submit: 0.0,
            size,
            run,
            requested,
        });
    }
    // Arrival times for inter-arrival gaps scaled by `factor`: the gaps
    // are drawn at the mean rate and laid on the day through the inverse
    // of the cumulative daily rate (a time warp), so that arrivals follow
    // the daily cycle and the span grows smoothly with the factor.
    let place = |factor: f64, jobs: &mut [GenJob]| -> f64 {
        let mut operational = 0.0f64;
        for (job, gap) in jobs.iter_mut().zip(&gaps) {
            operational += gap * factor;
            job.submit = warp(operational, &cycle);
        }
        jobs.last().map_or(0.0, |job| job.submit)
    };
    // The offered load is set by the one factor that gives the span the
    // work needs; the span grows with the factor, so bisect (in log space).
    let work: f64 = jobs
        .iter()
        .map(|job| f64::from(job.size) * job.run as f64)
        .sum();
    if model.load > 0.0 && jobs.len() > 1 {
        let wanted = work / (f64::from(model.procs.max(1)) * model.load);
        let (mut low, mut high) = (1e-9f64, 1e9f64);
        for _ in 0..200 {
            let mid = (low * high).sqrt();
            let span = place(mid, &mut jobs) - jobs[0].submit;
            if span < wanted {
                low = mid;
            } else {
                high = mid;
            }
            if high / low < 1.0 + 1e-9 {
                break;
            }
        }
        place((low * high).sqrt(), &mut jobs);
    } else {
        place(1.0, &mut jobs);
    }
    let first = jobs.first().map_or(0.0, |job| job.submit);
    for job in &mut jobs {
        job.submit = (job.submit - first).round();
    }
    jobs
}

/// The offered load of jobs on `procs` processors: Σ size · run /
/// (procs · span of the submissions).
pub fn offered_load(jobs: &[GenJob], procs: u32) -> f64 {
    let span =
        jobs.last().map_or(0.0, |job| job.submit) - jobs.first().map_or(0.0, |job| job.submit);
    let work: f64 = jobs
        .iter()
        .map(|job| f64::from(job.size) * job.run as f64)
        .sum();
    if span <= 0.0 {
        return 0.0;
    }
    work / (f64::from(procs.max(1)) * span)
}

/// The jobs as an SWF trace, with a header naming the model.
pub fn to_swf(model: &Model, jobs: &[GenJob]) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "; Version: 2.2");
    let _ = writeln!(
        text,
        "; Note: generated by sc_replay --generate after Lublin and Feitelson, JPDC 2003"
    );
    let _ = writeln!(
        text,
        "; Note: jobs={} load={} seed={}",
        model.jobs, model.load, model.seed
    );
    let _ = writeln!(text, "; MaxJobs: {}", jobs.len());
    let _ = writeln!(text, "; MaxProcs: {}", model.procs);
    for (idx, job) in jobs.iter().enumerate() {
        let _ = writeln!(
            text,
            "{} {} -1 {} {} -1 -1 {} {} -1 1 1 1 1 1 -1 -1 -1",
            idx + 1,
            job.submit as u64,
            job.run,
            job.size,
            job.size,
            job.requested
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(load: f64, seed: u64) -> Model {
        Model {
            jobs: 5000,
            procs: 128,
            load,
            seed,
        }
    }

    #[test]
    fn a_seed_gives_the_same_workload_and_another_seed_another() {
        assert_eq!(generate(&model(0.8, 7)), generate(&model(0.8, 7)));
        assert_ne!(generate(&model(0.8, 7)), generate(&model(0.8, 8)));
    }

    #[test]
    fn the_offered_load_is_the_one_asked_for() {
        for load in [0.6, 0.8, 0.95] {
            let jobs = generate(&model(load, 1));
            let offered = offered_load(&jobs, 128);
            assert!((offered - load).abs() < 0.01 * load, "{offered} for {load}");
        }
    }

    #[test]
    fn sizes_and_run_times_follow_the_model() {
        let jobs = generate(&model(0.8, 3));
        let n = jobs.len() as f64;
        let serial = jobs.iter().filter(|job| job.size == 1).count() as f64 / n;
        assert!((serial - SERIAL_PROB).abs() < 0.03, "serial share {serial}");
        let parallel: Vec<&GenJob> = jobs.iter().filter(|job| job.size > 1).collect();
        let pow2 = parallel
            .iter()
            .filter(|job| job.size.is_power_of_two())
            .count() as f64
            / parallel.len() as f64;
        // Rounded ones plus those that land on a power of two anyway.
        assert!(pow2 > POW2_PROB - 0.03, "power-of-two share {pow2}");
        assert!(jobs.iter().all(|job| (1..=128).contains(&job.size)));
        assert!(jobs.iter().all(|job| job.requested >= job.run));
        // Hyper-gamma: a short mode near e^4 s and a long one near e^9 s.
        let short = jobs.iter().filter(|job| job.run < 600).count() as f64 / n;
        let long = jobs.iter().filter(|job| job.run > 3000).count() as f64 / n;
        assert!(short > 0.3 && long > 0.1, "short {short}, long {long}");
        assert!(jobs.windows(2).all(|pair| pair[0].submit <= pair[1].submit));
    }

    #[test]
    fn the_daily_cycle_peaks_in_the_day_and_has_mean_one() {
        let cycle = daily_cycle();
        let mean = cycle.iter().sum::<f64>() / 48.0;
        assert!((mean - 1.0).abs() < 1e-9);
        let night = cycle[6]; // 3:00
        let day = cycle[28]; // 14:00
        assert!(day > 2.0 * night, "day {day}, night {night}");
    }

    #[test]
    fn gamma_has_the_right_mean() {
        let mut rng = Rng::new(11);
        let n = 20_000;
        let mean = (0..n).map(|_| rng.gamma(4.2, 0.94)).sum::<f64>() / n as f64;
        assert!((mean - 4.2 * 0.94).abs() < 0.05, "{mean}");
        let mean = (0..n).map(|_| rng.gamma(0.5, 2.0)).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.05, "{mean}");
    }
}
