//! The `jq` template filter on JSON of 64 KiB … 1 MiB (doubling): a render
//! of `{{ doc | jq(FILTER) | length }}` where `doc` is `{"items": [...]}`
//! of objects `{"id", "name", "tags"}`, for a projection (`[.items[].id]`),
//! a selection (`[.items[] | select(.id % 2 == 0) | .name]`) and a
//! rebuild (`.items | map({id, n: (.tags | length)})`). Also the first
//! call of a new filter (compiling it: jaq's standard library with it).
//!
//! Run with `cargo bench --bench jq`; figures are printed, not asserted.
//! Linear work shows as a time per KiB that stays flat down a column.

use std::time::{Duration, Instant};

/// Each figure is the mean over as many renders as fit in this (at least one).
const BUDGET: Duration = Duration::from_millis(500);

const FILTERS: [&str; 3] =
    ["[.items[].id]", "[.items[] | select(.id % 2 == 0) | .name]", ".items | map({id, n: (.tags | length)})"];

fn main() {
    println!("render time per call (ms), and per KiB of input (µs) in brackets");
    println!("{:>9} | {:>22} | {:>22} | {:>22}", "bytes", FILTERS[0], "select", "map");
    let mut target = 64 << 10;
    while target <= 1 << 20 {
        let (doc, bytes) = document(target);
        let cells: Vec<String> = FILTERS
            .iter()
            .map(|filter| {
                let millis = time(filter, &doc);
                format!("{millis:>10.2} [{:>8.2}]", millis * 1000.0 * 1024.0 / bytes as f64)
            })
            .collect();
        println!("{bytes:>9} | {}", cells.join(" | "));
        target *= 2;
    }
    let (doc, _) = document(1024);
    let started = Instant::now();
    render("[. as $unique_filter_for_the_bench | .items[].id]", &doc);
    println!("first call of a new filter (compile + run on 1 KiB): {:.2} ms", started.elapsed().as_secs_f64() * 1e3);
}

/// `{"items": [...]}` of about `target` bytes of JSON, and its size.
fn document(target: usize) -> (serde_json::Value, usize) {
    let mut items = Vec::new();
    let mut bytes = 12;
    let mut id = 0;
    while bytes < target {
        let item = serde_json::json!({ "id": id, "name": format!("item number {id}"), "tags": ["a", "bb", "ccc"] });
        bytes += item.to_string().len() + 1;
        items.push(item);
        id += 1;
    }
    let doc = serde_json::json!({ "items": items });
    let bytes = doc.to_string().len();
    (doc, bytes)
}

fn render(filter: &str, doc: &serde_json::Value) -> String {
    let mut env = carte::render::environment();
    let source = format!("{{{{ doc | jq({filter:?}) | length }}}}");
    env.add_template_owned("t", source).expect("a valid template");
    let context = minijinja::context! { doc => carte::render::to_value(doc) };
    carte::render::render_in(&env, "t", context).expect("the render succeeds")
}

/// Mean milliseconds per render of `filter` on `doc`.
fn time(filter: &str, doc: &serde_json::Value) -> f64 {
    render(filter, doc);
    let started = Instant::now();
    let mut runs = 0u32;
    while runs == 0 || started.elapsed() < BUDGET {
        render(filter, doc);
        runs += 1;
    }
    started.elapsed().as_secs_f64() * 1e3 / f64::from(runs)
}
