//! What a client declared it can do, as the steps ask for it: the one
//! place that reads rmcp's `ClientCapabilities` for a step (the handler for
//! a request, the task runner for a task's client).

use rmcp::model::ClientCapabilities;

/// Whether `declared` holds `capability` (`elicitation`, `elicitation.url`, `sampling`, `roots`:
/// see `run::steps::capability`).
pub(crate) fn has_capability(declared: &ClientCapabilities, capability: &str) -> bool {
    match capability {
        "elicitation" => declared.elicitation.is_some(),
        "elicitation.url" => declared.elicitation.as_ref().is_some_and(|elicitation| elicitation.url.is_some()),
        "sampling" => declared.sampling.is_some(),
        "roots" => declared.roots.is_some(),
        _ => false,
    }
}
