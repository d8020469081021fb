//! Syntax errors and hostile input, and the rendering of diagnostics.

use proptest::prelude::*;

use super::*;

#[test]
fn bad_record_names() {
    check_parse(
        "a=b x=1\n~\n~ x=1\nn =1 y=2",
        "
        n@4:1 y=2@4:6
        hosts.db:1:1: record name 'a=b' contains '=': a line starts with the host name (did the previous line miss a '\\'?)
        a=b x=1
        ^
        hosts.db:2:1: '~' must be followed by the name of the defective host
        ~
        ^
        hosts.db:3:1: '~' must be followed by the name of the defective host
        ~ x=1
        ^
        hosts.db:4:3: attribute '=1' has no name before '='
        n =1 y=2
          ^
        ",
    );
}

#[test]
fn unterminated_comment_points_at_its_start() {
    check_parse(
        "a\nb /* not closed\nc",
        "
        a@1:1
        b@2:1
        hosts.db:2:3: unterminated /* comment
        b /* not closed
          ^
        ",
    );
}

#[test]
fn binary_garbage_is_refused() {
    check_parse(
        "good\n\u{0}\u{1}\u{7f}bin\nx y\u{1b}[31m\nok",
        "
        good@1:1
        ok@4:1
        hosts.db:2:1: control character U+0000 is not allowed in a hosts database
        ???bin
        ^
        hosts.db:3:4: control character U+001B is not allowed in a hosts database
        x y?[31m
           ^
        ",
    );
}

#[test]
fn byte_order_mark_is_skipped() {
    check_parse("\u{feff}n x=1", "n@1:1 x=1@1:3");
}

#[test]
fn huge_lines_are_refused_and_parsing_goes_on() {
    let source = format!("a {}\nb x=1", "y".repeat(MAX_LINE_LEN + 10));
    let mut loader = loader(&[("hosts.db", &source)]);
    let (database, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    assert_eq!(database.records.len(), 1);
    let rendered = render_diagnostics(&diagnostics);
    assert!(
        rendered.starts_with("hosts.db:1: line is longer than 1 MiB\na yyyy"),
        "{}",
        &rendered[..200]
    );
    // The excerpt is bounded whatever the line's length.
    assert!(rendered.len() < 200, "{}", rendered.len());
}

#[test]
fn too_many_records() {
    let source: String = (0..=MAX_RECORDS).map(|idx| format!("h{idx}\n")).collect();
    let mut loader = loader(&[("hosts.db", &source)]);
    let (database, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    assert_eq!(database.records.len(), MAX_RECORDS);
    assert_text(
        "
        hosts.db:100001:1: the hosts database holds more than 100000 records; record 'h100000' and later new ones are ignored
        h100000
        ^
        ",
        &render_diagnostics(&diagnostics),
    );
}

#[test]
fn too_many_attributes() {
    let line = format!("n x={}\n", ",".repeat(100_000));
    let source = line.repeat(11);
    let mut loader = loader(&[("hosts.db", &source)]);
    let (_, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    assert_eq!(diagnostics.len(), 1);
    assert!(diagnostics[0]
        .to_string()
        .starts_with("hosts.db:10:1: the hosts database holds more than 1000000 attributes"));
}

#[test]
fn errors_stop_after_a_hundred() {
    let source = "a=b\n".repeat(150);
    let mut loader = loader(&[("hosts.db", &source)]);
    let (_, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
    assert_eq!(diagnostics.len(), MAX_DIAGNOSTICS + 1);
    assert_eq!(
        diagnostics[MAX_DIAGNOSTICS].to_string(),
        "hosts.db:101:1: too many errors; stopped after 100"
    );
}

#[test]
fn many_includes_of_one_file_are_bounded() {
    // Each file includes the next one twice: without a bound the parse would
    // follow 2^13 - 2 includes.
    let names: Vec<String> = (0..13).map(|idx| format!("f{idx}.db")).collect();
    let texts: Vec<String> = (0..13)
        .map(|idx| match idx {
            12 => "h12".to_string(),
            _ => format!(
                "h{idx}\n#include \"f{next}.db\"\n#include \"f{next}.db\"",
                next = idx + 1
            ),
        })
        .collect();
    let files: Vec<(&str, &str)> = names
        .iter()
        .zip(&texts)
        .map(|(name, text)| (name.as_str(), text.as_str()))
        .collect();
    let rendered = run(&files, None);
    assert!(
        rendered.contains("more than 1024 #include directives; stopped reading"),
        "{rendered}"
    );
}

fn render(line: usize, col: Option<usize>, source_line: Option<&str>) -> String {
    Diagnostic::new(Path::new("h.db"), line, col, "bad", source_line).to_string()
}

#[test]
fn diagnostics_render_with_a_caret() {
    assert_text(
        "h.db:3:5: bad\nab\tcd\n  \t ^",
        &render(3, Some(5), Some("ab\tcd")),
    );
    assert_text("h.db:3: bad\nabc", &render(3, None, Some("abc")));
    assert_text("h.db:3:4: bad\nabc\n   ^", &render(3, Some(4), Some("abc")));
    assert_text("h.db: bad", &render(0, None, None));
}

#[test]
fn diagnostics_show_a_window_of_long_lines() {
    let line: String = (0..1000)
        .map(|idx| char::from(b'a' + (idx % 26) as u8))
        .collect();
    let rendered = render(1, Some(500), Some(&line));
    let lines: Vec<&str> = rendered.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[1].starts_with("...") && lines[1].ends_with("..."));
    assert_eq!(lines[1].chars().count(), 126);
    let caret = lines[2].len() - 1;
    assert_eq!(lines[1].as_bytes()[caret], line.as_bytes()[499]);
    let rendered = render(1, Some(3), Some(&line));
    assert_eq!(rendered.lines().nth(1).map(str::len), Some(123));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any text, including garbage, yields a result and never a panic.
    #[test]
    fn parse_and_resolve_never_panic(
        text in "([a-z~#=,/*\\\\\"\\- \t\n0-9]|#define |#include \"b.db\"|cpus=|speed=|/\\*|\\*/){0,80}",
        other in any::<Vec<u8>>(),
    ) {
        let other = String::from_utf8_lossy(&other).into_owned();
        let mut loader = loader(&[("hosts.db", &text), ("b.db", &other)]);
        let (database, diagnostics) = parse(Path::new("hosts.db"), &mut loader);
        for diagnostic in &diagnostics {
            prop_assert!(diagnostic.to_string().starts_with("hosts.db") || diagnostic.to_string().starts_with("b.db"));
        }
        let _ = resolve(&database, None, &machine());
        let _ = resolve(&database, Some("g"), &machine());
    }

    /// Random bytes, read as lossy text, never panic either.
    #[test]
    fn random_bytes_never_panic(bytes in any::<Vec<u8>>()) {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut loader = loader(&[("hosts.db", &text)]);
        let (database, _) = parse(Path::new("hosts.db"), &mut loader);
        let _ = resolve(&database, None, &machine());
    }
}
