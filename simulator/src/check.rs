//! What is checked after every run, and what a run comes to: its violations, its digest (a
//! hash of its whole history), and the history itself to show a violation with.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tower_lock::testing::history::Verdict;

use crate::register::Register;
use crate::workload::Call;

/// Everything a run left.
pub(crate) struct Run {
    pub(crate) seed: u64,
    /// The history checker's verdict on every process's holds.
    pub(crate) verdict: Verdict,
    /// Every time a holder believed it held a lock the store's record says it did not.
    pub(crate) uncovered: Vec<String>,
    /// Every process's recorded holds, by pid.
    pub(crate) recorded: BTreeMap<u64, String>,
    /// Every process's calls to the store, by pid: when each was sent, what it asked, its fate;
    /// under pid 0, what the store and the run did (announcements, the plan, processes started,
    /// paused and killed, failovers).
    pub(crate) store_calls: BTreeMap<u64, Vec<(Duration, String)>>,
    pub(crate) calls: Vec<Call>,
    pub(crate) registers: BTreeMap<String, Register>,
    pub(crate) granted: u64,
    pub(crate) processes: usize,
    pub(crate) faults: u64,
    /// Found while it ran.
    pub(crate) violations: Vec<String>,
    /// Whether to write the history out (a seed run alone), not only digest it.
    pub(crate) history: bool,
}

/// What a run comes to.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub seed: u64,
    /// A hash of the whole history: every hold, every call and its answer, every register.
    pub digest: String,
    pub violations: Vec<String>,
    /// Processes (restarts included), acquisitions granted, calls, faults struck.
    pub summary: String,
    /// Every event of the run in time order: what shows a violation.
    pub history: String,
}

/// Checks `run`: the history checker (no two holders at once unless fenced out or told, no
/// semaphore past its permits), no lost update, every caller answered within its wait and
/// one store call.
pub(crate) fn judge(run: Run) -> Outcome {
    let mut violations = run.violations;
    let verdict = &run.verdict;
    match (verdict.holds_up(), run.uncovered.is_empty()) {
        (false, false) => violations.push(format!(
            "{} overlapping holds none of whose holders was told it had lost the lock: {}",
            verdict.unfenced_unreported,
            verdict.examples.join("; ")
        )),
        (false, true) => violations.push(format!(
            "the history checker blames holders the store's record clears (a checker bug, or \
             the store granted twice): {}",
            verdict.examples.join("; ")
        )),
        (true, _) => {}
    }
    violations.extend(run.uncovered.iter().map(|uncovered| {
        format!("a holder believed it held a lock the store did not hold for it: {uncovered}")
    }));
    for (key, register) in &run.registers {
        if register.value != register.acknowledged {
            violations.push(format!(
                "{key}: {} increments acknowledged but the value is {}: an update was lost",
                register.acknowledged, register.value
            ));
        }
    }
    for call in run.calls.iter().filter(|call| call.took > call.bound) {
        violations.push(format!(
            "p{}'s {} (asked at {:?}) was answered after {:?}, past its wait and one store call ({:?}): {}",
            call.pid, call.op, call.started, call.took, call.bound, call.outcome
        ));
    }
    let mut events: Vec<(u128, String)> = Vec::new();
    let mut digest = Fnv::default();
    for (pid, lines) in &run.recorded {
        for line in lines.lines() {
            // Tokio's task ids count across runs in one OS process: not part of a run.
            let line = without_task(line);
            digest.add(&line);
            if run.history {
                let at = serde_json::from_str::<serde_json::Value>(&line)
                    .map_or(0, |event| event["at"].as_u64().unwrap_or_default());
                events.push((at.into(), format!("p{pid} {line}")));
            }
        }
    }
    for (pid, calls) in &run.store_calls {
        for (sent, call) in calls {
            let line = match pid {
                0 => call.clone(),
                pid => format!("p{pid} sends {call}"),
            };
            digest.add(&line);
            if run.history {
                events.push((sent.as_nanos(), line));
            }
        }
    }
    for call in &run.calls {
        let line = format!(
            "p{} {} at {:?} took {:?}: {}",
            call.pid, call.op, call.started, call.took, call.outcome
        );
        digest.add(&line);
        if run.history {
            events.push((call.started.as_nanos(), line));
        }
    }
    for (key, register) in &run.registers {
        digest.add(&format!("{key} {register:?}"));
    }
    events.sort_by_key(|(at, _)| *at);
    let mut history = String::new();
    for (at, event) in &events {
        let _ = writeln!(history, "{:>12.3} ms  {event}", *at as f64 / 1e6);
    }
    Outcome {
        seed: run.seed,
        digest: digest.hex(),
        violations,
        summary: format!(
            "{} processes, {} acquisitions granted of {} calls, {} faults",
            run.processes,
            run.granted,
            run.calls.len(),
            run.faults
        ),
        history,
    }
}

/// A recorded line without its `"task":N,` field.
fn without_task(line: &str) -> String {
    let Some(start) = line.find("\"task\":") else {
        return line.to_owned();
    };
    let end = (line[start..].find(',')).map_or(line.len(), |comma| start + comma + 1);
    format!("{}{}", &line[..start], &line[end..])
}

/// FNV-1a, 64 bits: the digest needs to tell histories apart, not to resist anybody.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn add(&mut self, text: &str) {
        for byte in text.bytes().chain([b'\n']) {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}
