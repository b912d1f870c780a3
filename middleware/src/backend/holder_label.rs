//! Who holds a lock, as an operator reads it in the store: a label per locker, stored with
//! each grant — the host name and process id unless the locker was given one.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock, PoisonError};

/// The longest holder label, in bytes: stores keep it beside every grant.
pub(crate) const MAX_LABEL_LEN: usize = 128;

/// The label of a locker given none: `<host name>:<process id>`, as an operator finds the
/// process (`web-7f9c:4711`).
pub(crate) fn default_label() -> &'static str {
    static LABEL: OnceLock<&'static str> = OnceLock::new();
    LABEL.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok());
        let host = host.as_deref().map_or("", str::trim);
        let host = if host.is_empty() { "localhost" } else { host };
        interned(&format!("{host}:{}", std::process::id()))
    })
}

/// Whether `label` can be a holder label: 1 to [`MAX_LABEL_LEN`] bytes, no control
/// characters (it travels in store values and log lines).
pub(crate) fn is_valid(label: &str) -> bool {
    (1..=MAX_LABEL_LEN).contains(&label.len()) && !label.chars().any(char::is_control)
}

/// `label`, kept for the rest of the process so that a request can carry it by reference: a
/// process builds lockers with a handful of labels, each kept once.
pub(crate) fn interned(label: &str) -> &'static str {
    static LABELS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut labels = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = labels.get(label) {
        return kept;
    }
    let kept: &'static str = Box::leak(label.to_owned().into_boxed_str());
    labels.insert(kept);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_names_this_process() {
        let label = default_label();
        assert!(
            label.ends_with(&format!(":{}", std::process::id())),
            "{label}"
        );
        assert!(is_valid(label), "{label}");
    }

    #[test]
    fn a_label_is_kept_once() {
        let first = interned("worker-a");
        let second = interned(&String::from("worker-a"));
        assert!(std::ptr::eq(first, second));
    }

    #[test]
    fn empty_long_and_control_labels_are_refused() {
        assert!(!is_valid(""));
        assert!(!is_valid(&"x".repeat(MAX_LABEL_LEN + 1)));
        assert!(!is_valid("line\nbreak"));
        assert!(is_valid("web-1 (eu-west)"));
    }
}
