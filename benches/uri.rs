//! URI-template matching time against URI length (1 KiB … 1 MiB, doubling),
//! calling the matcher directly (past the `MAX_URI_BYTES` guard), for the
//! shipped `reservo://rooms/{room}` and for `x://{+a}/{+b}/{+c}/end`, each
//! with a URI that matches and one that does not (the worst case of the old
//! backtracking matcher: it tried every split).
//!
//! Run with `cargo bench --bench uri`; figures are printed, not asserted.
//! Linear matching shows as a time per KiB that stays flat down a column.

use std::time::{Duration, Instant};

use carte::uri_template::UriTemplate;

/// Each figure is the mean over as many matches as fit in this (at least one).
const BUDGET: Duration = Duration::from_millis(200);

fn main() {
    let rooms = UriTemplate::parse("reservo://rooms/{room}").expect("a valid template");
    let plus = UriTemplate::parse("x://{+a}/{+b}/{+c}/end").expect("a valid template");
    println!("match time per URI (µs), and per KiB of URI in brackets");
    println!(
        "{:>9} | {:>24} | {:>24} | {:>24} | {:>24}",
        "bytes", "rooms/{room} hit", "rooms/{room} miss", "{+a}/{+b}/{+c} hit", "{+a}/{+b}/{+c} miss"
    );
    let mut length = 1024;
    while length <= 1 << 20 {
        // `room` = a…a (hit), a…a/ (miss: a `/` at the very end).
        let rooms_hit = format!("reservo://rooms/{}", "a".repeat(length - 16));
        let rooms_miss = format!("reservo://rooms/{}/", "a".repeat(length - 17));
        // a/a/…/a/end (hit), a/a/…/a/ (miss: no `end`).
        let plus_hit = format!("x://{}end", "a/".repeat((length - 7) / 2));
        let plus_miss = format!("x://{}", "a/".repeat((length - 4) / 2));
        let cells = [
            time(&rooms, &rooms_hit, true),
            time(&rooms, &rooms_miss, false),
            time(&plus, &plus_hit, true),
            time(&plus, &plus_miss, false),
        ];
        let cells: Vec<String> =
            cells.iter().map(|micros| format!("{micros:>12.1} [{:>8.2}]", micros * 1024.0 / length as f64)).collect();
        println!("{length:>9} | {}", cells.join(" | "));
        length *= 2;
    }
}

/// Mean microseconds per match of `uri`, checking the outcome once.
fn time(template: &UriTemplate, uri: &str, hit: bool) -> f64 {
    assert_eq!(template.match_unbounded(uri).is_some(), hit, "{} against {} bytes", template.as_str(), uri.len());
    let started = Instant::now();
    let mut iterations = 0u32;
    while iterations == 0 || started.elapsed() < BUDGET {
        std::hint::black_box(template.match_unbounded(std::hint::black_box(uri)));
        iterations += 1;
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(iterations)
}
