//! Hot reload: notice a change, wait for the burst to end, load the new
//! catalog off to the side, and either swap it in and tell every client what
//! changed, or keep serving the old one and tell them why not.
//!
//! - [`watch`]: which folders to watch and which events matter;
//! - [`diff`]: what changed between two snapshots, as clients see it.
//!
//! Loading runs on the blocking pool, never on the request path: requests go
//! on being answered from the current snapshot while the next one is built,
//! and those in flight at the swap finish on the snapshot they started with.
//! A load during which more changes arrived is thrown away and done again,
//! so a file seen half-written never replaces a good catalog.
#![allow(deprecated)] // MCP logging is deprecated by SEP-2577 but part of every version carte serves

pub mod diff;
pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::LoggingLevel;
use serde_json::json;
use tokio::sync::mpsc;

use crate::catalog::{self, Inputs};
use crate::diag;
use crate::server::{Shared, Snapshot};
pub use watch::Mode;

/// The logger name of reload messages to clients.
pub const LOGGER: &str = "carte.reload";

/// How reloading is triggered.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Quiet time after the last change before loading.
    pub debounce: Duration,
    /// How changes are noticed; `None` reloads only on SIGHUP.
    pub watch: Option<Mode>,
}

/// What one attempt to reload produced.
enum Outcome {
    /// A new snapshot, and what changed.
    Valid { next: Box<Snapshot>, diff: diff::Diff, warnings: Vec<diag::Diagnostic> },
    /// The catalog on disk is invalid; the old one stays.
    Invalid { diagnostics: Vec<diag::Diagnostic> },
}

/// Reloads `root` into `shared` whenever its files change or SIGHUP
/// arrives, until `shutdown` completes. `inputs` are those of the catalog
/// being served.
pub async fn run(
    root: PathBuf,
    shared: Arc<Shared>,
    inputs: Inputs,
    options: Options,
    shutdown: impl Future<Output = ()>,
) {
    let (changed, mut changes) = mpsc::unbounded_channel();
    let mut watch = match options.watch {
        None => None,
        Some(mode) => match watch::Watch::new(mode, changed) {
            Ok(watch) => Some(watch),
            Err(err) => {
                tracing::error!("cannot watch the catalog's files ({err}); reload with SIGHUP instead");
                None
            }
        },
    };
    let mut served_inputs = inputs;
    if let Some(watch) = &mut watch {
        watch.follow(&served_inputs);
    }
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|err| tracing::warn!("SIGHUP will not reload: {err}"))
        .ok();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            Some(()) = changes.recv() => settle(&mut changes, options.debounce).await,
            Some(()) = async { match &mut hangup { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                tracing::info!("SIGHUP: reloading {}", root.display());
            }
        }
        // Load until no change arrived during the load.
        let loaded = loop {
            while changes.try_recv().is_ok() {}
            let current = shared.snapshot();
            let subscribed = shared.hub.subscribed_uris();
            let path = root.clone();
            let started = Instant::now();
            let attempt = tokio::task::spawn_blocking(move || prepare(&path, &current, &subscribed)).await;
            let attempt = match attempt {
                Ok(attempt) => attempt,
                Err(err) => {
                    tracing::error!("reload failed unexpectedly: {err}");
                    break None;
                }
            };
            if changes.is_empty() {
                tracing::debug!("catalog loaded in {:?}", started.elapsed());
                break Some(attempt);
            }
            tracing::debug!("files changed while loading; waiting for them to settle");
            settle(&mut changes, options.debounce).await;
        };
        let Some((outcome, inputs)) = loaded else { continue };
        // Watch what this load read, and keep watching what the served catalog reads.
        let mut watched = inputs.clone();
        if matches!(outcome, Outcome::Valid { .. }) {
            served_inputs = inputs;
        } else {
            watched.merge(served_inputs.clone());
        }
        if let Some(watch) = &mut watch {
            watch.follow(&watched);
        }
        apply(&shared, outcome);
    }
}

/// Waits for the next change, then until none has arrived for `debounce`.
/// Returns `false` when no more changes can come.
pub async fn next_change(changes: &mut mpsc::UnboundedReceiver<()>, debounce: Duration) -> bool {
    if changes.recv().await.is_none() {
        return false;
    }
    settle(changes, debounce).await;
    true
}

/// Waits until no change has arrived for `debounce`.
async fn settle(changes: &mut mpsc::UnboundedReceiver<()>, debounce: Duration) {
    loop {
        match tokio::time::timeout(debounce, changes.recv()).await {
            Ok(Some(())) => continue,
            Ok(None) | Err(_) => return,
        }
    }
}

/// Loads and compares, on the blocking pool.
fn prepare(root: &Path, current: &Snapshot, subscribed: &std::collections::BTreeSet<String>) -> (Outcome, Inputs) {
    let loaded = catalog::reload(root, &current.catalog);
    let outcome = match loaded.catalog {
        Some(catalog) => {
            let next = Box::new(Snapshot::with_generation(catalog, current.generation + 1));
            let diff = diff::compare(current, &next, subscribed);
            Outcome::Valid { next, diff, warnings: loaded.diagnostics }
        }
        None => Outcome::Invalid { diagnostics: loaded.diagnostics },
    };
    (outcome, loaded.inputs)
}

/// Swaps in a valid catalog and announces it, or reports an invalid one.
fn apply(shared: &Shared, outcome: Outcome) {
    match outcome {
        Outcome::Valid { next, diff, warnings } => {
            let generation = next.generation;
            let fingerprint = next.fingerprint.clone();
            shared.record_reload(None);
            if !warnings.is_empty() {
                eprint!("{}", diag::render_human(&warnings));
            }
            let previous = shared.replace(Arc::new(*next));
            // Freeing a large catalog takes a while: not on the thread that answers requests.
            tokio::task::spawn_blocking(move || drop(previous));
            let updated: Vec<&str> = diff.changes.updated.iter().map(String::as_str).collect();
            tracing::info!("reloaded (generation {generation}): {}", diff.summary_for(&updated));
            // Each session's report names only the resources it subscribed to.
            let data = |updated: &[&str]| {
                json!({
                    "message": format!("catalog reloaded: {}", diff.summary_for(updated)),
                    "generation": generation,
                    "fingerprint": fingerprint,
                })
            };
            let report = crate::server::hub::Report { level: LoggingLevel::Info, logger: LOGGER, data: &data };
            shared.hub.announce(&diff.changes, Some(&report));
        }
        Outcome::Invalid { diagnostics } => {
            let generation = shared.snapshot().generation;
            let text = diag::render_human(&diagnostics);
            shared.record_reload(Some(text.clone()));
            tracing::error!("the catalog has errors; still serving generation {generation}\n{}", text.trim_end());
            shared.hub.log(
                LoggingLevel::Error,
                LOGGER,
                json!(format!("the catalog has errors; still serving generation {generation}\n{text}")),
            );
        }
    }
}
