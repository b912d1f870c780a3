//! A fenced register per key: the data a lock protects, as a store that checks fencing tokens
//! keeps it. A read or write with a fence below the highest it has seen is refused, so a
//! holder whose lease was lost cannot overwrite what a newer holder read or wrote.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One key's value, the highest fence seen, and how many increments were acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Register {
    pub(crate) value: u64,
    pub(crate) highest_fence: u64,
    pub(crate) acknowledged: u64,
}

/// Every key's register.
#[derive(Debug, Default)]
pub(crate) struct Registers(Mutex<BTreeMap<String, Register>>);

impl Registers {
    /// The value of `key`, read under `fence`; `None`: refused, a newer fence was seen.
    pub(crate) fn read(&self, key: &str, fence: u64) -> Option<u64> {
        let mut registers = self.lock();
        let register = registers.entry(key.to_owned()).or_default();
        if fence < register.highest_fence {
            return None;
        }
        register.highest_fence = fence;
        Some(register.value)
    }

    /// Writes `value` to `key` under `fence`: whether it was taken.
    pub(crate) fn write(&self, key: &str, fence: u64, value: u64) -> bool {
        let mut registers = self.lock();
        let register = registers.entry(key.to_owned()).or_default();
        if fence < register.highest_fence {
            return false;
        }
        register.highest_fence = fence;
        register.value = value;
        register.acknowledged += 1;
        true
    }

    /// Every key's register, in key order.
    pub(crate) fn all(&self) -> BTreeMap<String, Register> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Register>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
