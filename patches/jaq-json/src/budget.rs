//! carte: a byte budget for the values one run builds.
//!
//! jaq counts no memory: `"x" * 1e10` or `. + .` doubled in a `reduce`
//! allocate without bound in a step or two. A host that runs each filter on
//! a thread of its own sets a budget there ([`set`]); from then on, every
//! string, array and object this crate builds on that thread is charged to
//! it. What builds a value from a size a filter chooses (repetition,
//! concatenation, big-number products) is refused *before* it allocates,
//! with an error; what builds a value in proportion to values that already
//! exist is charged after, and the host stops the run at its next step once
//! the budget is spent ([`spent`]). Without [`set`], nothing is counted.

#[cfg(feature = "std")]
std::thread_local! {
    static LEFT: core::cell::Cell<Option<usize>> = const { core::cell::Cell::new(None) };
    static LIMIT: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// Bytes an array item or object entry counts for (a [`crate::Val`] is 16
/// bytes; a map entry holds two and a hash).
pub const SLOT_BYTES: usize = 16;

/// Sets the budget of the values built on this thread from now on (`None`:
/// nothing is counted).
pub fn set(bytes: Option<usize>) {
    #[cfg(feature = "std")]
    {
        LEFT.with(|left| left.set(bytes));
        LIMIT.with(|limit| limit.set(bytes.unwrap_or(0)));
    }
    #[cfg(not(feature = "std"))]
    let _ = bytes;
}

/// Spends this thread's budget: the host stops the run at its next step.
pub fn spend() {
    #[cfg(feature = "std")]
    LEFT.with(|left| {
        if left.get().is_some() {
            left.set(Some(0));
        }
    });
}

/// Whether this thread's budget is spent.
pub fn spent() -> bool {
    #[cfg(feature = "std")]
    return LEFT.with(|left| left.get() == Some(0));
    #[cfg(not(feature = "std"))]
    false
}

/// The message of a refusal: what the budget was.
pub fn refusal() -> alloc::string::String {
    #[cfg(feature = "std")]
    let limit = LIMIT.with(|limit| limit.get());
    #[cfg(not(feature = "std"))]
    let limit = 0;
    let size = match limit {
        _ if limit >= 1 << 20 && limit % (1 << 20) == 0 => alloc::format!("{} MiB", limit >> 20),
        _ if limit >= 1 << 10 && limit % (1 << 10) == 0 => alloc::format!("{} KiB", limit >> 10),
        _ => alloc::format!("{limit} bytes"),
    };
    alloc::format!("the jq filter built more than {size} of values and was stopped")
}

/// Charges `bytes` about to be built; past the budget, refuses them and
/// spends it.
pub(crate) fn take(bytes: usize) -> Result<(), crate::Error> {
    #[cfg(feature = "std")]
    return LEFT.with(|left| match left.get() {
        Some(have) if bytes > have => {
            // A refusal spends the budget: a filter that catches it is
            // stopped at its next step.
            left.set(Some(0));
            Err(crate::Error::str(refusal()))
        }
        Some(have) => {
            left.set(Some(have - bytes));
            Ok(())
        }
        None => Ok(()),
    });
    #[cfg(not(feature = "std"))]
    {
        let _ = bytes;
        Ok(())
    }
}

/// Charges `bytes` just built; past the budget, it is spent ([`spent`]).
pub(crate) fn charge(bytes: usize) {
    #[cfg(feature = "std")]
    LEFT.with(|left| {
        if let Some(have) = left.get() {
            left.set(Some(have.saturating_sub(bytes)));
        }
    });
    #[cfg(not(feature = "std"))]
    let _ = bytes;
}
