//! Suggestions for a mistyped word: the closest known one by edit
//! distance, for "did you mean" hints.
#![forbid(unsafe_code)]

/// `a, b or c`.
pub(super) fn one_of(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [only] => (*only).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// `did you mean 'x'? ` when a candidate is close, else nothing.
pub(super) fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    match closest(word, candidates) {
        Some(candidate) => format!("did you mean '{candidate}'? "),
        None => String::new(),
    }
}

/// The candidate nearest to `word` (ignoring case) within an edit distance
/// of 2, or of 1 for a word of up to 4 characters (two edits make `foo`
/// of `job`: a guess, not a typo), the first one on ties.
pub fn closest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    // Words far longer than every candidate cannot be within 2 edits;
    // skipping them keeps a 64 KiB word from costing a quadratic table.
    if word.chars().count() > 16 {
        return None;
    }
    let most = if word.chars().count() <= 4 { 1 } else { 2 };
    let word = word.to_lowercase();
    candidates
        .iter()
        .map(|candidate| (edit_distance(&word, candidate), *candidate))
        .filter(|(distance, _)| *distance <= most)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Optimal string alignment distance: insertions, deletions, substitutions
/// and swaps of neighbours each cost 1, so `stauts` is 1 from `status`.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (idx, row) in rows.iter_mut().enumerate() {
        row[0] = idx;
    }
    if let Some(first_row) = rows.first_mut() {
        for (col, cell) in first_row.iter_mut().enumerate() {
            *cell = col;
        }
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}
