//! rmcp's log lines as an operator should read them: a client that went
//! away is not an error.
//!
//! When a client disconnects while a response is owed — a 2026-07-28 client
//! closing its `subscriptions/listen` stream (rmcp then ends the listen
//! request and owes it a final result), or any client leaving before its
//! answer is written — rmcp logs `failed to send pending response during
//! drain` or `fail to response message` at ERROR. Both only say that
//! there was nobody left to answer. [`ClientGone`] drops these two events;
//! carte logs the end of a listen stream itself, at debug. Every other rmcp
//! event passes as it is.

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// rmcp's messages that only mean the peer is gone.
const PEER_GONE: &[&str] = &["failed to send pending response during drain", "fail to response message"];

/// A layer that drops rmcp's "could not answer a client that left" errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientGone;

impl<S: Subscriber> Layer<S> for ClientGone {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if *meta.level() != Level::ERROR || !meta.target().starts_with("rmcp") {
            return true;
        }
        let mut message = Message::default();
        event.record(&mut message);
        !PEER_GONE.contains(&message.0.as_str())
    }
}

/// An event's `message` field.
#[derive(Default)]
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.0);
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Counts the events that reach it.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Seen {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            let mut message = Message::default();
            event.record(&mut message);
            self.0.lock().unwrap().push(message.0);
        }
    }

    #[test]
    fn only_rmcps_peer_gone_errors_are_dropped() {
        let seen = Seen::default();
        let subscriber = tracing_subscriber::registry().with(ClientGone).with(seen.clone());
        tracing::subscriber::with_default(subscriber, || {
            let error = "channel closed";
            tracing::error!(target: "rmcp::service", %error, "failed to send pending response during drain");
            tracing::error!(target: "rmcp::service", %error, "fail to response message");
            tracing::error!(target: "rmcp::service", %error, "fail to close sink");
            tracing::warn!(target: "rmcp::service", "failed to send pending response during drain");
            tracing::error!(target: "carte", "failed to send pending response during drain");
        });
        let seen = seen.0.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                "fail to close sink",
                "failed to send pending response during drain",
                "failed to send pending response during drain"
            ]
        );
    }
}
