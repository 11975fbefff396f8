//! In-process benchmarks of the parts the binary is built from: loading and
//! validating a generated 10,000-tool catalog (time and peak memory), and
//! answering `tools/call get_quote` and `tools/list` from the shipped
//! Reservo catalog without any transport.
//!
//! Run with `cargo bench`; figures are printed, not asserted (machines are noisy).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use carte::server::{ListKind, Snapshot, View};
use serde_json::{Map, Value, json};

const TOOLS: usize = 10_000;

/// The system allocator, counting live heap bytes and their peak, so the
/// bench can say exactly what loading costs in memory.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn mib(bytes: usize) -> f64 {
    bytes as f64 / 1048576.0
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-catalog");
    std::fs::create_dir_all(&dir).expect("cannot create the bench folder");
    let big = dir.join("tools-10k.yaml");
    std::fs::write(&big, generated_catalog(TOOLS)).expect("cannot write the generated catalog");
    let bytes = std::fs::metadata(&big).map(|m| m.len()).unwrap_or(0);

    let mut times = Vec::new();
    let mut heap_peak = 0;
    let mut heap_kept = 0;
    for _ in 0..3 {
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let started = Instant::now();
        let loaded = carte::catalog::load(&big);
        times.push(started.elapsed());
        heap_peak = PEAK.load(Ordering::Relaxed) - base;
        heap_kept = LIVE.load(Ordering::Relaxed) - base;
        let catalog = loaded.catalog.expect("the generated catalog is valid");
        assert_eq!(catalog.tools.len(), TOOLS);
    }
    times.sort();
    println!(
        "load+validate {TOOLS} tools ({:.1} MiB of YAML): min {:.0} ms, median {:.0} ms; heap peak while loading {:.0} MiB, kept by the catalog {:.0} MiB; process peak RSS {:.0} MiB",
        bytes as f64 / 1048576.0,
        ms(times[0]),
        ms(times[1]),
        mib(heap_peak),
        mib(heap_kept),
        peak_rss_kb() as f64 / 1024.0,
    );

    let reservo = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogs/reservo.yaml");
    // SAFETY: single-threaded at this point; the variable is read by the catalog loader below.
    unsafe { std::env::set_var("RESERVO_DATABASE_URL", "sqlite::memory:") };
    let started = Instant::now();
    let snapshot = View::all(std::sync::Arc::new(Snapshot::new(
        carte::catalog::load(&reservo).catalog.expect("reservo.yaml is valid"),
    )));
    let first_load = started.elapsed();
    let again = time_per_iteration(50, || {
        std::hint::black_box(carte::catalog::load(&reservo).catalog.expect("reservo.yaml is valid"));
    });
    println!(
        "load+validate reservo.yaml: first {:.2} ms (schemas compiled once per process), then {:.2} ms",
        ms(first_load),
        again / 1000.0
    );
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("cannot start a tokio runtime");
    let arguments: Map<String, Value> =
        json!({ "room": "Focus", "tier": "pro", "hours": 3 }).as_object().cloned().unwrap_or_default();
    let per_call = time_per_iteration(100_000, || {
        let result = runtime.block_on(snapshot.call_tool_json(
            "get_quote",
            Some(arguments.clone()),
            &carte::run::steps::NoClient::default(),
        ));
        std::hint::black_box(serde_json::to_vec(&result.expect("get_quote answers")).expect("serializes"));
    });
    println!("tools/call get_quote, in process (validate, render, serialize): {:.2} µs", per_call);
    let per_list = time_per_iteration(100_000, || {
        let result = snapshot.list_page(ListKind::Tools, None).expect("tools/list answers");
        std::hint::black_box(serde_json::to_vec(&result).expect("serializes"));
    });
    println!("tools/list, in process (page + serialize): {:.2} µs", per_list);
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn time_per_iteration(iterations: u32, mut body: impl FnMut()) -> f64 {
    for _ in 0..iterations / 10 {
        body();
    }
    let started = Instant::now();
    for _ in 0..iterations {
        body();
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(iterations)
}

/// The process's peak resident set (VmHWM), in KiB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:").and_then(|v| v.trim().split(' ').next()?.parse().ok()))
        })
        .unwrap_or(0)
}

/// A catalog of `count` tools, each with a two-property schema and a template using both.
fn generated_catalog(count: usize) -> String {
    let mut yaml = String::from("server:\n  name: bench\n  version: 1.0.0\ndata:\n  unit: cents\ntools:\n");
    for idx in 0..count {
        yaml.push_str(&format!(
            "  - name: tool_{idx:05}\n    description: Tool number {idx}, which quotes a price for a room and a number of hours.\n    inputSchema:\n      type: object\n      properties:\n        room: {{ type: string, enum: [Focus, Studio, Boardroom] }}\n        hours: {{ type: integer, minimum: 1 }}\n      required: [room, hours]\n    run:\n      text: \"{{{{ room }}}} for {{{{ hours }}}} h (tool {idx}) in {{{{ data.unit }}}}\"\n"
        ));
    }
    yaml
}
