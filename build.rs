//! Lays out the release `carte` binary: the functions start-up and a tool call
//! run (listed in `link/carte.order`, recorded by `link/record-order`) are
//! linked next to each other, so serving touches about 4 MiB of code in a
//! row instead of pages spread over the whole binary (idle memory and cold
//! start: see `link/README.md`).
//!
//! Only where the linker is LLD, which reads a symbol ordering file: the
//! default of Rust ≥ 1.90 on x86_64 Linux. Anywhere else the binary links as
//! before. A name the file lists that the binary lacks (code changed since it
//! was recorded) is skipped silently: a stale file costs memory, never a build.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=link/carte.order");
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    if env::var("PROFILE").as_deref() != Ok("release") || !default_linker_is_lld() {
        return;
    }
    let order = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default()).join("link/carte.order");
    println!("cargo::rustc-link-arg-bin=carte=-Wl,--symbol-ordering-file={}", order.display());
    println!("cargo::rustc-link-arg-bin=carte=-Wl,--no-warn-symbol-ordering");
}

/// Whether the binary is linked by rustc's own LLD: x86_64 Linux with glibc,
/// Rust 1.90 or later, and no linker chosen by the builder.
fn default_linker_is_lld() -> bool {
    if env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu") {
        return false;
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker") || env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some() {
        return false;
    }
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(output) = Command::new(rustc).arg("--version").output() else { return false };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&output.stdout);
    let minor = version.split_whitespace().nth(1).and_then(|v| v.split('.').nth(1)).and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|minor| minor >= 90)
}
