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
//!
//! A catalog is swapped in only when the files it was built from held still
//! (see [`load_settled`]): no writer had one of them open, no change arrived
//! while loading or for a moment after, and every file still holds exactly
//! the bytes the load read. Otherwise the load is thrown away and done
//! again, so a file caught between an editor's truncate and its write — or
//! half-way through a slow write — never replaces a good catalog. A root
//! file of zero bytes is refused on reload: it is what a save in progress
//! looks like, and the catalog served before stays.
#![allow(deprecated)] // MCP logging is deprecated by SEP-2577 but part of every version carte serves

pub mod diff;
pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::catalog::model::LogLevel;
use crate::catalog::{self, Inputs};
use crate::server::{Shared, Snapshot};
use crate::{diag, metrics, telemetry};
use tracing::Instrument as _;
pub use watch::Mode;

/// The logger name of reload messages to clients.
pub const LOGGER: &str = "carte.reload";

/// How reloading is triggered.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Quiet time after the last change before loading; also how long the
    /// files must then hold still after a load before it is swapped in.
    pub debounce: Duration,
    /// How changes are noticed; `None` reloads only on SIGHUP.
    pub watch: Option<Mode>,
    /// `serve --examples`: a catalog whose examples fail is refused like an
    /// invalid one (see [`run_examples`]).
    pub examples: bool,
}

impl Options {
    /// How long a load's files must hold still after it: the debounce, and
    /// with polling at least one poll (changes are only seen at polls).
    fn hold(&self) -> Duration {
        match self.watch {
            Some(Mode::Poll(every)) => self.debounce.max(every),
            _ => self.debounce,
        }
    }
}

/// How long a reload waits for a writer to close a file it is writing in
/// place before loading the file as it is: long enough for a slow
/// generator behind a `>` redirect (or a stalled disk), short enough that a
/// process keeping a file open for good delays reloads only this long.
pub const MAX_WRITE_WAIT: Duration = Duration::from_secs(30);

/// What one attempt to reload produced.
enum Outcome {
    /// A new snapshot, and what changed.
    Valid { next: Box<Snapshot>, diff: diff::Diff, warnings: Vec<diag::Diagnostic> },
    /// The catalog on disk is invalid; the old one stays.
    Invalid { diagnostics: Vec<diag::Diagnostic> },
}

/// The watch on a catalog's files, started before the catalog's first load
/// (its thread starts while the catalog loads); [`run`] names what to watch.
pub struct Watching {
    watch: Option<watch::Watch>,
    changes: mpsc::UnboundedReceiver<()>,
}

impl Watching {
    /// Starts watching nothing yet, as `options` say (`None`: no watch).
    pub fn start(options: &Options) -> Watching {
        let (changed, changes) = mpsc::unbounded_channel();
        let watch = options.watch.and_then(|mode| {
            watch::Watch::new(mode, changed)
                .map_err(|err| tracing::error!("cannot watch the catalog's files ({err}); reload with SIGHUP instead"))
                .ok()
        });
        Watching { watch, changes }
    }
}

/// Reloads `root` into `shared` whenever its files change (as `watching`
/// sees them) or SIGHUP arrives, until `shutdown` completes. `inputs` are
/// those of the catalog being served.
pub async fn run(
    root: PathBuf,
    shared: Arc<Shared>,
    inputs: Inputs,
    options: Options,
    watching: Watching,
    shutdown: impl Future<Output = ()>,
) {
    let Watching { mut watch, mut changes } = watching;
    // Here, at once (this task is queued before serving's first one): a
    // client that saves a file right after `initialize` has its writer
    // waited for like any other (tests/it/reload.rs
    // a_slow_writer_is_waited_for). Set up later, beside serving, the watch
    // would miss that writer's open and load the file half-written.
    let mut served_inputs = inputs;
    if let Some(watch) = &mut watch {
        watch.follow(&served_inputs);
    }
    let writers = watch.as_ref().map(watch::Watch::writers);
    // A save during the start-up load is older than the watch: look for one.
    // On this thread: the few files the load has just read, from the page
    // cache, cost less to read again than a thread of the blocking pool to
    // start.
    let mut stale = watch.is_some() && served_inputs.changed().is_some();
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|err| tracing::warn!("SIGHUP will not reload: {err}"))
        .ok();
    tokio::pin!(shutdown);
    loop {
        if std::mem::take(&mut stale) {
            tracing::info!("the catalog changed while it was loaded at start-up; reloading");
        } else {
            tokio::select! {
                () = &mut shutdown => return,
                Some(()) = changes.recv() => settle(&mut changes, options.debounce).await,
                Some(()) = async { match &mut hangup { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                    tracing::info!("SIGHUP: reloading {}", root.display());
                }
            }
        }
        // Exported while traces are on (a root span: no request asked for it).
        let span = tracing::info_span!(
            target: telemetry::TARGET,
            "reload",
            carte.reload.outcome = tracing::field::Empty,
            carte.generation = tracing::field::Empty,
        );
        let loading = load_settled(&root, &shared, &mut changes, writers.as_ref(), options).instrument(span.clone());
        let loaded = tokio::select! {
            () = &mut shutdown => return,
            loaded = loading => loaded,
        };
        let Some((outcome, inputs)) = loaded else {
            telemetry::failed(&span, "load_failed");
            continue;
        };
        let outcome = match options.examples {
            true => run_examples(&root, outcome).instrument(span.clone()).await,
            false => outcome,
        };
        let outcome = apply_setup(&root, outcome).instrument(span.clone()).await;
        match &outcome {
            Outcome::Valid { next, .. } => {
                span.record("carte.reload.outcome", "swapped");
                span.record("carte.generation", i64::try_from(next.generation).unwrap_or(i64::MAX));
            }
            Outcome::Invalid { .. } => {
                span.record("carte.reload.outcome", "invalid");
                telemetry::failed(&span, "invalid_catalog");
            }
        }
        drop(span);
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
        apply(&shared, outcome).await;
    }
}

/// Loads `root` until a load's files held still: nobody was writing one of
/// them, no change arrived during the load or for [`Options::hold`] after
/// it, and each file still holds the bytes the load read. Returns `None` if
/// loading failed unexpectedly.
async fn load_settled(
    root: &Path,
    shared: &Shared,
    changes: &mut mpsc::UnboundedReceiver<()>,
    writers: Option<&watch::Writers>,
    options: Options,
) -> Option<(Outcome, Inputs)> {
    loop {
        wait_for_writers(writers, changes, options.debounce).await;
        // Changes so far are what this load reads; only later ones count.
        while changes.try_recv().is_ok() {}
        let current = shared.snapshot();
        let subscribed = shared.hub.subscribed_uris();
        let path = root.to_path_buf();
        let started = Instant::now();
        let attempt = tokio::task::spawn_blocking(move || prepare(&path, &current, &subscribed)).await;
        let (outcome, inputs) = match attempt {
            Ok(attempt) => attempt,
            Err(err) => {
                unexpected(&err);
                return None;
            }
        };
        tracing::debug!("catalog loaded in {:?}", started.elapsed());
        // A writer between its truncate and its write, or pausing in the
        // middle, shows up now: as an event, an open file, or other bytes.
        tokio::time::sleep(options.hold()).await;
        let moved = if !changes.is_empty() {
            "files changed while loading".to_owned()
        } else if let Some((file, _)) = writers.and_then(watch::Writers::oldest) {
            format!("`{}` is being written", file.display())
        } else {
            let checked = tokio::task::spawn_blocking(move || {
                let changed = inputs.changed().map(|file| format!("`{}` changed while loading", file.display()));
                (inputs, changed)
            })
            .await;
            match checked {
                Ok((inputs, None)) => return Some((outcome, inputs)),
                Ok((_, Some(changed))) => changed,
                Err(err) => {
                    unexpected(&err);
                    return None;
                }
            }
        };
        tracing::debug!("{moved}; loading again once the files settle");
        // Freeing a large catalog takes a while: not on the thread that answers requests.
        tokio::task::spawn_blocking(move || drop(outcome));
        settle(changes, options.debounce).await;
    }
}

/// Logs a load's blocking work that ended without a result: an error when
/// it panicked, nothing to worry about when the runtime is shutting down.
fn unexpected(err: &tokio::task::JoinError) {
    if err.is_cancelled() {
        tracing::debug!("a reload stopped: the server is shutting down");
    } else {
        tracing::error!("reload failed unexpectedly: {err}");
    }
}

/// Waits while a file of the catalog is being written in place (modified
/// and not closed yet), for at most [`MAX_WRITE_WAIT`] per writer.
async fn wait_for_writers(
    writers: Option<&watch::Writers>,
    changes: &mut mpsc::UnboundedReceiver<()>,
    debounce: Duration,
) {
    let Some(writers) = writers else { return };
    while let Some((file, since)) = writers.oldest() {
        tracing::debug!("waiting for `{}` to be closed by its writer", file.display());
        let deadline = tokio::time::Instant::from_std(since + MAX_WRITE_WAIT);
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Ok(Some(())) => settle(changes, debounce).await,
            Ok(None) => return,
            Err(_) => {
                tracing::warn!(
                    "`{}` has been open for writing for {MAX_WRITE_WAIT:?}; loading it as it is",
                    file.display()
                );
                writers.forget();
            }
        }
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
    if loaded.inputs.len_read(root) == Some(0) {
        let mut empty = diag::Diagnostic::error(
            "empty-file",
            diag::Location::file_start(root),
            format!("the catalog file `{}` is empty", root.display()),
        );
        empty.hint = Some("an editor leaves a file empty between truncating and writing it; the catalog served before stays until the file has content".to_owned());
        return (Outcome::Invalid { diagnostics: vec![empty] }, loaded.inputs);
    }
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

/// With `--examples`: runs the examples of a valid catalog before anything
/// of it is applied; a failing one refuses it like an invalid catalog. The
/// examples run on a copy loaded on its own (the next snapshot shares its
/// databases with the one serving, which examples must not touch).
async fn run_examples(root: &Path, outcome: Outcome) -> Outcome {
    if !matches!(outcome, Outcome::Valid { .. }) {
        return outcome;
    }
    let failed = examples_failing(root).await;
    if failed.is_empty() { outcome } else { Outcome::Invalid { diagnostics: failed } }
}

/// A diagnostic for each example of the catalog at `root` that fails
/// (loaded afresh, its examples run on scratch databases; see
/// [`crate::examples`]); the catalog's own errors if it no longer loads.
pub async fn examples_failing(root: &Path) -> Vec<diag::Diagnostic> {
    match crate::examples::run_at(root).await {
        Ok(verdicts) => verdicts.iter().filter(|v| !v.passed()).map(crate::examples::Verdict::diagnostic).collect(),
        Err(diagnostics) => diagnostics,
    }
}

/// Applies a valid catalog's database `setup` (on the blocking pool), just
/// before the swap: loading changed no database; if applying fails, the
/// catalog is rejected like an invalid one, and the old one stays.
async fn apply_setup(root: &Path, outcome: Outcome) -> Outcome {
    let Outcome::Valid { next, diff, warnings } = outcome else { return outcome };
    match tokio::task::spawn_blocking(move || {
        let applied = next.catalog.apply_setup();
        (next, applied)
    })
    .await
    {
        Ok((next, Ok(()))) => Outcome::Valid { next, diff, warnings },
        Ok((_, Err(diagnostics))) => Outcome::Invalid { diagnostics },
        Err(err) => Outcome::Invalid {
            diagnostics: vec![diag::Diagnostic::error(
                "database-setup",
                diag::Location::file_start(root),
                format!("applying the databases' setup failed unexpectedly: {err}"),
            )],
        },
    }
}

/// Swaps in a valid catalog and announces it, or reports an invalid one.
/// What changed is announced once: the lists, and the subscribed resources
/// whose contents differ — those that read a database read again with the
/// new catalog first.
async fn apply(shared: &Shared, outcome: Outcome) {
    match outcome {
        Outcome::Valid { next, mut diff, warnings } => {
            let generation = next.generation;
            let fingerprint = next.fingerprint.clone();
            shared.record_reload(None);
            metrics::reload(metrics::Reload::Accepted);
            if !warnings.is_empty() {
                eprint!("{}", diag::render_human(&warnings));
            }
            let previous = shared.replace(Arc::new(*next));
            // Freeing a large catalog takes a while: not on the thread that answers requests.
            tokio::task::spawn_blocking(move || drop(previous));
            crate::live::heard(shared, &diff.changes.updated);
            let live = crate::live::reread_subscribed(shared, None).await;
            diff.changes.updated.extend(live);
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
            let report = crate::server::hub::Report { level: LogLevel::Info, logger: LOGGER, data: &data };
            shared.hub.announce(&diff.changes, Some(&report));
        }
        Outcome::Invalid { diagnostics } => {
            let served = shared.snapshot();
            let generation = served.generation;
            let text = diag::render_human(&diagnostics);
            shared.record_reload(Some(text.clone()));
            metrics::reload(metrics::Reload::Rejected);
            tracing::error!("the catalog has errors; still serving generation {generation}\n{}", text.trim_end());
            // The same shape as an accepted reload's report, with the diagnostics.
            let diagnostics: Value = serde_json::from_str(&diag::render_json(&diagnostics)).unwrap_or_default();
            shared.hub.log(
                LogLevel::Error,
                LOGGER,
                json!({
                    "message": format!("the catalog has errors; still serving generation {generation}\n{text}"),
                    "generation": generation,
                    "fingerprint": served.fingerprint,
                    "diagnostics": diagnostics,
                }),
            );
        }
    }
}
