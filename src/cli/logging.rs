//! Where the command's logs and traces go: log lines to stderr (text or
//! JSON, secrets redacted), and spans to an OTLP collector when the
//! environment names one.

use super::LogFormat;

/// Logs to stderr, and traces to an OTLP collector when the environment
/// names one (see `carte::telemetry`): the exporter, to flush at exit.
pub(crate) fn init(format: LogFormat) -> Option<carte::telemetry::Tracing> {
    use carte::telemetry::TARGET;
    use std::io::IsTerminal as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (traces, trace_problem) = match carte::telemetry::Tracing::from_env() {
        Ok(traces) => (traces, None),
        Err(problem) => (None, Some(problem)),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("CARTE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=error"));
    let filter = carte::telemetry::gate(filter, traces.is_some());
    let logs = tracing_subscriber::fmt::layer().with_writer(|| RedactedStderr(std::io::stderr())).with_target(false);
    let logs = match format {
        LogFormat::Json => logs.json().boxed(),
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).boxed(),
    };
    // The spans for export are never log lines (off, the global filter disabled them already).
    let logs = match traces {
        Some(_) => logs
            .with_filter(Targets::new().with_default(LevelFilter::TRACE).with_target(TARGET, LevelFilter::OFF))
            .boxed(),
        None => logs,
    };
    // A client that leaves is not an error (see `server::logs`).
    tracing_subscriber::registry()
        .with(filter)
        .with(carte::server::logs::ClientGone)
        .with(traces.as_ref().map(|traces| traces.layer()))
        .with(logs)
        .init();
    if let Some(problem) = trace_problem {
        tracing::warn!("traces are off: {problem}");
    }
    traces
}

/// stderr for `tracing`, with secrets from `${VAR}` hidden: each event is
/// formatted whole and written in one call, so a secret is never split
/// across two writes.
struct RedactedStderr(std::io::Stderr);

impl std::io::Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(carte::secret::redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
