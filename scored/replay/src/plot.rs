//! The picture of a replay (`sc_replay --svg`): utilisation and waiting
//! jobs over time, the distribution of bounded slowdowns by job size, and
//! each user's mean bounded slowdown with Jain's index of them.
//!
//! Drawn with plotters' SVG backend; this module writes the one file it
//! is given and nothing else.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::{metrics, Outcome};

/// The most users the picture draws a bar for (those with the most jobs).
const MOST_USERS: usize = 60;

/// Size classes: 1, 2, 3–4, 5–8, … (powers of two).
fn size_class(procs: u32) -> u32 {
    procs.max(1).next_power_of_two().trailing_zeros()
}

fn percentile(sorted: &[f64], share: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (share * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Why the picture could not be drawn: the file and what the drawing
/// library said (its error types are generic over the backend, so the
/// words are kept rather than the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawError {
    /// The SVG file asked for.
    pub path: PathBuf,
    /// What failed.
    pub message: String,
}

impl fmt::Display for DrawError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot draw {}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for DrawError {}

/// Draws `outcome` to the SVG file at `path`.
pub fn draw(outcome: &Outcome, path: &Path) -> Result<(), DrawError> {
    let failed = |error: &dyn fmt::Display| DrawError {
        path: path.to_path_buf(),
        message: error.to_string(),
    };
    let root = SVGBackend::new(path, (1000, 1200)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| failed(&error))?;
    let (top, bottom) = root.split_vertically(600);
    let (bottom, users_area) = bottom.split_vertically(300);
    let (utilisation_area, waiting_area) = top.split_vertically(300);

    let end = outcome
        .timeline
        .last()
        .map_or(1.0, |point| point.time)
        .max(1.0);
    let hours = |seconds: f64| seconds / 3600.0;
    let slots = outcome.slots.max(1) as f64;

    let mut chart = ChartBuilder::on(&utilisation_area)
        .caption(
            "utilisation (busy processors / processors)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..hours(end), 0.0..1.05)
        .map_err(|error| failed(&error))?;
    chart
        .configure_mesh()
        .x_desc("hours since the first submission")
        .draw()
        .map_err(|error| failed(&error))?;
    chart
        .draw_series(LineSeries::new(
            outcome
                .timeline
                .iter()
                .map(|point| (hours(point.time), point.busy as f64 / slots)),
            &BLUE,
        ))
        .map_err(|error| failed(&error))?;

    let most_waiting = outcome
        .timeline
        .iter()
        .map(|point| point.waiting)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let mut chart = ChartBuilder::on(&waiting_area)
        .caption("jobs waiting to start", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..hours(end), 0.0..most_waiting * 1.05)
        .map_err(|error| failed(&error))?;
    chart
        .configure_mesh()
        .x_desc("hours since the first submission")
        .draw()
        .map_err(|error| failed(&error))?;
    chart
        .draw_series(LineSeries::new(
            outcome
                .timeline
                .iter()
                .map(|point| (hours(point.time), point.waiting as f64)),
            &RED,
        ))
        .map_err(|error| failed(&error))?;

    // Slowdowns by size class: a bar from the 10th to the 90th percentile
    // and a mark at the median, on a log scale.
    let mut classes: std::collections::BTreeMap<u32, Vec<f64>> = Default::default();
    for job in &outcome.jobs {
        classes
            .entry(size_class(job.procs))
            .or_default()
            .push(job.bounded_slowdown().max(1e-3));
    }
    for values in classes.values_mut() {
        values.sort_by(f64::total_cmp);
    }
    let n_classes = classes.keys().max().map_or(1, |max| max + 1);
    let highest = classes
        .values()
        .map(|values| percentile(values, 0.9))
        .fold(1.0, f64::max);
    let lowest = classes
        .values()
        .map(|values| percentile(values, 0.1))
        .fold(1.0, f64::min)
        .max(1e-3);
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            "bounded slowdown by job size (10th-90th percentile, median)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(
            -0.5f64..f64::from(n_classes) - 0.5,
            (lowest * 0.8..highest * 1.25).log_scale(),
        )
        .map_err(|error| failed(&error))?;
    chart
        .configure_mesh()
        .x_desc("processors (1, 2, 3-4, 5-8, ...: log2 class)")
        .x_label_formatter(&|class| format!("{}", 1u64 << (class.round().max(0.0) as u32)))
        .draw()
        .map_err(|error| failed(&error))?;
    for (class, values) in &classes {
        let x = f64::from(*class);
        let (low, mid, high) = (
            percentile(values, 0.1),
            percentile(values, 0.5),
            percentile(values, 0.9),
        );
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x - 0.3, low), (x + 0.3, high.max(low * 1.01))],
                GREEN.mix(0.4).filled(),
            )))
            .map_err(|error| failed(&error))?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x - 0.3, mid), (x + 0.3, mid)],
                BLACK.stroke_width(2),
            )))
            .map_err(|error| failed(&error))?;
    }
    draw_users(outcome, &users_area).map_err(|error| failed(&error))?;
    root.present().map_err(|error| failed(&error))?;
    Ok(())
}

/// Each user's mean bounded slowdown as a bar, the users with the most
/// jobs first (at most [`MOST_USERS`]), on a log scale; the caption gives
/// Jain's index of all the users' means (`user_fairness`). Nothing is drawn but the caption
/// when the trace names no user.
fn draw_users<DB: DrawingBackend>(
    outcome: &Outcome,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let report = metrics::report(outcome);
    let mut users: Vec<(i64, usize, f64)> = report
        .users
        .iter()
        .map(|(user, figures)| (*user, figures.jobs, figures.mean_bounded_slowdown))
        .collect();
    users.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let shown = users.len().min(MOST_USERS);
    users.truncate(shown);
    let caption = match report.user_fairness {
        Some(fairness) => format!(
            "mean bounded slowdown by user, most jobs first ({} of {} users; fairness, Jain: {fairness:.3})",
            shown,
            report.users.len()
        ),
        None => "mean bounded slowdown by user (the trace names no user)".to_string(),
    };
    let highest = users.iter().map(|user| user.2).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(
            -0.5f64..(shown.max(1) as f64) - 0.5,
            (0.8f64..highest * 1.25).log_scale(),
        )?;
    let labels: Vec<String> = users.iter().map(|user| user.0.to_string()).collect();
    chart
        .configure_mesh()
        .x_desc("user (trace field 12)")
        .x_labels(shown.clamp(1, 30))
        .x_label_formatter(&|at| {
            let at = at.round();
            (at >= 0.0)
                .then(|| labels.get(at as usize).cloned())
                .flatten()
                .unwrap_or_default()
        })
        .draw()?;
    chart.draw_series(users.iter().enumerate().map(|(at, user)| {
        let x = at as f64;
        Rectangle::new(
            [(x - 0.35, 0.8), (x + 0.35, user.2.max(0.81))],
            BLUE.mix(0.5).filled(),
        )
    }))?;
    Ok(())
}
